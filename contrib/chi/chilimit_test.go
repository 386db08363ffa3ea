package chilimit_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/contrib/chi"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/httplimit/httplimittest"
	"github.com/go-chi/chi/v5"
)

// record returns middleware that appends the key of every request to got.
func record(key func() httplimit.KeyFunc, got *[]string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			*got = append(*got, key()(req))
			next.ServeHTTP(w, req)
		})
	}
}

func TestKeyByRoute(t *testing.T) {
	ok := func(w http.ResponseWriter, _ *http.Request) {}
	paths := []string{"/items/1", "/items/2", "/api/users/7/posts", "/nowhere"}
	want := []string{"GET /items/{id}", "GET /items/{id}", "GET /api/users/{id}/posts", "GET unmatched"}
	serve := func(r *chi.Mux) {
		for _, p := range paths {
			r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", p, nil))
		}
	}

	// used builds the routes with middleware that records key on r.Use.
	used := func(key func(r *chi.Mux) httplimit.KeyFunc) []string {
		var got []string
		r := chi.NewRouter()
		r.Use(record(func() httplimit.KeyFunc { return key(r) }, &got))
		r.Get("/items/{id}", ok)
		r.Route("/api", func(r chi.Router) { r.Get("/users/{id}/posts", ok) })
		serve(r)
		return got
	}
	t.Run("r.Use with the router", func(t *testing.T) {
		compare(t, used(func(r *chi.Mux) httplimit.KeyFunc { return chilimit.KeyByRoute(r) }), want)
	})
	t.Run("httplimit.KeyByRoute under chi", func(t *testing.T) {
		compare(t, used(func(*chi.Mux) httplimit.KeyFunc { return httplimit.KeyByRoute(nil) }),
			[]string{"GET unmatched", "GET unmatched", "GET unmatched", "GET unmatched"})
	})
	t.Run("after routing, from the chi context", func(t *testing.T) {
		var got []string
		rec := record(func() httplimit.KeyFunc { return chilimit.KeyByRoute(nil) }, &got)
		r := chi.NewRouter()
		r.With(rec).Get("/items/{id}", ok)
		r.Route("/api", func(r chi.Router) { r.With(rec).Get("/users/{id}/posts", ok) })
		serve(r)
		compare(t, got, want[:3])
	})
	t.Run("methods", func(t *testing.T) {
		r := chi.NewRouter()
		r.Get("/items/{id}", ok)
		key := chilimit.KeyByRoute(r)
		for method, want := range map[string]string{"HEAD": "HEAD unmatched", "BREW": "OTHER unmatched", "POST": "POST unmatched", "GET": "GET /items/{id}"} {
			if got := key(httptest.NewRequest(method, "/items/1", nil)); got != want {
				t.Errorf("%s /items/1: key %q, want %q", method, got, want)
			}
		}
	})
}

func compare(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("keys %q, want %q", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("key %d = %q, want %q", i, got[i], want[i])
		}
	}
}

// Every chi route gets its own limit through KeyByRoute, where
// httplimit.KeyByRoute would put them all under one key.
func TestPerRouteLimit(t *testing.T) {
	lim, _ := httplimittest.Limiters(t, floodgate.PerMinute(1), floodgate.PerHour(1))
	r := chi.NewRouter()
	mw, err := httplimit.New(httplimit.Config{Rules: []httplimit.Rule{{Limiter: lim, Key: chilimit.KeyByRoute(r)}}})
	if err != nil {
		t.Fatal(err)
	}
	r.Use(mw.Handler)
	r.Get("/a/{id}", func(http.ResponseWriter, *http.Request) {})
	r.Get("/b", func(http.ResponseWriter, *http.Request) {})
	for _, tt := range []struct {
		path string
		want int
	}{{"/a/1", 200}, {"/a/2", 429}, {"/b", 200}, {"/b", 429}} {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest("GET", tt.path, nil))
		if rec.Code != tt.want {
			t.Errorf("GET %s: %d, want %d", tt.path, rec.Code, tt.want)
		}
	}
}

func TestAdapter(t *testing.T) {
	httplimittest.Run(t, func(t *testing.T, s httplimittest.Setup) string {
		r := chi.NewRouter()
		r.Use(httplimittest.Middleware(t, s).Handler)
		r.Get("/hello", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello") })
		r.Post("/login", func(w http.ResponseWriter, req *http.Request) {
			w.WriteHeader(httplimittest.LoginStatus(req.PostFormValue("password")))
		})
		return httplimittest.Serve(t, r)
	})
}
