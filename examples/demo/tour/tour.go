// Package tour is what command demo shows, as a function that writes to an
// io.Writer, so that a test can run it and read what it printed.
//
// Everything runs on loopback: an httplimit server on a free port, requests
// sent with net/http, and, when redis-server is installed, a Redis started
// for the tour, killed mid-run and started again.
package tour

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clientip"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/hybrid"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/testkit"
)

// Options tunes a tour. The zero value is the tour command demo gives.
type Options struct {
	// Pause is the time between two requests the tour prints, so that a
	// reader can follow. 0 means 400 ms.
	Pause time.Duration

	// RequireRedis makes a missing redis-server an error rather than a note
	// on how to see that part.
	RequireRedis bool
}

// ErrNoRedis reports a missing redis-server when Options.RequireRedis is
// set.
var ErrNoRedis = errors.New("redis-server not found on PATH: install it (Debian package redis-server) to see Redis fail over")

// Run runs the tour, writing what it does to w. It stops by itself: each
// part is a bounded number of requests, and the wait for Redis to be used
// again after its restart is bounded too. It returns early when ctx ends.
func Run(ctx context.Context, w io.Writer, o Options) error {
	if o.Pause <= 0 {
		o.Pause = 400 * time.Millisecond
	}
	t := &tour{w: &lockedWriter{w: w}, pause: o.Pause}
	if err := t.headers(ctx); err != nil {
		return err
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		if o.RequireRedis {
			return ErrNoRedis
		}
		t.printf("\n3. Redis failing over: skipped, redis-server is not on PATH.\n")
		t.printf("   Install it (apt-get install redis-server, or make test) and run the demo again.\n")
		return nil
	}
	return t.failover(ctx)
}

type tour struct {
	w     *lockedWriter
	pause time.Duration
}

func (t *tour) printf(format string, args ...any) { t.w.printf(format, args...) }

// wait pauses between requests, or returns the context's error.
func (t *tour) wait(ctx context.Context, d time.Duration) error {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}

// serve starts h on a free loopback port and returns its base URL and a
// function that stops it.
func serve(h http.Handler) (string, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(l) }()
	return "http://" + l.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	}, nil
}

var hello = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello\n") })

// headers is parts 1 and 2: the fields of real responses, a 429, and a
// spoofed X-Forwarded-For that changes nothing.
func (t *tour) headers(ctx context.Context) error {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	policy := floodgate.Policy{
		Name:   "api",
		Limits: []floodgate.Limit{floodgate.PerMinute(3), floodgate.PerHour(100)},
	}
	api, err := floodgate.New(store, policy)
	if err != nil {
		return err
	}
	// The proxy in front of this server would be at 10.0.0.0/8: the
	// loopback client of this tour is not trusted to report anyone.
	ips, err := clientip.New(clientip.Config{TrustedProxies: []string{"10.0.0.0/8"}})
	if err != nil {
		return err
	}
	mw, err := httplimit.New(httplimit.Config{
		Rules:   []httplimit.Rule{{Limiter: api, Key: httplimit.KeyByIP(ips)}},
		Headers: httplimit.Headers{Source: true},
	})
	if err != nil {
		return err
	}
	base, stop, err := serve(mw.Handler(hello))
	if err != nil {
		return err
	}
	defer stop()
	client := &http.Client{Timeout: 5 * time.Second}

	t.printf("1. An httplimit server on %s, policy %q: %s and %s per client address.\n", base, policy.Name, policy.Limits[0], policy.Limits[1])
	t.printf("   Four requests from 127.0.0.1; every answer says where the client stands.\n\n")
	for i := 1; i <= 4; i++ {
		resp, body, err := get(ctx, client, base+"/", nil)
		if err != nil {
			return err
		}
		t.printf("GET / #%d → %s\n", i, resp.Status)
		t.printHeaders(resp.Header)
		if resp.StatusCode != http.StatusOK {
			t.printf("\n   %s\n", strings.TrimSpace(body))
		}
		t.printf("\n")
		if err := t.wait(ctx, t.pause); err != nil {
			return err
		}
	}
	t.printf("   X-RateLimit-* describe the limit that drove the answer (3/min); RateLimit-Policy lists both.\n")
	t.printf("   Retry-After is exact, rounded up: the request passes then, not a moment earlier.\n\n")

	t.printf("2. The same client sends a forged X-Forwarded-For, a new address each time.\n")
	t.printf("   Its peer, 127.0.0.1, is not a trusted proxy, so the header is never read:\n\n")
	for i, forged := range []string{"203.0.113.7", "198.51.100.23", "192.0.2.99"} {
		resp, _, err := get(ctx, client, base+"/", http.Header{"X-Forwarded-For": {forged}})
		if err != nil {
			return err
		}
		t.printf("GET / X-Forwarded-For: %-14s → %s, X-Ratelimit-Remaining: %s, Retry-After: %s\n",
			forged, resp.Status, resp.Header.Get("X-Ratelimit-Remaining"), resp.Header.Get("Retry-After"))
		if i < 2 {
			if err := t.wait(ctx, t.pause); err != nil {
				return err
			}
		}
	}
	t.printf("\n   Still the one key of 127.0.0.1: a client cannot pick a fresh key per request.\n")
	return nil
}

