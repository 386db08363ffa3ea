package bench

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5/middleware"

	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/concurrency/adaptive"
	"github.com/floodgate-go/floodgate/concurrency/throttle"
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

// upstream is the server of upstreamSlots slots, each request served in
// service (read at each request, so that a run can change it).
func upstream(tb testing.TB, service *atomic.Int64) string {
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
		time.Sleep(time.Duration(service.Load()))
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
	{"floodgate-fixed", func(testing.TB) func(http.Handler) http.Handler { return throttle.Limit(upstreamSlots) }},
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
	t, err := throttle.New(throttle.Config{Limiter: l})
	if err != nil {
		tb.Fatal(err)
	}
	return t.Handler
}

// shedSteps change the upstream's service time when the measured part
// begins: the protections must find the new capacity while loaded.
var shedSteps = []struct {
	name   string
	factor float64 // service time after the change, × upstreamService
}{
	{"steady", 1},
	{"2x-slower", 2},
	{"2x-faster", 0.5},
}

// BenchmarkShedding offers a reverse proxy four times the capacity of its
// upstream, open loop, for shedWarmup+shedMeasure, once per protection and
// step (the upstream's service time unchanged, doubled or halved when the
// measured part begins), and reports over the measured part:
//
//   - goodput-%: successful answers within the client's timeout a second,
//     as a share of the upstream's capacity after the step;
//   - p99-x: the 99th percentile latency of those successes over the
//     upstream's own p99 when nothing queues, at the service time after
//     the step (measured first, through the same proxy without protection,
//     at half the capacity in flight);
//   - shed-%: requests refused by the protection at once;
//   - timeout-%: requests whose client gave up.
//
// FLOODGATE_BENCH_LOAD=n runs n busy processes beside it for the whole
// benchmark: the loaded machine, where latency measured includes waiting
// for a core.
//
// Each run takes about eight seconds whatever -benchtime says: run it with
// -benchtime 1x.
func BenchmarkShedding(b *testing.B) {
	b.Logf("upstream: %d at a time, %s each, capacity %.0f/s; offered %d× for %s", upstreamSlots, upstreamService, capacityPerSecond(), overload, shedWarmup+shedMeasure)
	if n, _ := strconv.Atoi(os.Getenv("FLOODGATE_BENCH_LOAD")); n > 0 {
		busy(b, n)
	}
	for _, st := range shedSteps {
		for _, im := range shedImpls {
			b.Run("step="+st.name+"/impl="+im.name, func(b *testing.B) {
				for range b.N {
					shedOnce(b, im.wrap, st.factor)
				}
			})
		}
	}
}

// busy runs n processes that spin until the benchmark ends.
func busy(b *testing.B, n int) {
	ctx, cancel := context.WithCancel(context.Background())
	var cmds []*exec.Cmd
	for range n {
		cmd := exec.CommandContext(ctx, "sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	b.Cleanup(func() {
		cancel()
		for _, c := range cmds {
			c.Wait()
		}
	})
	b.Logf("%d busy processes beside the benchmark", n)
}

func shedOnce(b *testing.B, wrap func(testing.TB) func(http.Handler) http.Handler, factor float64) {
	// A fresh upstream, so that one run's backlog never reaches the
	// next, and its unloaded latency after the step measured just
	// before, so that a machine loaded by others weighs on both alike.
	var service atomic.Int64
	after := time.Duration(float64(upstreamService) * factor)
	service.Store(int64(after))
	up := upstream(b, &service)
	base := p99(closedLoop(front(b, up, func(h http.Handler) http.Handler { return h }), upstreamSlots/2, time.Second))
	if base == 0 {
		b.Fatal("no baseline latency")
	}
	service.Store(int64(upstreamService))
	target := front(b, up, wrap(b))
	step := time.AfterFunc(shedWarmup, func() { service.Store(int64(after)) })
	defer step.Stop()
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
	capacity := capacityPerSecond() / factor
	goodput := float64(len(ok)) / shedMeasure.Seconds() / capacity
	b.ReportMetric(100*goodput, "goodput-%")
	b.ReportMetric(float64(p99(ok))/float64(base), "p99-x")
	b.ReportMetric(100*float64(shed)/float64(max(measured, 1)), "shed-%")
	b.ReportMetric(100*float64(timedOut)/float64(max(measured, 1)), "timeout-%")
	b.Logf("unloaded p99 %s; %d sent, %d ok (p99 %s), %d shed, %d timed out", base, measured, len(ok), p99(ok), shed, timedOut)
}
