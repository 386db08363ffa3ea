package main

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/floodgate-go/floodgate/memstore"
)

// Clients that make up X-Forwarded-For values are keyed by their own
// address: the 101st request is refused whatever it claims.
func TestSpoofedForwardedFor(t *testing.T) {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	e, err := newEcho(store)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e)
	defer srv.Close()
	for i := range 101 {
		req, _ := http.NewRequest("GET", srv.URL+"/hello", nil)
		req.Header.Set("X-Forwarded-For", "198.51.100."+strconv.Itoa(i))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := http.StatusOK
		if i == 100 {
			want = http.StatusTooManyRequests
		}
		if resp.StatusCode != want {
			t.Fatalf("request %d: %d, want %d", i+1, resp.StatusCode, want)
		}
	}
}
