package outbound_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clock"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/outbound"
)

// A 429 with a Retry-After HTTP-date is retried no earlier than that date,
// and every caller of the upstream is paused until then.
func TestRetryAfterHTTPDate(t *testing.T) {
	var date time.Time
	up := newUpstream(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 0 {
			// HTTP-dates have whole seconds: two seconds from now,
			// truncated, is between one and two seconds away.
			date = time.Now().Truncate(time.Second).Add(2 * time.Second)
			w.Header().Set("Retry-After", date.UTC().Format(http.TimeFormat))
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		io.WriteString(w, "ok")
	})
	rec := newRecorder()
	c := newTransport(t, outbound.Options{Observer: rec}).Client()
	code, body := do(t, c, get(t, within(t, 30*time.Second), up.URL))
	if code != 200 || body != "ok" {
		t.Fatalf("got %d %q; want the retry's 200", code, body)
	}
	seen := up.seen()
	if len(seen) != 2 {
		t.Fatalf("upstream saw %d requests; want 2", len(seen))
	}
	if seen[1].at.Before(date) {
		t.Errorf("retry arrived at %s, before the Retry-After date %s", seen[1].at, date)
	}
	pauses, retries, _ := rec.snapshot()
	if len(pauses) != 1 || len(retries) != 1 || retries[0] != 429 {
		t.Errorf("observer saw pauses %v and retries %v; want one of each", pauses, retries)
	}
}

// Retry-After values that are not delta-seconds or an HTTP-date are
// ignored: the refusal pauses for the back-off instead, and a huge value
// is capped at MaxPause.
func TestRetryAfterGarbage(t *testing.T) {
	const backoff = 20 * time.Millisecond
	for _, tc := range []struct {
		value string
		// the pause is within [lo, hi]
		lo, hi time.Duration
	}{
		{"-5", backoff / 2, backoff},
		{"soon", backoff / 2, backoff},
		{"1.5", backoff / 2, backoff},
		{"Sun, 01 Mar 2026 12:00:30", backoff / 2, backoff},
		{"", backoff / 2, backoff},
		{"99999999999999999999999999", 50 * time.Millisecond, 50 * time.Millisecond},
	} {
		t.Run(tc.value, func(t *testing.T) {
			up := newUpstream(t, func(n int, w http.ResponseWriter, r *http.Request) {
				if n == 0 {
					w.Header()["Retry-After"] = []string{tc.value}
					w.Header().Set("Ratelimit", `garbage;;r=-1`)
					w.Header().Set("X-Ratelimit-Remaining", "-3")
					w.WriteHeader(http.StatusTooManyRequests)
					return
				}
				io.WriteString(w, "ok")
			})
			rec := newRecorder()
			c := newTransport(t, outbound.Options{Observer: rec, Backoff: backoff, MaxPause: 50 * time.Millisecond}).Client()
			if code, _ := do(t, c, get(t, within(t, 30*time.Second), up.URL)); code != 200 {
				t.Fatalf("got %d; want the retry's 200", code)
			}
			pauses, _, _ := rec.snapshot()
			if len(pauses) != 1 || pauses[0] < tc.lo || pauses[0] > tc.hi {
				t.Errorf("pauses %v; want one within [%s, %s]", pauses, tc.lo, tc.hi)
			}
		})
	}
}

// A server that advertises plenty left but refuses anyway is obeyed: its
// 429 pauses the upstream for its Retry-After, whatever RateLimit said.
func TestServerIgnoresItsAdvertisedLimit(t *testing.T) {
	var refusedAt []time.Time
	up := newUpstream(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Ratelimit-Policy", `"api";q=1000;w=60`)
		w.Header().Set("Ratelimit", `"api";r=900;t=60`)
		if n%3 == 2 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			refusedAt = append(refusedAt, time.Now())
			return
		}
		io.WriteString(w, "ok")
	})
	c := newTransport(t, outbound.Options{}).Client()
	ctx := within(t, 60*time.Second)
	for i := range 4 {
		if code, _ := do(t, c, get(t, ctx, up.URL)); code != 200 {
			t.Fatalf("request %d: got %d; want 200 after the retry", i, code)
		}
	}
	seen := up.seen()
	if len(seen) != 5 || len(refusedAt) != 1 {
		t.Fatalf("upstream saw %d requests and refused %d; want 5 and 1", len(seen), len(refusedAt))
	}
	// Requests are sequential: the one after the refusal came no sooner
	// than the second the server asked for.
	if gap := seen[3].at.Sub(refusedAt[0]); gap < time.Second {
		t.Errorf("request after the 429 came %s after it; want at least 1s", gap)
	}
}

