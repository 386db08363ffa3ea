// Command chi serves a chi router limited per client and per route:
// 100 requests a minute per client address, and 10 a minute per client on
// each route pattern, so /items/1 and /items/2 share one budget.
//
//	go run . -addr 127.0.0.1:8080
//	curl -i http://127.0.0.1:8080/items/1
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/floodgate-go/floodgate"
	chilimit "github.com/floodgate-go/floodgate/contrib/chi"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/go-chi/chi/v5"
)

func newRouter(store floodgate.Store) (http.Handler, error) {
	perClient, err := floodgate.New(store, floodgate.Policy{Name: "client", Limits: []floodgate.Limit{floodgate.PerMinute(100)}})
	if err != nil {
		return nil, err
	}
	perRoute, err := floodgate.New(store, floodgate.Policy{Name: "route", Limits: []floodgate.Limit{floodgate.PerMinute(10)}})
	if err != nil {
		return nil, err
	}
	r := chi.NewRouter()
	mw, err := httplimit.New(httplimit.Config{Rules: []httplimit.Rule{
		{Limiter: perClient},
		{Limiter: perRoute, Key: httplimit.JoinKeys(httplimit.KeyByIP(nil), chilimit.KeyByRoute(r))},
	}})
	if err != nil {
		return nil, err
	}
	r.Use(mw.Handler)
	r.Get("/items/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "item %s\n", chi.URLParam(r, "id"))
	})
	return r, nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	flag.Parse()
	store := memstore.New(memstore.Options{})
	defer store.Close()
	h, err := newRouter(store)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Addr: *addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
