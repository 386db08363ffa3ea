package main

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/floodgate-go/floodgate/memstore"
)

func TestLoginLimit(t *testing.T) {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	h, err := newRouter(store)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	post := func(pw string) int {
		resp, err := http.PostForm(srv.URL+"/login", url.Values{"password": {pw}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for range 10 {
		if s := post("open sesame"); s != http.StatusNoContent {
			t.Fatalf("good login: %d", s)
		}
	}
	for range 5 {
		if s := post("guess"); s != http.StatusUnauthorized {
			t.Fatalf("bad login: %d", s)
		}
	}
	if s := post("guess"); s != http.StatusTooManyRequests {
		t.Fatalf("sixth bad login: %d, want 429", s)
	}
}
