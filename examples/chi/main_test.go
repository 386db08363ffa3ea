package main

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/floodgate-go/floodgate/memstore"
)

func TestRouteBudget(t *testing.T) {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	h, err := newRouter(store)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	for i := range 11 {
		resp, err := http.Get(srv.URL + "/items/" + string(rune('a'+i)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := http.StatusOK
		if i == 10 {
			want = http.StatusTooManyRequests
		}
		if resp.StatusCode != want {
			t.Fatalf("request %d: %d, want %d", i+1, resp.StatusCode, want)
		}
	}
}
