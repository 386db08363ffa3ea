package outbound_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/daemon"
	"github.com/floodgate-go/floodgate/outbound"
)

// floodgateUpstream starts floodgate's own daemon as a rate-limited API: its
// reverse proxy, under yaml's policy "api" keyed by client address, in
// front of a backend that answers "ok" and counts what reaches it. It
// returns the proxy's URL.
func floodgateUpstream(t *testing.T, policy string) (url string, served *atomic.Int64) {
	t.Helper()
	served = new(atomic.Int64)
	backend := newUpstream(t, func(int, http.ResponseWriter, *http.Request) { served.Add(1) })
	cfg, err := config.Parse("upstream.yaml", []byte(fmt.Sprintf(`
policies:
  api: %s
proxy:
  listen: 127.0.0.1:0
  upstream: %s
  routes: [{name: all, limits: [{policy: api, key: ip}]}]
admin: {listen: 127.0.0.1:0}
`, policy, backend.URL)))
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(cfg, daemon.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d.Shutdown(ctx)
	})
	return "http://" + d.Addrs().Proxy.String(), served
}

// counting is a base RoundTripper that counts the answers by status.
type counting struct {
	base  http.RoundTripper
	mu    sync.Mutex
	codes map[int]int
}

func (c *counting) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(r)
	if err == nil {
		c.mu.Lock()
		c.codes[resp.StatusCode]++
		c.mu.Unlock()
	}
	return resp, err
}

func (c *counting) count(code int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.codes[code]
}

// A client calling floodgate's daemon one request at a time is never
// refused: the daemon's RateLimit field says when nothing is left, and the
// Transport pauses until the reset it names instead of spending a request
// on a 429.
func TestDaemonSequentialNeverRefused(t *testing.T) {
	url, served := floodgateUpstream(t, "{rate: 5/s}")
	base := &counting{base: http.DefaultTransport, codes: map[int]int{}}
	c := newTransport(t, outbound.Options{Base: base}).Client()
	ctx := within(t, 60*time.Second)
	const n = 12
	for i := range n {
		if code, _ := do(t, c, get(t, ctx, url)); code != 200 {
			t.Fatalf("request %d: got %d; want 200", i, code)
		}
	}
	if got := base.count(429); got != 0 {
		t.Errorf("the daemon answered %d requests 429; the Transport should have paused before each", got)
	}
	if served.Load() != n {
		t.Errorf("backend served %d; want %d", served.Load(), n)
	}
}

// Concurrent callers do race into the daemon's 429s; each 429 pauses them
// all, the refused requests are retried after its Retry-After, and every
// request succeeds within the bound on retries.
func TestDaemonConcurrentRetried(t *testing.T) {
	url, served := floodgateUpstream(t, "{rate: 10/s}")
	base := &counting{base: http.DefaultTransport, codes: map[int]int{}}
	rec := newRecorder()
	c := newTransport(t, outbound.Options{Base: base, Observer: rec, MaxRetries: 20}).Client()
	ctx := within(t, 2*time.Minute)
	const workers, each = 6, 5
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for range workers {
		wg.Go(func() {
			for range each {
				resp, err := c.Do(get(t, ctx, url))
				if err != nil {
					errs <- err
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					errs <- fmt.Errorf("got %d", resp.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if served.Load() != workers*each {
		t.Errorf("backend served %d; want %d", served.Load(), workers*each)
	}
	_, retries, _ := rec.snapshot()
	if len(retries) != base.count(429) {
		t.Errorf("%d retries for %d refusals; every refusal within the bound is retried", len(retries), base.count(429))
	}
}
