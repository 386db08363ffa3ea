package bench

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/floodgate-go/floodgate/outbound"
)

// BenchmarkOutbound times one client request through floodgate's outbound
// Transport and through the loop its users would otherwise write: an
// x/time/rate Wait before each request and a look at the answer's status
// and Retry-After after it. Both budgets admit every request, so what is
// measured is the cost of asking, not of waiting. bare is the request
// alone; a client's overhead is its ns/op minus bare's.
//
// Two networks: canned, a RoundTripper that answers at once from memory,
// which isolates the overhead; loopback, a real HTTP server on 127.0.0.1,
// which shows it beside a real round trip.
//
//	cd bench && go test -run '^$' -bench Outbound -benchmem -count 6 . | tee outbound.txt
//	benchstat -col /impl outbound.txt
func BenchmarkOutbound(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	for _, net := range []struct {
		name string
		base http.RoundTripper
	}{
		{"canned", canned{}},
		{"loopback", &http.Transport{MaxIdleConnsPerHost: 64}},
	} {
		for _, impl := range []struct {
			name string
			do   func(b *testing.B, base http.RoundTripper) func(ctx context.Context, url string) error
		}{
			{"bare", bareClient},
			{"floodgate", outboundClient},
			{"xrate", xrateClient},
		} {
			b.Run("net="+net.name+"/impl="+impl.name, func(b *testing.B) {
				do := impl.do(b, net.base)
				ctx := context.Background()
				b.ReportAllocs()
				// One caller: on a small shared machine a parallel
				// run measures the scheduler more than the client.
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				cpu0, ok := outboundThreadCPU()
				n := 0
				for b.Loop() {
					if err := do(ctx, srv.URL); err != nil {
						b.Fatal(err)
					}
					n++
				}
				// On canned every step runs on this thread, so its CPU
				// time is the client's work, which other processes
				// inflate far less than wall time.
				if cpu1, ok1 := outboundThreadCPU(); net.name == "canned" && ok && ok1 && n > 0 {
					b.ReportMetric(float64(cpu1-cpu0)/float64(n), "cpu-ns/op")
				}
			})
		}
	}
}

// outboundThreadCPU returns the CPU time the calling OS thread has used
// (RUSAGE_THREAD, which package syscall does not name).
func outboundThreadCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// canned answers every request at once with an empty 200.
type canned struct{}

func (canned) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
}

func send(c *http.Client, ctx context.Context, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	return c.Do(req)
}

func finish(resp *http.Response) {
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

func bareClient(_ *testing.B, base http.RoundTripper) func(context.Context, string) error {
	c := &http.Client{Transport: base}
	return func(ctx context.Context, url string) error {
		resp, err := send(c, ctx, url)
		if err != nil {
			return err
		}
		finish(resp)
		return nil
	}
}

func outboundClient(b *testing.B, base http.RoundTripper) func(context.Context, string) error {
	tr, err := outbound.New(outbound.Options{Base: base, Limiter: memLimiter(b, "partner-api", adapterQuota)})
	if err != nil {
		b.Fatal(err)
	}
	c := &http.Client{Transport: tr}
	return func(ctx context.Context, url string) error {
		resp, err := send(c, ctx, url)
		if err != nil {
			return err
		}
		finish(resp)
		return nil
	}
}

// xrateClient is the hand-written loop: Wait, send, and on a 429 sleep
// its Retry-After seconds and send once more.
func xrateClient(_ *testing.B, base http.RoundTripper) func(context.Context, string) error {
	lim := rate.NewLimiter(rate.Limit(adapterQuota.rate), int(adapterQuota.rate))
	c := &http.Client{Transport: base}
	return func(ctx context.Context, url string) error {
		for attempt := 0; ; attempt++ {
			if err := lim.Wait(ctx); err != nil {
				return err
			}
			resp, err := send(c, ctx, url)
			if err != nil {
				return err
			}
			if resp.StatusCode != http.StatusTooManyRequests || attempt > 0 {
				finish(resp)
				return nil
			}
			secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			finish(resp)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(secs) * time.Second):
			}
		}
	}
}