// A server that says nothing is left but keeps serving is still given its
// rest: the zero remaining pauses the upstream until the reset.
func TestZeroRemainingPauses(t *testing.T) {
	var saidZero time.Time
	up := newUpstream(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 0 {
			w.Header().Set("X-Ratelimit-Remaining", "0")
			w.Header().Set("X-Ratelimit-Reset", "1")
			saidZero = time.Now()
		}
		io.WriteString(w, "ok")
	})
	rec := newRecorder()
	c := newTransport(t, outbound.Options{Observer: rec}).Client()
	ctx := within(t, 30*time.Second)
	for range 2 {
		if code, _ := do(t, c, get(t, ctx, up.URL)); code != 200 {
			t.Fatalf("got %d; want 200", code)
		}
	}
	seen := up.seen()
	if gap := seen[1].at.Sub(saidZero); gap < time.Second {
		t.Errorf("second request came %s after the zero remaining; want at least the 1s reset", gap)
	}
	if _, _, waits := rec.snapshot(); waits[outbound.WaitPause] != 1 {
		t.Errorf("pause waits %d; want 1", waits[outbound.WaitPause])
	}
}

// A pause longer than the request's deadline fails the request at once,
// unsent, with ErrDeadline, and takes nothing from the budget.
func TestPauseBeyondDeadline(t *testing.T) {
	up := newUpstream(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "3600")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	lim := floodgatetest.MemLimiter(t, "upstream", floodgate.PerMinute(10))
	tr := newTransport(t, outbound.Options{Limiter: lim, MaxRetries: -1})
	c := tr.Client()
	if code, _ := do(t, c, get(t, within(t, 30*time.Second), up.URL)); code != 429 {
		t.Fatalf("got %d; want the 429 itself, retries being off", code)
	}
	before := remaining(t, lim, up)
	_, err := c.Do(get(t, within(t, time.Second), up.URL))
	if !errors.Is(err, outbound.ErrDeadline) {
		t.Fatalf("err = %v; want ErrDeadline", err)
	}
	if n := len(up.seen()); n != 1 {
		t.Errorf("upstream saw %d requests; want 1: the paused one was not sent", n)
	}
	if after := remaining(t, lim, up); after != before {
		t.Errorf("budget went from %d to %d; a request that waits for nothing is charged nothing", before, after)
	}
}

func remaining(t *testing.T, lim floodgate.Limiter, up *upstream) int64 {
	t.Helper()
	res, err := lim.AllowN(context.Background(), strings.TrimPrefix(up.URL, "http://"), 0)
	if err != nil {
		t.Fatal(err)
	}
	return res.Remaining
}

