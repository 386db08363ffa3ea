package daemon

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/testkit"
)

// slowUpstream is a real HTTP upstream whose requests wait for a token on
// proceed, counting how many are in flight at once.
type slowUpstream struct {
	url            string
	proceed        chan struct{}
	inFlight, most atomic.Int64
	served         atomic.Int64
}

func newSlowUpstream(t *testing.T) *slowUpstream {
	u := &slowUpstream{proceed: make(chan struct{})}
	u.url = newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := u.inFlight.Add(1)
		for {
			m := u.most.Load()
			if n <= m || u.most.CompareAndSwap(m, n) {
				break
			}
		}
		select {
		case <-u.proceed:
		case <-r.Context().Done():
		}
		u.inFlight.Add(-1)
		u.served.Add(1)
		io.WriteString(w, "done")
	}))
	return u
}

func concConf(upstream, concurrency string) string {
	return fmt.Sprintf(`
policies:
  once: {rate: 1/hour}
proxy:
  listen: 127.0.0.1:0
  upstream: %s
  routes:
    - name: slow
      limits: [{policy: once, key: "header:X-Key"}]
      concurrency: %s
admin: {listen: ""}
`, upstream, concurrency)
}

// hangClient gives up on a request that a broken limit left hanging
// upstream, so such a test fails instead of hanging.
var hangClient = &http.Client{Timeout: time.Minute}

type reply struct {
	status int
	header http.Header
	body   string
}

func send(t *testing.T, d *Daemon, key string) reply {
	req, _ := http.NewRequest("GET", "http://"+d.Addrs().Proxy.String()+"/work", nil)
	req.Header.Set("X-Key", key)
	resp, err := hangClient.Do(req)
	if err != nil {
		t.Error(err)
		return reply{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}
}

// TestProxyConcurrencyLimit: a route's concurrency limit holds the real
// upstream to its limit in flight, refuses the next request with 503 and
// the Throttler's fields, and sits inside the rate limit: a request the
// rate limit refuses gets 429 from it and never takes a slot.
func TestProxyConcurrencyLimit(t *testing.T) {
	up := newSlowUpstream(t)
	d := started(t, concConf(up.url, "{limit: 2}"))
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			if r := send(t, d, fmt.Sprint("held", i)); r.status != 200 {
				t.Errorf("a held request: %d %q", r.status, r.body)
			}
		})
	}
	testkit.Eventually(t, 10*time.Second, "2 requests in flight upstream", func() bool { return up.inFlight.Load() == 2 })

	r := send(t, d, "third")
	if r.status != 503 || r.header.Get("X-Concurrency-Refused") != "full" || r.header.Get("X-Concurrency-Limit") != "2" ||
		r.header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("a third request while 2 are in flight: %d %v %q, want 503 full", r.status, r.header, r.body)
	}
	// The key "held0" spent its one request an hour: the rate limit
	// refuses it before it could ask for a slot.
	if r := send(t, d, "held0"); r.status != 429 || r.header.Get("X-Concurrency-Refused") != "" {
		t.Errorf("a request over its rate limit: %d %v, want 429 from the rate limit", r.status, r.header)
	}
	close(up.proceed)
	wg.Wait()
	if got := up.most.Load(); got != 2 {
		t.Errorf("the upstream saw %d requests in flight at most, want 2", got)
	}
	// The slots came back.
	if r := send(t, d, "after"); r.status != 200 || r.header.Get("X-Concurrency-Remaining") != "1" {
		t.Errorf("after the held requests ended: %d %v", r.status, r.header)
	}
}

// TestProxyConcurrencyQueue: with a queue, requests beyond the limit wait
// their turn and are all served, never more than the limit at once; a
// reload that changes the section counts the requests already in flight.
func TestProxyConcurrencyQueue(t *testing.T) {
	up := newSlowUpstream(t)
	d := started(t, concConf(up.url, "{limit: 3}"))
	var wg sync.WaitGroup
	var ok atomic.Int64
	sendAll := func(prefix string, n int) {
		for i := range n {
			wg.Go(func() {
				if r := send(t, d, fmt.Sprint(prefix, i)); r.status == 200 {
					ok.Add(1)
				} else {
					t.Errorf("%s%d: %d %q", prefix, i, r.status, r.body)
				}
			})
		}
	}
	sendAll("first", 3)
	testkit.Eventually(t, 10*time.Second, "3 requests in flight upstream", func() bool { return up.inFlight.Load() == 3 })

	// The reload lowers the limit to 2 and adds a queue; the 3 requests
	// in flight hold slots of the new limit too.
	if err := d.Apply(mustParse(t, concConf(up.url, "{limit: 2, queue: 20, max_wait: 5m}"))); err != nil {
		t.Fatal(err)
	}
	const queued = 12
	sendAll("queued", queued)
	const total = 3 + queued
	for served := 0; served < total; served++ {
		// Each token lets one request finish; the next may start only once
		// the in-flight count is under the limit.
		up.proceed <- struct{}{}
		testkit.Eventually(t, 10*time.Second, "a request to finish", func() bool { return up.served.Load() > int64(served) })
		if served >= 3 {
			if n := up.inFlight.Load(); n > 2 {
				t.Fatalf("%d requests in flight after the reload to limit 2", n)
			}
		}
	}
	wg.Wait()
	if ok.Load() != total {
		t.Errorf("%d of %d requests served", ok.Load(), total)
	}
	if m := up.most.Load(); m != 3 {
		t.Errorf("the upstream saw %d in flight at most, want 3 (the first limit)", m)
	}
}