// shownHeaders are the response fields the tour prints, in this order.
var shownHeaders = []string{
	"Content-Type", "Retry-After",
	"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "X-Ratelimit-Source",
	"Ratelimit", "Ratelimit-Policy",
}

func (t *tour) printHeaders(h http.Header) {
	for _, name := range shownHeaders {
		for _, v := range h[name] {
			t.printf("   %s: %s\n", name, v)
		}
	}
}

func get(ctx context.Context, client *http.Client, url string, h http.Header) (*http.Response, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, "", err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp, string(body), err
}

// failover is part 3: a hybrid limiter over a real Redis, which is killed
// and started again while requests keep coming.
func (t *tour) failover(ctx context.Context) error {
	srv, err := testkit.StartRedis()
	if err != nil {
		return err
	}
	defer srv.Close()

	client := redis.NewClient(&redis.Options{
		Addr:                  srv.Addr,
		ContextTimeoutEnabled: true,
		// One dial per attempt: go-redis otherwise retries a refused dial
		// five times, 100 ms apart, before the call fails.
		DialerRetries: 1,
	})
	defer client.Close()
	global, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		return err
	}
	defer global.Close()
	local := memstore.New(memstore.Options{})
	defer local.Close()
	store, err := hybrid.New(local, global, hybrid.Options{
		Fraction: hybrid.FractionFor(4, 2), // 4 instances: each filter holds half the limit
		Guard: failover.GuardOptions{
			ContextBound: true,
			// A killed Redis refuses at once; the timeout is for a stalled
			// one, and is longer than the default here so that a busy
			// machine running the tour's test does not pass for an outage.
			Timeout: time.Second,
			// The tour sends a dozen requests: judge the failure rate from
			// the fifth call on, not the twentieth.
			MinCalls: 5,
			// Short back-offs, so that the tour sees Redis used again soon.
			Backoff:    250 * time.Millisecond,
			MaxBackoff: 500 * time.Millisecond,
			OnStateChange: func(from, to failover.BreakerState) {
				t.printf("   circuit breaker: %s → %s\n", from, to)
			},
		},
	})
	if err != nil {
		return err
	}
	api, err := floodgate.New(store, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerMinute(120)}})
	if err != nil {
		return err
	}
	mw, err := httplimit.New(httplimit.Config{
		Rules:   []httplimit.Rule{{Limiter: api}},
		Headers: httplimit.Headers{Source: true},
	})
	if err != nil {
		return err
	}
	base, stop, err := serve(mw.Handler(hello))
	if err != nil {
		return err
	}
	defer stop()
	httpc := &http.Client{Timeout: 5 * time.Second}

	send := func() (floodgate.Source, error) {
		resp, _, err := get(ctx, httpc, base+"/", nil)
		if err != nil {
			return "", err
		}
		src := floodgate.Source(resp.Header.Get("X-Ratelimit-Source"))
		t.printf("GET / → %s, X-Ratelimit-Source: %-22s X-Ratelimit-Remaining: %s\n",
			resp.Status, src, resp.Header.Get("X-Ratelimit-Remaining"))
		return src, t.wait(ctx, t.pause/2)
	}

	t.printf("\n3. The same middleware over a hybrid limiter (120/min): a local filter with half of it,\n")
	t.printf("   and Redis on %s keeping the exact limit for all instances.\n\n", srv.Addr)
	for range 4 {
		if _, err := send(); err != nil {
			return err
		}
	}
	t.printf("\n   Killing Redis (SIGKILL).\n")
	srv.Kill()
	for range 8 {
		if _, err := send(); err != nil {
			return err
		}
	}
	t.printf("\n   Every request was still decided, by this instance's share of the limit.\n")
	t.printf("   Starting Redis again on the same port (empty: it keeps no data).\n")
	if err := srv.Start(); err != nil {
		return err
	}
	// The breaker probes Redis once its back-off ends; the first probe that
	// Redis answers closes it.
	deadline := time.Now().Add(15 * time.Second)
	for {
		src, err := send()
		if err != nil {
			return err
		}
		if src == hybrid.SourceGlobal {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis was not used again within 15 s of its restart")
		}
	}
	t.printf("\n   Back on Redis, which starts afresh. Source said at every step which part decided.\n")
	return nil
}

// lockedWriter serialises writes: the breaker reports its transitions from
// the goroutines of the server's handlers.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, format, args...)
}