// The budget is waited for: three requests under a burst of two wait
// once (unless the first two took the 2 s a unit takes to come back), and
// one whose deadline is shorter than the wait fails at once, unsent and
// uncharged.
func TestBudget(t *testing.T) {
	up := newUpstream(t, func(n int, w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	lim := floodgatetest.MemLimiter(t, "upstream", floodgate.Limit{Rate: 1, Period: 2 * time.Second, Burst: 2})
	rec := newRecorder()
	c := newTransport(t, outbound.Options{Limiter: lim, Observer: rec}).Client()
	ctx := within(t, 30*time.Second)
	for range 3 {
		if code, _ := do(t, c, get(t, ctx, up.URL)); code != 200 {
			t.Fatalf("got %d; want 200", code)
		}
	}
	if _, _, waits := rec.snapshot(); waits[outbound.WaitBudget] != 1 {
		t.Errorf("budget waits %d; want 1 (the third request)", waits[outbound.WaitBudget])
	}

	slow := floodgatetest.MemLimiter(t, "upstream", floodgate.PerHour(1))
	c = newTransport(t, outbound.Options{Limiter: slow}).Client()
	do(t, c, get(t, ctx, up.URL))
	_, err := c.Do(get(t, within(t, time.Minute), up.URL))
	if !errors.Is(err, outbound.ErrDeadline) {
		t.Fatalf("err = %v; want ErrDeadline", err)
	}
	if n := len(up.seen()); n != 4 {
		t.Errorf("upstream saw %d; want 4", n)
	}
}

// What may be sent again is: idempotent methods, requests marked
// Retryable or carrying an Idempotency-Key, each with its body sent again
// whole; a POST without either, or whose body cannot be rewound, is not.
func TestWhatIsRetried(t *testing.T) {
	for _, tc := range []struct {
		name    string
		req     func(ctx context.Context, url string) *http.Request
		retried bool
	}{
		{"GET", func(ctx context.Context, url string) *http.Request {
			r, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
			return r
		}, true},
		{"PUT", func(ctx context.Context, url string) *http.Request {
			r, _ := http.NewRequestWithContext(ctx, "PUT", url, strings.NewReader("payload"))
			return r
		}, true},
		{"POST", func(ctx context.Context, url string) *http.Request {
			r, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader("payload"))
			return r
		}, false},
		{"POST Retryable", func(ctx context.Context, url string) *http.Request {
			r, _ := http.NewRequestWithContext(outbound.Retryable(ctx), "POST", url, bytes.NewReader([]byte("payload")))
			return r
		}, true},
		{"POST Idempotency-Key", func(ctx context.Context, url string) *http.Request {
			r, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader("payload"))
			r.Header.Set("Idempotency-Key", "8e03978e")
			return r
		}, true},
		{"PUT without GetBody", func(ctx context.Context, url string) *http.Request {
			r, _ := http.NewRequestWithContext(ctx, "PUT", url, io.NopCloser(strings.NewReader("payload")))
			return r
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, func(n int, w http.ResponseWriter, r *http.Request) {
				if n == 0 {
					w.Header().Set("Retry-After", "0")
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				io.WriteString(w, "ok")
			})
			c := newTransport(t, outbound.Options{Backoff: time.Millisecond}).Client()
			code, _ := do(t, c, tc.req(within(t, 30*time.Second), up.URL))
			seen := up.seen()
			if tc.retried {
				if code != 200 || len(seen) != 2 {
					t.Fatalf("got %d after %d requests; want 200 after 2", code, len(seen))
				}
				if seen[0].body != seen[1].body {
					t.Errorf("retry sent body %q; the first attempt sent %q", seen[1].body, seen[0].body)
				}
			} else if code != 503 || len(seen) != 1 {
				t.Fatalf("got %d after %d requests; want the 503 after 1", code, len(seen))
			}
		})
	}
}

// Retries are bounded: an upstream that refuses forever is asked
// 1+MaxRetries times, and the caller gets its last refusal.
func TestRetriesBounded(t *testing.T) {
	up := newUpstream(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, "refused")
	})
	c := newTransport(t, outbound.Options{MaxRetries: 2, Backoff: time.Millisecond}).Client()
	code, body := do(t, c, get(t, within(t, 30*time.Second), up.URL))
	if code != 429 || body != "refused" || len(up.seen()) != 3 {
		t.Fatalf("got %d %q after %d requests; want 429 \"refused\" after 3", code, body, len(up.seen()))
	}
}