// TestProxyConcurrencyPerKey: with a key, each client has slots of its own
// and its refusal is 429.
func TestProxyConcurrencyPerKey(t *testing.T) {
	up := newSlowUpstream(t)
	d := started(t, strings.Replace(concConf(up.url, `{limit: 1, key: "header:X-Client"}`), "once: {rate: 1/hour}", "once: {rate: 100/hour}", 1))
	sendAs := func(client, key string) reply {
		req, _ := http.NewRequest("GET", "http://"+d.Addrs().Proxy.String()+"/work", nil)
		req.Header.Set("X-Key", key)
		req.Header.Set("X-Client", client)
		resp, err := hangClient.Do(req)
		if err != nil {
			t.Error(err)
			return reply{}
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return reply{resp.StatusCode, resp.Header, string(b)}
	}
	var wg sync.WaitGroup
	wg.Go(func() { sendAs("a", "k") })
	testkit.Eventually(t, 10*time.Second, "a's request in flight", func() bool { return up.inFlight.Load() == 1 })
	if r := sendAs("a", "k"); r.status != 429 || r.header.Get("X-Concurrency-Refused") != "full" {
		t.Errorf("a's second request: %d %v, want 429 full", r.status, r.header)
	}
	wg.Go(func() {
		if r := sendAs("b", "k"); r.status != 200 {
			t.Errorf("b's request: %d", r.status)
		}
	})
	testkit.Eventually(t, 10*time.Second, "b's request in flight beside a's", func() bool { return up.inFlight.Load() == 2 })
	close(up.proceed)
	wg.Wait()
}

// TestProxyConcurrencyBadAdaptive: bounds the adaptive package refuses
// fail the daemon's construction (and so floodgate validate), naming the
// route's section.
func TestProxyConcurrencyBadAdaptive(t *testing.T) {
	_, err := New(mustParse(t, concConf("demo", "{adaptive: {algorithm: gradient, min_limit: 50, max_limit: 5}}")), Options{Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), "proxy.routes[0].concurrency: adaptive:") {
		t.Fatalf("New with min_limit above max_limit: %v", err)
	}
}

// TestProxyConcurrencyRedisShared: with storage redis, two daemons over one
// real Redis share a route's slots: while one holds the only slot, the
// other refuses; once it is released, the other serves.
func TestProxyConcurrencyRedisShared(t *testing.T) {
	srv := testkit.Redis(t)
	up := newSlowUpstream(t)
	conf := concConf(up.url, "{limit: 1}") + fmt.Sprintf("storage: {engine: redis, redis: {addrs: [%s]}, failure: {mode: fail_closed}}\n", srv.Addr)
	a, b := started(t, conf), started(t, conf)
	var wg sync.WaitGroup
	wg.Go(func() {
		if r := send(t, a, "a"); r.status != 200 {
			t.Errorf("a's request: %d %q", r.status, r.body)
		}
	})
	testkit.Eventually(t, 10*time.Second, "a's request in flight", func() bool { return up.inFlight.Load() == 1 })
	if r := send(t, b, "b"); r.status != 503 || r.header.Get("X-Concurrency-Refused") != "full" {
		t.Errorf("b while a holds the shared slot: %d %v, want 503 full", r.status, r.header)
	}
	close(up.proceed)
	wg.Wait()
	if r := send(t, b, "b2"); r.status != 200 {
		t.Errorf("b after a released the slot: %d %q", r.status, r.body)
	}
}

// TestProxyConcurrencyReloadKeepsLimiter: a reload that leaves a route's
// section as it was keeps its Limiter (its queue and adaptive limit); one
// that fails leaves the Limiter in service to be kept, not the one it
// built; one that changes the section builds another.
func TestProxyConcurrencyReloadKeepsLimiter(t *testing.T) {
	d := started(t, concConf("demo", "{limit: 2, queue: 3}"))
	inService := func() any { return d.conc.named["route:slow"].lim }
	first := inService()
	bad := strings.Replace(concConf("demo", "{limit: 5}"), "    - name: slow", `    - name: broken
      match: {path: /broken}
      concurrency: {adaptive: {algorithm: aimd, min_limit: 9, max_limit: 2}}
    - name: slow`, 1)
	if err := d.Apply(mustParse(t, bad)); err == nil {
		t.Fatal("a reload with min_limit above max_limit was applied")
	}
	if inService() != first {
		t.Error("a failed reload replaced the Limiter in service")
	}
	if err := d.Apply(mustParse(t, concConf("demo", "{limit: 2, queue: 3}"))); err != nil {
		t.Fatal(err)
	}
	if inService() != first {
		t.Error("a reload with the same section built another Limiter")
	}
	if err := d.Apply(mustParse(t, concConf("demo", "{limit: 4, queue: 3}"))); err != nil {
		t.Fatal(err)
	}
	if inService() == first {
		t.Error("a reload that changed the limit kept the old Limiter")
	}
}
