// A user's first program with floodgate: a limited net/http server on
// loopback, checked with a real client. It exits non-zero when the limit
// does not hold.
package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit/quick"
	"github.com/floodgate-go/floodgate/memstore"
)

func main() {
	mux := http.NewServeMux()
	mux.Handle("/", quick.LimitByIP(2, time.Minute)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})))
	codes := serve(mux, 3)
	if codes != "200 200 429" {
		log.Fatalf("quick.LimitByIP(2, time.Minute) answered %s, want 200 200 429", codes)
	}

	store := memstore.New(memstore.Options{})
	defer store.Close()
	lim, err := floodgate.New(store, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerSecond(10), floodgate.PerHour(1000)}})
	if err != nil {
		log.Fatal(err)
	}
	res, err := lim.AllowN(context.Background(), "user:42", 10)
	if err != nil || !res.Allowed || res.Remaining != 0 {
		log.Fatalf("10 units of 10/s: %+v, %v", res, err)
	}
	fmt.Fprintln(os.Stderr, "library: ok")
}

// serve serves h on a loopback port and sends it n requests.
func serve(h http.Handler, n int) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	codes := ""
	for i := range n {
		resp, err := http.Get("http://" + ln.Addr().String() + "/")
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		if i > 0 {
			codes += " "
		}
		codes += fmt.Sprint(resp.StatusCode)
	}
	return codes
}