// A retry whose wait would pass the deadline is not made: the caller gets
// the refusal at once.
func TestRetryNotPastDeadline(t *testing.T) {
	up := newUpstream(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	c := newTransport(t, outbound.Options{}).Client()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	code, _ := do(t, c, get(t, ctx, up.URL))
	if code != 429 || len(up.seen()) != 1 {
		t.Fatalf("got %d after %d requests; want the 429 after 1", code, len(up.seen()))
	}
	if ctx.Err() != nil {
		t.Error("the request waited out its deadline; it should have returned the refusal at once")
	}
}

// The breaker opens when enough calls fail: the next request is
// not sent, fails with failover.ErrOpen, and its budget unit is given back.
func TestBreakerOpens(t *testing.T) {
	up := newUpstream(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	})
	lim := floodgatetest.MemLimiter(t, "upstream", floodgate.PerHour(100))
	rec := newRecorder()
	tr := newTransport(t, outbound.Options{Limiter: lim, Observer: rec,
		Breaker: failover.GuardOptions{MinCalls: 2, Backoff: time.Hour}})
	c := tr.Client()
	ctx := within(t, 30*time.Second)
	for range 2 {
		if code, _ := do(t, c, get(t, ctx, up.URL)); code != 500 {
			t.Fatalf("got %d; want the upstream's 500", code)
		}
	}
	host := strings.TrimPrefix(up.URL, "http://")
	if s := tr.BreakerState(host); s != failover.Open {
		t.Fatalf("breaker %s; want open", s)
	}
	before := remaining(t, lim, up)
	_, err := c.Do(get(t, ctx, up.URL))
	if !errors.Is(err, failover.ErrOpen) {
		t.Fatalf("err = %v; want failover.ErrOpen", err)
	}
	if n := len(up.seen()); n != 2 {
		t.Errorf("upstream saw %d; want 2", n)
	}
	if after := remaining(t, lim, up); after != before {
		t.Errorf("budget went from %d to %d; an unsent request is given back", before, after)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.changes) != 1 || rec.changes[0] != [2]failover.BreakerState{failover.Closed, failover.Open} {
		t.Errorf("transitions %v; want closed→open", rec.changes)
	}
}

// A 429 is the server's health, not its failure: it never opens the
// breaker.
func TestRefusalsKeepBreakerClosed(t *testing.T) {
	up := newUpstream(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	tr := newTransport(t, outbound.Options{MaxRetries: -1, Breaker: failover.GuardOptions{MinCalls: 1}})
	for range 3 {
		do(t, tr.Client(), get(t, within(t, 30*time.Second), up.URL))
	}
	if s := tr.BreakerState(strings.TrimPrefix(up.URL, "http://")); s != failover.Closed {
		t.Errorf("breaker %s; want closed", s)
	}
}

func TestOptionErrors(t *testing.T) {
	for _, o := range []outbound.Options{
		{Backoff: -1},
		{MaxPause: -1},
		{Breaker: failover.GuardOptions{Backoff: -1}},
		{Breaker: failover.GuardOptions{Backoff: time.Minute, MaxBackoff: time.Second}},
	} {
		if _, err := outbound.New(o); err == nil {
			t.Errorf("New(%+v) = nil error", o)
		}
	}
}

// pausingLimiter is a budget during whose first wait another caller's
// 429 pauses the upstream, as happens when a pause starts while a request
// waits for budget.
type pausingLimiter struct {
	floodgate.Limiter
	pauses   outbound.PauseStore
	upstream string
	until    time.Time
	done     bool
}

func (l *pausingLimiter) ReserveN(ctx context.Context, key string, cost int64) (*floodgate.Reservation, error) {
	if !l.done {
		if res, err := l.Limiter.AllowN(ctx, key, 0); err == nil && res.Remaining == 0 {
			// The request is about to wait: another caller's 429 comes.
			l.done = true
			l.pauses.Pause(ctx, l.upstream, l.until)
		}
	}
	return l.Limiter.ReserveN(ctx, key, cost)
}

// A pause that starts while a request waits for budget is waited out too:
// the unit the request got goes back, and it is sent after the pause.
func TestPauseDuringBudgetWait(t *testing.T) {
	up := newUpstream(t, func(n int, w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	host := strings.TrimPrefix(up.URL, "http://")
	pauses := outbound.NewMemoryPauses()
	// A unit every 2 s: the second request finds none left unless the
	// first took that long. The engine reads the system clock, the one the
	// wait sleeps by: the default coarse clock may still read a moment
	// before the reservation's instant when the wait ends, and a refund
	// then finds the charge future-dated and keeps the unit (RefundN's
	// rule), which is not what this test is about.
	mem := memstore.New(memstore.Options{Clock: clock.System})
	t.Cleanup(func() { mem.Close() })
	inner := floodgatetest.NewLimiter(t, mem, "upstream", floodgate.Limit{Rate: 1, Period: 2 * time.Second})
	lim := &pausingLimiter{Limiter: inner, pauses: pauses, upstream: host}
	rec := newRecorder()
	c := newTransport(t, outbound.Options{Limiter: lim, Pauses: pauses, Observer: rec}).Client()
	ctx := within(t, 30*time.Second)
	do(t, c, get(t, ctx, up.URL)) // takes the only unit
	lim.until = time.Now().Add(3 * time.Second)
	do(t, c, get(t, ctx, up.URL))
	seen := up.seen()
	if len(seen) != 2 || seen[1].at.Before(lim.until) {
		t.Fatalf("second request arrived at %v; want after the pause's end %v", seen[len(seen)-1].at, lim.until)
	}
	if _, _, waits := rec.snapshot(); waits[outbound.WaitPause] != 1 || waits[outbound.WaitBudget] != 1 {
		t.Errorf("waits %v; want one for budget, then one for the pause", waits)
	}
}

// After the breaker's back-off one request probes the upstream; its
// success closes the breaker again.
func TestBreakerProbeCloses(t *testing.T) {
	var healthy atomic.Bool
	up := newUpstream(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusBadGateway)
		}
	})
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := clock.Func(now.Load)
	tr := newTransport(t, outbound.Options{Breaker: failover.GuardOptions{MinCalls: 1, Backoff: time.Minute, Clock: clock}})
	host := strings.TrimPrefix(up.URL, "http://")
	ctx := within(t, 30*time.Second)
	if code, _ := do(t, tr.Client(), get(t, ctx, up.URL)); code != 502 {
		t.Fatalf("got %d; want 502", code)
	}
	if _, err := tr.Client().Do(get(t, ctx, up.URL)); !errors.Is(err, failover.ErrOpen) {
		t.Fatalf("err = %v; want failover.ErrOpen while the back-off runs", err)
	}
	healthy.Store(true)
	now.Add(int64(2 * time.Minute))
	if code, _ := do(t, tr.Client(), get(t, ctx, up.URL)); code != 200 {
		t.Fatalf("probe got %d; want 200", code)
	}
	if s := tr.BreakerState(host); s != failover.Closed {
		t.Errorf("breaker %s after a good probe; want closed", s)
	}
	if n := len(up.seen()); n != 2 {
		t.Errorf("upstream saw %d; want 2 (the failure and the probe)", n)
	}
}

