package outbound_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/outbound"
)

// A client of an API that allows 5 requests per second: the Transport
// spends at most that, and when the API refuses anyway it waits what the
// API asked and sends the request again.
func Example() {
	var calls atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 2 {
			// The API is busier than its quota says.
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		fmt.Fprintln(w, "ok")
	}))
	defer api.Close()

	store := memstore.New(memstore.Options{})
	defer store.Close()
	budget, err := floodgate.New(store, floodgate.Policy{
		Name:   "partner-api",
		Limits: []floodgate.Limit{floodgate.PerSecond(5)},
	})
	if err != nil {
		log.Fatal(err)
	}
	tr, err := outbound.New(outbound.Options{Limiter: budget})
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: tr}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 3 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, api.URL, nil)
		resp, err := client.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(resp.Status)
	}
	fmt.Println("calls the API saw:", calls.Load())
	// Output:
	// 200 OK
	// 200 OK
	// 200 OK
	// calls the API saw: 4
}

// A request whose deadline is shorter than the wait fails at once, unsent
// and uncharged, instead of waiting out its deadline.
func ExampleErrDeadline() {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer api.Close()
	store := memstore.New(memstore.Options{})
	defer store.Close()
	budget, _ := floodgate.New(store, floodgate.Policy{Name: "nightly", Limits: []floodgate.Limit{floodgate.PerHour(1)}})
	tr, _ := outbound.New(outbound.Options{Limiter: budget})
	client := tr.Client()

	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, api.URL, nil)
		resp, err := client.Do(req)
		cancel()
		switch {
		case errors.Is(err, outbound.ErrDeadline):
			fmt.Println("not sent: the budget has no unit within the deadline")
		case err != nil:
			log.Fatal(err)
		default:
			resp.Body.Close()
			fmt.Println(resp.Status)
		}
	}
	// Output:
	// 200 OK
	// not sent: the budget has no unit within the deadline
}
