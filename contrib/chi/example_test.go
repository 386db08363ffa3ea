package chilimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/floodgate-go/floodgate"
	chilimit "github.com/floodgate-go/floodgate/contrib/chi"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/go-chi/chi/v5"
)

func serve(r http.Handler, paths ...string) {
	for _, p := range paths {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest("GET", p, nil))
		fmt.Println(p, rec.Code, rec.Header().Get("X-Ratelimit-Remaining"))
	}
}

// Two requests a minute per client address, in one line.
func ExampleByIP() {
	r := chi.NewRouter()
	r.Use(chilimit.ByIP(2, time.Minute))
	r.Get("/hello", func(w http.ResponseWriter, _ *http.Request) {})
	serve(r, "/hello", "/hello", "/hello")
	// Output:
	// /hello 200 1
	// /hello 200 0
	// /hello 429 0
}

// One request a minute per client and chi route: /items/1 and /items/2
// share the route /items/{id}, /users has its own.
func ExampleKeyByRoute() {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	perRoute, _ := floodgate.New(store, floodgate.Policy{Name: "route", Limits: []floodgate.Limit{floodgate.PerMinute(1)}})
	r := chi.NewRouter()
	mw, err := httplimit.New(httplimit.Config{Rules: []httplimit.Rule{{
		Limiter: perRoute,
		Key:     httplimit.JoinKeys(httplimit.KeyByIP(nil), chilimit.KeyByRoute(r)),
	}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	r.Use(mw.Handler)
	r.Get("/items/{id}", func(w http.ResponseWriter, _ *http.Request) {})
	r.Get("/users", func(w http.ResponseWriter, _ *http.Request) {})
	serve(r, "/items/1", "/items/2", "/users")
	// Output:
	// /items/1 200 0
	// /items/2 429 0
	// /users 200 0
}