// A reset sent as a Unix time in milliseconds is read as one: the refusal
// pauses the upstream until then, not for MaxPause, and the retry goes out
// after it. So are the other shapes servers send the reset in.
func TestResetShapes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		field string
		value func(at time.Time) string
	}{
		{"X-RateLimit-Reset Unix milliseconds", "X-Ratelimit-Reset", func(at time.Time) string { return strconv.FormatInt(at.UnixMilli(), 10) }},
		{"X-RateLimit-Reset Unix seconds with a fraction", "X-Ratelimit-Reset", func(at time.Time) string {
			return strconv.FormatFloat(float64(at.UnixMilli())/1000, 'f', 3, 64)
		}},
		{"X-RateLimit-Reset-After", "X-Ratelimit-Reset-After", func(at time.Time) string {
			return strconv.FormatFloat(time.Until(at).Seconds(), 'f', 3, 64)
		}},
		{"RateLimit-Reset Unix seconds", "Ratelimit-Reset", func(at time.Time) string { return strconv.FormatInt(at.Unix()+1, 10) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var at time.Time
			up := newUpstream(t, func(n int, w http.ResponseWriter, r *http.Request) {
				if n == 0 {
					at = time.Now().Add(500 * time.Millisecond)
					w.Header().Set("X-Ratelimit-Remaining", "0")
					w.Header().Set(tc.field, tc.value(at))
					w.WriteHeader(http.StatusTooManyRequests)
					return
				}
				io.WriteString(w, "ok")
			})
			rec := newRecorder()
			c := newTransport(t, outbound.Options{Observer: rec}).Client()
			if code, _ := do(t, c, get(t, within(t, 30*time.Second), up.URL)); code != 200 {
				t.Fatalf("got %d; want the retry's 200", code)
			}
			pauses, _, _ := rec.snapshot()
			if len(pauses) != 1 || pauses[0] <= 0 || pauses[0] > 2*time.Second {
				t.Errorf("pauses %v; want one of at most 2s (the reset), not MaxPause", pauses)
			}
			if seen := up.seen(); len(seen) != 2 || seen[1].at.Before(at.Add(-time.Millisecond)) {
				t.Errorf("upstream saw %d requests, the retry before the reset at %s", len(seen), at)
			}
		})
	}
}
