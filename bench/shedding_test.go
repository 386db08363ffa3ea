package bench

import (
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5/middleware"

	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/concurrency/adaptive"
	"github.com/floodgate-go/floodgate/httplimit"
)

// The upstream of the load-shedding benchmark serves upstreamSlots
// requests at a time, upstreamService each, and queues the rest without
// bound, like a worker pool: a queued request is served even after its
// client gave up, which is how an overloaded service collapses. Its
// capacity is upstreamSlots/upstreamService requests a second.
const (
	upstreamSlots   = 8
	upstreamService = 40 * time.Millisecond
	overload        = 4
	clientTimeout   = time.Second
	shedWarmup      = time.Second     // not measured: the adaptive limits find themselves
	shedMeasure     = 4 * time.Second // measured
)

func capacityPerSecond() float64 { return upstreamSlots / upstreamService.Seconds() }

// upstream is the server of fixed capacity.
func upstream(tb testing.TB) string {
	tb.Helper()
	slots := make(chan struct{}, upstreamSlots)
	// closed drops the backlog when the run ends, so that it costs the
	// next run nothing.
	closed := make(chan struct{})
	tb.Cleanup(func() { close(closed) })
	return serveLoopback(tb, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case slots <- struct{}{}: // a FIFO of waiting goroutines
		case <-closed:
			return
		}
		time.Sleep(upstreamService)
		<-slots
		w.Write(okBody)
	}))
}

func serveLoopback(tb testing.TB, h http.Handler) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: nil}
	go srv.Serve(ln)
	tb.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

func newTransport() *http.Transport {
	return &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, IdleConnTimeout: time.Minute}
}

// front is the service under test: a reverse proxy to the upstream,
// behind the protection wrap gives it.
func front(tb testing.TB, up string, wrap func(http.Handler) http.Handler) string {
	tb.Helper()
	u, err := url.Parse(up)
	if err != nil {
		tb.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = newTransport()
	rp.ErrorLog = nil
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) { w.WriteHeader(http.StatusBadGateway) }
	return serveLoopback(tb, wrap(rp))
}

type shot struct {
	sent    time.Duration // since the start of the run
	latency time.Duration
	status  int // 0: the client timed out
}

// openLoop sends rate requests a second to target for d, each from a
// goroutine of its own so that slow answers do not slow the arrivals, and
// returns every request's fate once the last one ended.
func openLoop(target string, rate float64, d time.Duration) []shot {
	client := &http.Client{Transport: newTransport(), Timeout: clientTimeout}
	defer client.CloseIdleConnections()
	interval := time.Duration(float64(time.Second) / rate)
	var mu sync.Mutex
	var shots []shot
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; ; i++ {
		at := time.Duration(i) * interval
		if at >= d {
			break
		}
		if wait := time.Until(start.Add(at)); wait > 0 {
			time.Sleep(wait)
		}
		wg.Go(func() {
			t0 := time.Now()
			s := shot{sent: t0.Sub(start)}
			resp, err := client.Get(target)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				s.status = resp.StatusCode
			}
			s.latency = time.Since(t0)
			mu.Lock()
			shots = append(shots, s)
			mu.Unlock()
		})
	}
	wg.Wait()
	return shots
}

