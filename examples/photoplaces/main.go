// Command photoplaces serves the PhotoPlaces API's rate limits on a real
// listener, with the middleware in its place among the others:
//
//	recover → log → identify user → rate limit → timeout → routes
//
// Run it and try the limits:
//
//	go run ./examples/photoplaces -addr 127.0.0.1:8080
//	for i in $(seq 12); do curl -si -X POST 127.0.0.1:8080/auth/login | head -1; done
//	curl -si -H 'Authorization: Bearer maria' 127.0.0.1:8080/places
//
// Behind a reverse proxy, pass its address range with -trusted-proxies so
// that clients are told apart by X-Forwarded-For.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clientip"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/httpmatch"
	"github.com/floodgate-go/floodgate/memstore"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	trusted := flag.String("trusted-proxies", "", "comma-separated CIDR ranges of reverse proxies whose X-Forwarded-For is believed")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*addr, *trusted, log); err != nil {
		log.Error("photoplaces", "error", err)
		os.Exit(1)
	}
}

type userKey struct{}

func run(addr, trusted string, log *slog.Logger) error {
	var proxies []string
	if trusted != "" {
		proxies = strings.Split(trusted, ",")
	}
	ips, err := clientip.New(clientip.Config{TrustedProxies: proxies})
	if err != nil {
		return err
	}
	store := memstore.New(memstore.Options{})
	defer store.Close()
	limits, err := rateLimits(store, ips, log)
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	answer := func(text string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, text+"\n") }
	}
	mux.Handle("POST /auth/{action}", answer("auth"))
	for _, p := range []string{"/places", "/reviews", "/tags", "/services"} {
		mux.Handle("GET "+p, answer("list of "+p[1:]))
	}
	for _, p := range []string{"/places", "/bookings", "/reviews"} {
		mux.Handle("POST "+p, answer("created"))
	}
	mux.Handle("/admin/", answer("admin"))

	var h http.Handler = mux
	h = http.TimeoutHandler(h, 5*time.Second, "timeout\n") // inside the limiter: a denied request starts no timer
	h = limits.Handler(h)
	h = identify(h)
	h = logRequests(h, log, ips)
	h = recoverPanics(h, log)

	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Info("serving", "addr", addr)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// rateLimits is the PhotoPlaces table; see the package examples for a
// walk-through.
func rateLimits(store floodgate.Store, ips *clientip.Resolver, log *slog.Logger) (*httplimit.Middleware, error) {
	var errs []error
	policy := func(name string, perMinute int64) floodgate.Limiter {
		l, err := floodgate.New(store, floodgate.Policy{Name: name, Limits: []floodgate.Limit{floodgate.PerMinute(perMinute)}})
		errs = append(errs, err)
		return l
	}
	ip := httplimit.KeyByIP(ips)
	userOrIP := httplimit.KeyByUser(httplimit.FromContext(userKey{}), ip)
	cfg := httplimit.Config{
		Logger: log,
		Rules: []httplimit.Rule{
			{Limiter: policy("auth", 10), Key: ip, Match: httpmatch.PathPrefix("/auth")},
			{Limiter: policy("api_read", 60), Key: userOrIP, Match: httpmatch.All(
				httpmatch.Methods(http.MethodGet, http.MethodHead),
				httpmatch.PathPrefix("/places", "/reviews", "/tags", "/services"))},
			{Limiter: policy("api_write", 10), Key: userOrIP, Match: httpmatch.All(
				httpmatch.Methods(http.MethodPost),
				httpmatch.PathPrefix("/places", "/bookings", "/reviews"))},
			{Limiter: policy("admin", 100), Key: userOrIP, Match: httpmatch.PathPrefix("/admin")},
		},
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return httplimit.New(cfg)
}

// identify stands in for token validation: "Authorization: Bearer <user>".
func identify(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && user != "" {
			r = r.WithContext(context.WithValue(r.Context(), userKey{}, user))
		}
		next.ServeHTTP(w, r)
	})
}

// statusRecorder remembers the status for the access log.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// logRequests logs every response, 429s included, so that limiting shows in
// the access log like any other answer.
func logRequests(next http.Handler, log *slog.Logger, ips *clientip.Resolver) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		log.Info("request", "method", r.Method, "path", r.URL.Path, "client", ips.ClientIP(r),
			"status", rec.status, "remaining", w.Header().Get("X-RateLimit-Remaining"), "took", time.Since(start))
	})
}

// recoverPanics turns a panic below it into a 500 and a log line.
func recoverPanics(next http.Handler, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				log.Error("panic", "value", fmt.Sprint(v), "path", r.URL.Path)
				http.Error(w, "internal error", http.StatusInternalServerError)
			}
		}()
		next.ServeHTTP(w, r)
	})
}
