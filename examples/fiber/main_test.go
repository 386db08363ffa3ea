package main

import (
	"net/http/httptest"
	"testing"

	"github.com/floodgate-go/floodgate/memstore"
)

func TestPlans(t *testing.T) {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	app := newApp(store)
	count := func(key string) int {
		n := 0
		for range 201 {
			req := httptest.NewRequest("GET", "/hello", nil)
			req.Header.Set("X-Forwarded-For", key) // never trusted: all share one address
			if key == "pro" {
				req.Header.Set("X-Api-Key", "pro-key")
			}
			resp, err := app.Test(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode == 200 {
				n++
			}
		}
		return n
	}
	if n := count("free"); n != 100 {
		t.Errorf("free plan: %d requests passed, want 100", n)
	}
	if n := count("pro"); n != 200 {
		t.Errorf("pro plan: %d requests passed, want 200", n)
	}
}