// closedLoop runs c clients back to back for d and returns the latencies
// of their successes: the upstream's latency when nothing queues.
func closedLoop(target string, c int, d time.Duration) []time.Duration {
	client := &http.Client{Transport: newTransport(), Timeout: clientTimeout}
	defer client.CloseIdleConnections()
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for range c {
		wg.Go(func() {
			for time.Now().Before(end) {
				t0 := time.Now()
				resp, err := client.Get(target)
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					mu.Lock()
					lat = append(lat, time.Since(t0))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return lat
}

func p99(lat []time.Duration) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	return lat[min(len(lat)-1, len(lat)*99/100)]
}

// shedImpls are the protections compared.
var shedImpls = []struct {
	name string
	wrap func(tb testing.TB) func(http.Handler) http.Handler
}{
	// Fixed limits set to the upstream's capacity, which the operator
	// rarely knows this well.
	{"floodgate-fixed", func(testing.TB) func(http.Handler) http.Handler { return httplimit.Throttle(upstreamSlots) }},
	{"chi-fixed", func(testing.TB) func(http.Handler) http.Handler { return middleware.Throttle(upstreamSlots) }},
	// Adaptive limits with their defaults: they know nothing of the
	// upstream.
	{"floodgate-gradient", func(tb testing.TB) func(http.Handler) http.Handler {
		g, err := adaptive.NewGradient(adaptive.GradientOptions{})
		if err != nil {
			tb.Fatal(err)
		}
		return adaptiveThrottle(tb, g)
	}},
	{"floodgate-aimd", func(tb testing.TB) func(http.Handler) http.Handler {
		// AIMD needs to be told what latency means queueing.
		a, err := adaptive.NewAIMD(adaptive.AIMDOptions{Timeout: 3 * upstreamService / 2})
		if err != nil {
			tb.Fatal(err)
		}
		return adaptiveThrottle(tb, a)
	}},
	// No protection, last: its backlog is the collapse.
	{"none", func(testing.TB) func(http.Handler) http.Handler {
		return func(h http.Handler) http.Handler { return h }
	}},
}

func adaptiveThrottle(tb testing.TB, c concurrency.Controller) func(http.Handler) http.Handler {
	l, err := concurrency.New(concurrency.NewLocal(), concurrency.Options{Name: "upstream", Controller: c})
	if err != nil {
		tb.Fatal(err)
	}
	t, err := httplimit.NewThrottle(httplimit.ThrottleConfig{Limiter: l})
	if err != nil {
		tb.Fatal(err)
	}
	return t.Handler
}

// BenchmarkShedding offers a reverse proxy four times the capacity of its
// upstream, open loop, for shedWarmup+shedMeasure, once per protection,
// and reports over the measured part:
//
//   - goodput-%: successful answers within the client's timeout a second,
//     as a share of the upstream's capacity;
//   - p99-x: the 99th percentile latency of those successes over the
//     upstream's own p99 when nothing queues (measured first, through the
//     same proxy without protection, at half the capacity in flight);
//   - shed-%: requests refused by the protection at once;
//   - timeout-%: requests whose client gave up.
//
// Each run takes about seven seconds whatever -benchtime says: run it with
// -benchtime 1x.
func BenchmarkShedding(b *testing.B) {
	b.Logf("upstream: %d at a time, %s each, capacity %.0f/s; offered %d× for %s", upstreamSlots, upstreamService, capacityPerSecond(), overload, shedWarmup+shedMeasure)
	for _, im := range shedImpls {
		b.Run("impl="+im.name, func(b *testing.B) {
			for range b.N {
				// A fresh upstream, so that one run's backlog never
				// reaches the next, and its unloaded latency measured
				// just before, so that a machine loaded by others
				// weighs on both alike.
				up := upstream(b)
				base := p99(closedLoop(front(b, up, func(h http.Handler) http.Handler { return h }), upstreamSlots/2, time.Second))
				if base == 0 {
					b.Fatal("no baseline latency")
				}
				target := front(b, up, im.wrap(b))
				shots := openLoop(target, overload*capacityPerSecond(), shedWarmup+shedMeasure)
				var ok []time.Duration
				var measured, shed, timedOut int
				for _, s := range shots {
					if s.sent < shedWarmup {
						continue
					}
					measured++
					switch {
					case s.status == http.StatusOK:
						ok = append(ok, s.latency)
					case s.status == 0:
						timedOut++
					case s.status == http.StatusServiceUnavailable || s.status == http.StatusTooManyRequests:
						shed++
					}
				}
				goodput := float64(len(ok)) / shedMeasure.Seconds() / capacityPerSecond()
				b.ReportMetric(100*goodput, "goodput-%")
				b.ReportMetric(float64(p99(ok))/float64(base), "p99-x")
				b.ReportMetric(100*float64(shed)/float64(max(measured, 1)), "shed-%")
				b.ReportMetric(100*float64(timedOut)/float64(max(measured, 1)), "timeout-%")
				b.Logf("%s: unloaded p99 %s; %d sent, %d ok (p99 %s), %d shed, %d timed out", im.name, base, measured, len(ok), p99(ok), shed, timedOut)
			}
		})
	}
}
