package throttle_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/concurrency/throttle"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/testkit"
)

// gate is a handler whose requests wait until released, counting arrivals.
type gate struct {
	mu      sync.Mutex
	arrived int
	release chan struct{}
}

func newGate() *gate { return &gate{release: make(chan struct{})} }

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	g.arrived++
	g.mu.Unlock()
	select {
	case <-g.release:
	case <-r.Context().Done():
		return
	}
	io.WriteString(w, "ok")
}

func (g *gate) n() int { g.mu.Lock(); defer g.mu.Unlock(); return g.arrived }

func fetch(t *testing.T, url string, header ...string) (*http.Response, string) {
	t.Helper()
	req := testkit.NewRequest(t, "GET", url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return testkit.Do(t, http.DefaultClient, req)
}

// fetchQuiet is fetch for a goroutine that may outlive its checks: it
// reports nothing.
func fetchQuiet(url string, header ...string) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	if resp, err := http.DefaultClient.Do(req); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

func TestThrottle(t *testing.T) {
	g := newGate()
	url := serve(t, throttle.Limit(2)(g))
	done := make(chan string, 2)
	for range 2 {
		go func() {
			resp, body := fetch(t, url)
			done <- resp.Status + " " + body
		}()
	}
	testkit.Eventually(t, 10*time.Second, "two requests in the handler", func() bool { return g.n() == 2 })
	resp, body := fetch(t, url)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("third request: %s", resp.Status)
	}
	checkHeaders(t, resp.Header, map[string]string{
		throttle.HeaderLimit:     "2",
		throttle.HeaderRemaining: "0",
		throttle.HeaderRefused:   "full",
		"Content-Type":           "application/problem+json",
	})
	if !strings.Contains(body, `"reason":"full"`) || !strings.Contains(body, `"status":503`) {
		t.Fatalf("body %s", body)
	}
	close(g.release)
	for range 2 {
		if s := <-done; s != "200 OK ok" {
			t.Fatalf("held request: %s", s)
		}
	}
	resp, _ = fetch(t, url)
	if resp.StatusCode != 200 || resp.Header.Get(throttle.HeaderRemaining) != "1" {
		t.Fatalf("after release: %s %v", resp.Status, resp.Header)
	}
}

func TestThrottleBacklog(t *testing.T) {
	g := newGate()
	l, err := concurrency.New(concurrency.NewLocal(), concurrency.Options{Limit: 1, MaxWaiting: 1, MaxWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	th, err := throttle.New(throttle.Config{Limiter: l})
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, th.Handler(g))
	done := make(chan int, 2)
	go func() { resp, _ := fetch(t, url); done <- resp.StatusCode }()
	testkit.Eventually(t, 10*time.Second, "first request in the handler", func() bool { return g.n() == 1 })
	go func() { resp, _ := fetch(t, url); done <- resp.StatusCode }()
	// The second waits in the queue: a third finds it full.
	testkit.Eventually(t, 10*time.Second, "second request queued", func() bool { return l.Waiting() == 1 })
	resp, _ := fetch(t, url)
	if resp.StatusCode != 503 || resp.Header.Get(throttle.HeaderRefused) != "queue-full" {
		t.Fatalf("queue full: %s %v", resp.Status, resp.Header)
	}
	close(g.release)
	if a, b := <-done, <-done; a != 200 || b != 200 {
		t.Fatalf("statuses %d %d", a, b)
	}
}

func TestThrottlePerKeyIs429AndTimeout(t *testing.T) {
	l, err := concurrency.New(concurrency.NewLocal(), concurrency.Options{Limit: 1, MaxWaiting: 1, MaxWait: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	th, err := throttle.New(throttle.Config{Limiter: l, Key: httplimit.KeyByHeader("X-Key", nil), Body: httplimit.BodyJSON})
	if err != nil {
		t.Fatal(err)
	}
	g := newGate()
	url := serve(t, th.Handler(g))
	// The held requests end before the test: the server's cleanup must not
	// fail them while the test is gone.
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(g.release)
	wg.Go(func() { fetchQuiet(url, "X-Key", "a") })
	testkit.Eventually(t, 10*time.Second, "a in the handler", func() bool { return g.n() == 1 })
	resp, body := fetch(t, url, "X-Key", "a")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get(throttle.HeaderRefused) != "timeout" ||
		!strings.Contains(body, `"reason":"timeout"`) || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("a again: %s %v %s", resp.Status, resp.Header, body)
	}
	wg.Go(func() { fetchQuiet(url, "X-Key", "b") })
	testkit.Eventually(t, 10*time.Second, "b served beside a", func() bool { return g.n() == 2 })
}

func TestThrottleReleasesOnPanicAndCancel(t *testing.T) {
	store := concurrency.NewLocal()
	l, err := concurrency.New(store, concurrency.Options{Name: "p", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	th, err := throttle.New(throttle.Config{Limiter: l})
	if err != nil {
		t.Fatal(err)
	}
	g := newGate()
	h := th.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/panic":
			panic(http.ErrAbortHandler)
		case "/wait":
			g.ServeHTTP(w, r)
		default:
			io.WriteString(w, "ok")
		}
	}))
	url := serve(t, h)
	req := testkit.NewRequest(t, "GET", url+"/panic", nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	if got := store.InFlight("p", ""); got != 0 {
		t.Fatalf("after a panic %d slots held", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	req = testkit.NewRequest(t, "GET", url+"/wait", nil).WithContext(ctx)
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	testkit.Eventually(t, 10*time.Second, "request in the handler", func() bool { return g.n() == 1 })
	cancel()
	<-errc
	testkit.Eventually(t, 10*time.Second, "slot of a canceled request freed", func() bool { return store.InFlight("p", "") == 0 })
	if resp, body := fetch(t, url); resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("after cancel: %s %s", resp.Status, body)
	}
}

type outcomes struct {
	mu  sync.Mutex
	got []concurrency.Outcome
}

func (o *outcomes) Limit() int { return 10 }
func (o *outcomes) Observe(s concurrency.Sample) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, s.Outcome)
}

func TestThrottleReportsOutcomes(t *testing.T) {
	rec := &outcomes{}
	l, err := concurrency.New(concurrency.NewLocal(), concurrency.Options{Controller: rec})
	if err != nil {
		t.Fatal(err)
	}
	th, err := throttle.New(throttle.Config{Limiter: l})
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, th.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/busy" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})))
	fetch(t, url+"/")
	fetch(t, url+"/busy")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.got) != 2 || rec.got[0] != concurrency.Success || rec.got[1] != concurrency.Dropped {
		t.Fatalf("outcomes %v", rec.got)
	}
}

func TestThrottleRejectsConfig(t *testing.T) {
	if _, err := throttle.New(throttle.Config{}); err == nil {
		t.Fatal("no limiter accepted")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Throttle(0) did not panic")
		}
	}()
	throttle.Limit(0)
}

// serve starts a real server on loopback and returns its base URL.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// checkHeaders compares h with want, and fails on any rate-limit field: a
// throttle's refusal speaks of slots, not of a rate.
func checkHeaders(t *testing.T, h http.Header, want map[string]string) {
	t.Helper()
	for name, w := range want {
		if got := h.Get(name); got != w {
			t.Errorf("%s = %q, want %q", name, got, w)
		}
	}
	for _, name := range []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining", "Retry-After"} {
		if v := h.Values(name); len(v) > 0 {
			t.Errorf("%s = %q, want none", name, v)
		}
	}
}
