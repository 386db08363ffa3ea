package httplimit_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/httpmatch"
)

const client = "203.0.113.7:4711"

func TestHeadersAndBody(t *testing.T) {
	e := newEnv(t)
	h := mustNew(t, httplimit.Config{
		Rules: []httplimit.Rule{{Limiter: e.limiter("api", floodgate.PerMinute(3))}},
	}).Handler(ok)

	for i, want := range []map[string]string{
		{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "2", "X-RateLimit-Reset": "20",
			"RateLimit": `"api";r=2;t=20`, "RateLimit-Policy": `"api";q=3;w=60`},
		{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "40",
			"RateLimit": `"api";r=1;t=40`, "RateLimit-Policy": `"api";q=3;w=60`},
		{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "60",
			"RateLimit": `"api";r=0;t=60`, "RateLimit-Policy": `"api";q=3;w=60`},
	} {
		rec := get(h, "/", client)
		if rec.Code != 200 || rec.Body.String() != "ok" {
			t.Fatalf("request %d: %d %q, want 200 ok", i+1, rec.Code, rec.Body)
		}
		checkHeaders(t, rec.Header(), want)
	}

	e.clock.Advance(500 * time.Millisecond)
	rec := get(h, "/", client)
	if rec.Code != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429", rec.Code)
	}
	checkHeaders(t, rec.Header(), map[string]string{
		"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "60",
		"RateLimit": `"api";r=0;t=20`, "RateLimit-Policy": `"api";q=3;w=60`,
		"Retry-After": "20", "Content-Type": "application/problem+json",
	})
	const body = `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",` +
		`"title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,` +
		`"detail":"Too many requests; retry in 20 seconds.","retry-after":20,"violated-policies":["api"]}` + "\n"
	if got := rec.Body.String(); got != body {
		t.Errorf("body\n got %s\nwant %s", got, body)
	}
	if !json.Valid(rec.Body.Bytes()) {
		t.Error("body is not valid JSON")
	}
}

// The response shown in the package documentation and docs/middleware.md.
func TestDocumentedResponse(t *testing.T) {
	e := newEnv(t)
	h := mustNew(t, httplimit.Config{
		Rules: []httplimit.Rule{{Limiter: e.limiter("api", floodgate.PerMinute(100))}},
	}).Handler(ok)
	for range 100 {
		get(h, "/", client)
	}
	rec := get(h, "/", client)
	checkHeaders(t, rec.Header(), map[string]string{
		"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "60",
		"RateLimit": `"api";r=0;t=1`, "RateLimit-Policy": `"api";q=100;w=60`, "Retry-After": "1",
		"Content-Type": "application/problem+json",
	})
	want := `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",` +
		`"title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,` +
		`"detail":"Too many requests; retry in 1 second.","retry-after":1,"violated-policies":["api"]}` + "\n"
	if rec.Code != 429 || rec.Body.String() != want {
		t.Errorf("%d %s", rec.Code, rec.Body)
	}
}

func TestBodies(t *testing.T) {
	tests := []struct {
		name  string
		body  httplimit.Body
		cost  int64
		ctype string
		want  string
		retry string
	}{
		{name: "json", body: httplimit.BodyJSON, cost: 1, ctype: "application/json",
			want: `{"error":"rate limit exceeded","retry_after":1}` + "\n", retry: "1"},
		{name: "none", body: httplimit.BodyNone, cost: 1, want: "", retry: "1"},
		{name: "problem never", body: httplimit.BodyProblem, cost: 5, ctype: "application/problem+json",
			want: `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",` +
				`"title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,` +
				`"detail":"The request costs more than the limit admits at once; it can never pass.",` +
				`"violated-policies":["api"]}` + "\n"},
		{name: "json never", body: httplimit.BodyJSON, cost: 5, ctype: "application/json",
			want: `{"error":"rate limit exceeded"}` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			h := mustNew(t, httplimit.Config{
				Body: tt.body,
				Rules: []httplimit.Rule{{
					Limiter: e.limiter("api", floodgate.PerSecond(2)),
					Cost:    func(*http.Request) int64 { return tt.cost },
				}},
			}).Handler(ok)
			var rec *httptest.ResponseRecorder
			for range 3 {
				if rec = get(h, "/", client); rec.Code == 429 {
					break
				}
			}
			if rec.Code != 429 {
				t.Fatalf("status %d, want 429", rec.Code)
			}
			if got := rec.Body.String(); got != tt.want {
				t.Errorf("body %q, want %q", got, tt.want)
			}
			if got := rec.Header().Get("Content-Type"); got != tt.ctype {
				t.Errorf("Content-Type %q, want %q", got, tt.ctype)
			}
			if got := rec.Header().Get("Retry-After"); got != tt.retry {
				t.Errorf("Retry-After %q, want %q", got, tt.retry)
			}
			if tt.retry == "" && strings.Contains(rec.Header().Get("RateLimit"), ";t=") {
				t.Errorf("RateLimit %q has a reset time for a request that can never pass", rec.Header().Get("RateLimit"))
			}
		})
	}
}

// A client that waits exactly Retry-After seconds passes; one that comes a
// second earlier does not.
func TestRetryAfterTrueToClock(t *testing.T) {
	limits := []floodgate.Limit{
		floodgate.Every(1500 * time.Millisecond),
		floodgate.PerMinute(7),
		floodgate.PerSecond(3).WithBurst(5),
		floodgate.PerMinute(4).WithAlgorithm(floodgate.FixedWindow),
		floodgate.PerMinute(5).WithAlgorithm(floodgate.SlidingWindow),
		floodgate.PerMinute(3).WithAlgorithm(floodgate.SlidingLog),
		{Rate: 2, Period: 2500 * time.Millisecond, Algorithm: floodgate.SlidingWindow},
	}
	for _, l := range limits {
		t.Run(l.String(), func(t *testing.T) {
			e := newEnv(t)
			e.clock.Advance(123 * time.Millisecond) // off the second grid
			h := mustNew(t, httplimit.Config{Rules: []httplimit.Rule{{Limiter: e.limiter("p", l)}}}).Handler(ok)
			step := []time.Duration{0, 0, 0, 300 * time.Millisecond, 0, 0, 2 * time.Second, 100 * time.Millisecond}
			denials := 0
			for i := 0; denials < 12 && i < 500; i++ {
				e.clock.Advance(step[i%len(step)])
				rec := get(h, "/", client)
				if rec.Code == 200 {
					continue
				}
				denials++
				var secs int
				if _, err := fmt.Sscan(rec.Header().Get("Retry-After"), &secs); err != nil || secs < 1 {
					t.Fatalf("Retry-After %q", rec.Header().Get("Retry-After"))
				}
				if want := fmt.Sprintf(";t=%d", secs); !strings.HasSuffix(rec.Header().Get("RateLimit"), want) {
					t.Errorf("RateLimit %q does not end in %s", rec.Header().Get("RateLimit"), want)
				}
				e.clock.Advance(time.Duration(secs-1) * time.Second)
				if rec := get(h, "/", client); rec.Code != 429 {
					t.Fatalf("a second before Retry-After (%ds) the request passed", secs)
				}
				e.clock.Advance(time.Second)
				if rec := get(h, "/", client); rec.Code != 200 {
					t.Fatalf("after Retry-After (%ds) the request was denied again (Retry-After %s)", secs, rec.Header().Get("Retry-After"))
				}
			}
			if denials == 0 {
				t.Fatal("never denied")
			}
		})
	}
}

func TestUnixResetAndSource(t *testing.T) {
	e := newEnv(t)
	e.clock.Advance(250 * time.Millisecond)
	h := mustNew(t, httplimit.Config{
		Headers: httplimit.Headers{UnixReset: true, Source: true},
		Clock:   e.clock,
		Rules:   []httplimit.Rule{{Limiter: e.limiter("api", floodgate.PerMinute(10))}},
	}).Handler(ok)
	rec := get(h, "/", client)
	// Full again 6 s after now, at Start + 6.25 s: Unix second rounded up.
	want := fmt.Sprint(floodgatetest.Start.Unix() + 7)
	checkHeaders(t, rec.Header(), map[string]string{
		"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "9", "X-RateLimit-Reset": want,
		"RateLimit": `"api";r=9;t=6`, "RateLimit-Policy": `"api";q=10;w=60`, "X-RateLimit-Source": "memory",
	})
}

func TestHeaderFamiliesOff(t *testing.T) {
	tests := []struct {
		name    string
		headers httplimit.Headers
		allowed map[string]string
		denied  map[string]string
	}{
		{
			name:    "no x-ratelimit",
			headers: httplimit.Headers{DisableXRateLimit: true},
			allowed: map[string]string{"RateLimit": `"api";r=0;t=60`, "RateLimit-Policy": `"api";q=1;w=60`},
			denied:  map[string]string{"RateLimit": `"api";r=0;t=60`, "RateLimit-Policy": `"api";q=1;w=60`, "Retry-After": "60"},
		},
		{
			name:    "no ratelimit",
			headers: httplimit.Headers{DisableRateLimit: true},
			allowed: map[string]string{"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "60"},
			denied:  map[string]string{"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "60", "Retry-After": "60"},
		},
		{
			name:    "no retry-after",
			headers: httplimit.Headers{DisableRetryAfter: true, DisableRateLimit: true},
			allowed: map[string]string{"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "60"},
			denied:  map[string]string{"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "60"},
		},
		{
			name:    "nothing",
			headers: httplimit.Headers{DisableRetryAfter: true, DisableRateLimit: true, DisableXRateLimit: true},
			allowed: map[string]string{},
			denied:  map[string]string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			h := mustNew(t, httplimit.Config{
				Headers: tt.headers,
				Body:    httplimit.BodyNone,
				Rules:   []httplimit.Rule{{Limiter: e.limiter("api", floodgate.PerMinute(1))}},
			}).Handler(ok)
			checkHeaders(t, get(h, "/", client).Header(), tt.allowed)
			rec := get(h, "/", client)
			if rec.Code != 429 {
				t.Fatalf("status %d", rec.Code)
			}
			checkHeaders(t, rec.Header(), tt.denied)
		})
	}
}

func TestPolicyDescriptions(t *testing.T) {
	tests := []struct {
		name      string
		policy    string
		limits    []floodgate.Limit
		policyHdr string
		rateHdr   string
		limitHdr  string
	}{
		{name: "several limits", policy: "api", limits: []floodgate.Limit{floodgate.PerSecond(10), floodgate.PerHour(1000)},
			policyHdr: `"api/1";q=10;w=1, "api/2";q=1000;w=3600`, rateHdr: `"api/1";r=9;t=1`, limitHdr: "10"},
		{name: "hourly drives", policy: "api", limits: []floodgate.Limit{floodgate.PerSecond(10), floodgate.PerHour(3)},
			policyHdr: `"api/1";q=10;w=1, "api/2";q=3;w=3600`, rateHdr: `"api/2";r=2;t=1200`, limitHdr: "3"},
		{name: "sub-second period", policy: "fast", limits: []floodgate.Limit{{Rate: 10, Period: 500 * time.Millisecond}},
			policyHdr: `"fast";q=20;w=1`, rateHdr: `"fast";r=9;t=1`, limitHdr: "10"},
		{name: "fractional window", policy: "odd", limits: []floodgate.Limit{{Rate: 3, Period: 1500 * time.Millisecond}},
			policyHdr: `"odd";q=4;w=2`, rateHdr: `"odd";r=2;t=1`, limitHdr: "3"},
		{name: "burst", policy: "b", limits: []floodgate.Limit{floodgate.PerSecond(10).WithBurst(20)},
			policyHdr: `"b";q=20;w=2`, rateHdr: `"b";r=19;t=1`, limitHdr: "20"},
		{name: "quoted name", policy: `a"b\c é`, limits: []floodgate.Limit{floodgate.PerMinute(2)},
			policyHdr: `"a\"b\\c ??";q=2;w=60`, rateHdr: `"a\"b\\c ??";r=1;t=30`, limitHdr: "2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			h := mustNew(t, httplimit.Config{Rules: []httplimit.Rule{{Limiter: e.limiter(tt.policy, tt.limits...)}}}).Handler(ok)
			rec := get(h, "/", client)
			hd := rec.Header()
			if got := hd.Get("RateLimit-Policy"); got != tt.policyHdr {
				t.Errorf("RateLimit-Policy %s, want %s", got, tt.policyHdr)
			}
			if got := hd.Get("RateLimit"); got != tt.rateHdr {
				t.Errorf("RateLimit %s, want %s", got, tt.rateHdr)
			}
			if got := hd.Get("X-RateLimit-Limit"); got != tt.limitHdr {
				t.Errorf("X-RateLimit-Limit %s, want %s", got, tt.limitHdr)
			}
			for _, f := range []string{"RateLimit-Policy", "RateLimit"} {
				if err := parseSFList(hd.Get(f)); err != nil {
					t.Errorf("%s %q: %v", f, hd.Get(f), err)
				}
			}
		})
	}
}

func TestSkip(t *testing.T) {
	e := newEnv(t)
	lim := e.limiter("api", floodgate.PerMinute(1))
	h := mustNew(t, httplimit.Config{
		Skip:  func(r *http.Request) bool { return r.URL.Path == "/healthz" },
		Rules: []httplimit.Rule{{Limiter: lim}},
	}).Handler(ok)
	for range 5 {
		rec := get(h, "/healthz", client)
		if rec.Code != 200 {
			t.Fatalf("skipped request: status %d", rec.Code)
		}
		checkHeaders(t, rec.Header(), map[string]string{})
	}
	if rec := get(h, "/", client); rec.Code != 200 {
		t.Fatalf("first counted request: %d", rec.Code)
	}
	if rec := get(h, "/", client); rec.Code != 429 {
		t.Fatalf("second counted request: %d", rec.Code)
	}
	if rec := get(h, "/healthz", client); rec.Code != 200 {
		t.Fatalf("skipped request after the limit: %d", rec.Code)
	}
}

func TestMatch(t *testing.T) {
	e := newEnv(t)
	h := mustNew(t, httplimit.Config{Rules: []httplimit.Rule{
		{Limiter: e.limiter("a", floodgate.PerMinute(2)), Match: httpmatch.PathPrefix("/a")},
		{Limiter: e.limiter("b", floodgate.PerMinute(2)), Match: httpmatch.PathPrefix("/b/")},
	}}).Handler(ok)
	for _, p := range []string{"/a", "/a/x"} {
		if rec := get(h, p, client); rec.Code != 200 {
			t.Fatalf("%s: %d", p, rec.Code)
		}
	}
	if rec := get(h, "/a/y", client); rec.Code != 429 {
		t.Fatalf("/a/y: %d, want 429", rec.Code)
	}
	// Rule b keeps its own state on the same store.
	for _, p := range []string{"/b", "/b/x"} {
		if rec := get(h, p, client); rec.Code != 200 {
			t.Fatalf("%s: %d", p, rec.Code)
		}
	}
	// Paths no rule matches pass without headers.
	rec := get(h, "/authors", client)
	if rec.Code != 200 {
		t.Fatalf("/authors: %d", rec.Code)
	}
	checkHeaders(t, rec.Header(), map[string]string{})
}

func TestConfigErrors(t *testing.T) {
	e := newEnv(t)
	api := e.limiter("api", floodgate.PerMinute(1))
	api2 := e.limiter("api", floodgate.PerMinute(5)) // same name: same state
	other := e.limiter("other", floodgate.PerMinute(1))
	pick := func(*http.Request) floodgate.Limiter { return api }
	tests := []struct {
		name string
		cfg  httplimit.Config
		want string // "" means valid
	}{
		{name: "no rules", cfg: httplimit.Config{}, want: "no rules"},
		{name: "no limiter", cfg: httplimit.Config{Rules: []httplimit.Rule{{}}}, want: "rule 1 has no Limiter"},
		{name: "both", cfg: httplimit.Config{Rules: []httplimit.Rule{{Limiter: api, LimiterFor: pick}}}, want: "both Limiter and LimiterFor"},
		{name: "same limiter", cfg: httplimit.Config{Rules: []httplimit.Rule{{Limiter: api}, {Limiter: api}}}, want: `rules 1 and 2 both limit policy "api"`},
		{name: "same policy name", cfg: httplimit.Config{Rules: []httplimit.Rule{{Limiter: api}, {Limiter: other}, {Limiter: api2}}}, want: `rules 1 and 3`},
		{name: "distinct names on one store", cfg: httplimit.Config{Rules: []httplimit.Rule{{Limiter: api}, {Limiter: other}}}},
		{name: "wrapped limiter of the same name", cfg: httplimit.Config{Rules: []httplimit.Rule{{Limiter: api}, {Limiter: opaque{api2}}}}, want: `rules 1 and 2`},
		{name: "bad count", cfg: httplimit.Config{Rules: []httplimit.Rule{{Limiter: api, Count: 9}}}, want: "unknown Count"},
		{name: "bad body", cfg: httplimit.Config{Body: 7, Rules: []httplimit.Rule{{Limiter: api}}}, want: "unknown Body"},
		{name: "too many", cfg: httplimit.Config{Rules: make([]httplimit.Rule, httplimit.MaxRules+1)}, want: "more than the 8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := httplimit.New(tt.cfg)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("error %v, want none", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			case err != nil && !errors.Is(err, httplimit.ErrInvalidConfig):
				t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
			}
		})
	}
}

// mapLimiter is a Limiter of a type that cannot be compared with ==.
type mapLimiter struct {
	floodgate.Limiter
	m map[string]int
}

// TestConfigUncomparableLimiter: limiters are told apart by name, so a type
// that == would panic on is checked like any other.
func TestConfigUncomparableLimiter(t *testing.T) {
	e := newEnv(t)
	l := mapLimiter{Limiter: e.limiter("inner", floodgate.PerMinute(1)), m: map[string]int{}}
	if _, err := httplimit.New(httplimit.Config{Rules: []httplimit.Rule{{Limiter: l}, {Limiter: l}}}); err == nil {
		t.Fatal("the same limiter twice was accepted")
	}
	m := mapLimiter{Limiter: e.limiter("outer", floodgate.PerMinute(1)), m: map[string]int{}}
	if _, err := httplimit.New(httplimit.Config{Rules: []httplimit.Rule{{Limiter: l}, {Limiter: m}}}); err != nil {
		t.Fatal(err)
	}
}

func TestEngineFailure(t *testing.T) {
	t.Run("fail open by default", func(t *testing.T) {
		var logged strings.Builder
		h := mustNew(t, httplimit.Config{
			Logger: slog.New(slog.NewTextHandler(&logged, nil)),
			Rules:  []httplimit.Rule{{Limiter: failing{}}},
		}).Handler(ok)
		for range 3 {
			rec := get(h, "/", client)
			if rec.Code != 200 || rec.Body.String() != "ok" {
				t.Fatalf("status %d %q, want the request served", rec.Code, rec.Body)
			}
			checkHeaders(t, rec.Header(), map[string]string{})
		}
		if got := strings.Count(logged.String(), "engine down"); got != 1 {
			t.Errorf("logged %d lines in a burst of errors, want 1:\n%s", got, logged.String())
		}
	})
	t.Run("fail closed", func(t *testing.T) {
		h := mustNew(t, httplimit.Config{
			Logger:  slog.New(slog.DiscardHandler),
			OnError: httplimit.UnavailableOnError,
			Rules:   []httplimit.Rule{{Limiter: failing{}}},
		}).Handler(ok)
		rec := get(h, "/", client)
		if rec.Code != 503 {
			t.Fatalf("status %d, want 503", rec.Code)
		}
		if got := rec.Header().Get("Content-Type"); got != "application/problem+json" {
			t.Errorf("Content-Type %q", got)
		}
		if want := `{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"The rate limiter is unavailable; retry shortly."}` + "\n"; rec.Body.String() != want {
			t.Errorf("body %s", rec.Body)
		}
	})
	t.Run("failure in a chain refunds the links before", func(t *testing.T) {
		e := newEnv(t)
		global := e.limiter("global", floodgate.PerMinute(2))
		var seen error
		h := mustNew(t, httplimit.Config{
			Logger: slog.New(slog.DiscardHandler),
			OnError: func(w http.ResponseWriter, r *http.Request, err error) bool {
				seen = err
				w.WriteHeader(http.StatusTeapot)
				return false
			},
			Rules: []httplimit.Rule{{Limiter: global, Key: httplimit.KeyConst("all")}, {Limiter: failing{}}},
		}).Handler(ok)
		for range 3 {
			if rec := get(h, "/", client); rec.Code != http.StatusTeapot {
				t.Fatalf("status %d", rec.Code)
			}
		}
		if !errors.Is(seen, errDown) {
			t.Fatalf("OnError got %v", seen)
		}
		if res, _ := global.AllowN(t.Context(), "all", 0); res.Remaining != 2 {
			t.Fatalf("global remaining %d, want 2: the failed requests were charged", res.Remaining)
		}
	})
	t.Run("negative cost", func(t *testing.T) {
		e := newEnv(t)
		h := mustNew(t, httplimit.Config{
			Logger:  slog.New(slog.DiscardHandler),
			OnError: httplimit.UnavailableOnError,
			Rules: []httplimit.Rule{{
				Limiter: e.limiter("api", floodgate.PerMinute(1)),
				Cost:    func(*http.Request) int64 { return -1 },
			}},
		}).Handler(ok)
		// A bug in the Cost function is the server's error, whatever
		// OnError says for engine failures, and never an unlimited request.
		if rec := get(h, "/", client); rec.Code != 500 || rec.Body.String() == "ok" {
			t.Fatalf("status %d %q, want 500 and the handler not run", rec.Code, rec.Body)
		}
	})
	t.Run("negative cost with the default OnError", func(t *testing.T) {
		e := newEnv(t)
		var logged strings.Builder
		h := mustNew(t, httplimit.Config{
			Logger: slog.New(slog.NewTextHandler(&logged, nil)),
			Rules: []httplimit.Rule{{
				Limiter: e.limiter("api", floodgate.PerMinute(1)),
				Cost:    func(*http.Request) int64 { return -1 },
			}},
		}).Handler(ok)
		if rec := get(h, "/", client); rec.Code != 500 || rec.Body.String() == "ok" {
			t.Fatalf("status %d %q, want 500: a negative cost must not serve the request unlimited", rec.Code, rec.Body)
		}
		if !strings.Contains(logged.String(), "Cost returned -1") {
			t.Errorf("log %q does not name the bad cost", logged.String())
		}
	})
}

func TestOnLimited(t *testing.T) {
	e := newEnv(t)
	var got floodgate.Result
	h := mustNew(t, httplimit.Config{
		OnLimited: func(w http.ResponseWriter, r *http.Request, res floodgate.Result) {
			got = res
			if w.Header().Get("Retry-After") != "60" {
				t.Errorf("Retry-After not set before OnLimited: %v", w.Header())
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "slow down")
		},
		Rules: []httplimit.Rule{{Limiter: e.limiter("api", floodgate.PerMinute(1))}},
	}).Handler(ok)
	get(h, "/", client)
	rec := get(h, "/", client)
	if rec.Code != 503 || rec.Body.String() != "slow down" {
		t.Fatalf("%d %q", rec.Code, rec.Body)
	}
	if got.Allowed || got.RetryAfter != time.Minute || got.Policy != "api" {
		t.Fatalf("OnLimited got %+v", got)
	}
	if rec.Header().Get("Content-Type") != "" {
		t.Errorf("Content-Type %q set for a custom response", rec.Header().Get("Content-Type"))
	}
}

func TestLimiterFor(t *testing.T) {
	e := newEnv(t)
	free := e.limiter("free", floodgate.PerMinute(2))
	paid := e.limiter("paid", floodgate.PerMinute(100))
	h := mustNew(t, httplimit.Config{Rules: []httplimit.Rule{{
		LimiterFor: func(r *http.Request) floodgate.Limiter {
			switch r.Header.Get("X-Plan") {
			case "paid":
				return paid
			case "internal":
				return nil
			}
			return free
		},
	}}}).Handler(ok)
	rec := get(h, "/", client, "X-Plan", "paid")
	checkHeaders(t, rec.Header(), map[string]string{
		"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "99", "X-RateLimit-Reset": "1",
		"RateLimit": `"paid";r=99;t=1`, "RateLimit-Policy": `"paid";q=100;w=60`,
	})
	for range 2 {
		get(h, "/", "198.51.100.1:1")
	}
	rec = get(h, "/", "198.51.100.1:1")
	if rec.Code != 429 || rec.Header().Get("RateLimit-Policy") != `"free";q=2;w=60` {
		t.Fatalf("free tier: %d %v", rec.Code, rec.Header())
	}
	for range 5 {
		if rec := get(h, "/", "198.51.100.1:1", "X-Plan", "internal"); rec.Code != 200 || rec.Header().Get("RateLimit") != "" {
			t.Fatalf("exempt request: %d %v", rec.Code, rec.Header())
		}
	}
}

// A limiter wrapped by another type (a metrics or logging wrapper that
// embeds it) keeps every header: the Result describes its own limits.
func TestWrappedLimiterKeepsHeaders(t *testing.T) {
	e := newEnv(t)
	h := mustNew(t, httplimit.Config{
		Rules: []httplimit.Rule{{Limiter: opaque{e.limiter("inner", floodgate.PerMinute(1))}}},
	}).Handler(ok)
	get(h, "/", client)
	rec := get(h, "/", client)
	checkHeaders(t, rec.Header(), map[string]string{
		"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "60",
		"RateLimit": `"inner";r=0;t=60`, "Retry-After": "60", "RateLimit-Policy": `"inner";q=1;w=60`,
	})
	if !strings.Contains(rec.Body.String(), `"violated-policies":["inner"]`) {
		t.Errorf("body %s", rec.Body)
	}
}

// opaque hides everything of a Limiter but the interface.
type opaque struct{ floodgate.Limiter }

func TestZeroCostPeeks(t *testing.T) {
	e := newEnv(t)
	lim := e.limiter("api", floodgate.PerMinute(2))
	h := mustNew(t, httplimit.Config{Rules: []httplimit.Rule{{
		Limiter: lim,
		Cost: func(r *http.Request) int64 {
			if r.Method == http.MethodOptions {
				return 0
			}
			return 1
		},
	}}}).Handler(ok)
	for range 5 {
		req := httptest.NewRequest(http.MethodOptions, "/", nil)
		req.RemoteAddr = client
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 || rec.Header().Get("X-RateLimit-Remaining") != "2" {
			t.Fatalf("OPTIONS: %d remaining %s", rec.Code, rec.Header().Get("X-RateLimit-Remaining"))
		}
	}
	if rec := get(h, "/", client); rec.Header().Get("X-RateLimit-Remaining") != "1" {
		t.Fatalf("GET after peeks: remaining %s", rec.Header().Get("X-RateLimit-Remaining"))
	}
}

// Headers a handler adds to must not change the neighbouring fields, which
// share one backing array.
func TestHandlerAddsToFields(t *testing.T) {
	e := newEnv(t)
	h := mustNew(t, httplimit.Config{Rules: []httplimit.Rule{{Limiter: e.limiter("api", floodgate.PerMinute(5))}}}).Handler(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Add("X-RateLimit-Limit", "extra")
			w.Header().Add("RateLimit", `"inner";r=1`)
		}))
	rec := get(h, "/", client)
	hd := rec.Header()
	if got := hd.Values("X-RateLimit-Limit"); len(got) != 2 || got[0] != "5" {
		t.Errorf("X-RateLimit-Limit %q", got)
	}
	if got := hd.Values("X-RateLimit-Remaining"); len(got) != 1 || got[0] != "4" {
		t.Errorf("X-RateLimit-Remaining %q", got)
	}
	if got := hd.Values("RateLimit-Policy"); len(got) != 1 || got[0] != `"api";q=5;w=60` {
		t.Errorf("RateLimit-Policy %q", got)
	}
}

// TestTierOfOncePerRequest: the tier is looked up when the request is
// decided, and the headers describe the set the Result names, so TierOf
// runs once per request, as Policy.TierOf documents.
func TestTierOfOncePerRequest(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int64
	lim, err := floodgate.New(e.store, floodgate.Policy{
		Name:   "tiered",
		Limits: []floodgate.Limit{floodgate.PerMinute(2)},
		Tiers:  map[string][]floodgate.Limit{"pro": {floodgate.PerMinute(10)}},
		TierOf: func(key string) string {
			calls.Add(1)
			if strings.HasSuffix(key, ":pro") {
				return "pro"
			}
			return ""
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := mustNew(t, httplimit.Config{Rules: []httplimit.Rule{{Limiter: lim, Key: httplimit.KeyByHeader("X-Plan", nil)}}}).Handler(ok)
	rec := get(h, "/", client, "X-Plan", "pro")
	if calls.Load() != 1 {
		t.Errorf("TierOf ran %d times for one request, want 1", calls.Load())
	}
	if got := rec.Header().Get("RateLimit-Policy"); got != `"tiered";q=10;w=60` {
		t.Errorf("RateLimit-Policy %q, want the pro tier's", got)
	}
}

// TestSourceOnFailureResponses: with Headers.Source, fail-open and
// fail-closed answers say so too.
func TestSourceOnFailureResponses(t *testing.T) {
	for _, tc := range []struct {
		mode failover.Mode
		code int
	}{{failover.FailOpen, 200}, {failover.FailClosed, 503}} {
		h := mustNew(t, httplimit.Config{Headers: httplimit.Headers{Source: true},
			Rules: []httplimit.Rule{{Limiter: failoverLimiter(t, tc.mode)}}}).Handler(ok)
		rec := get(h, "/", client)
		if rec.Code != tc.code || rec.Header().Get("X-RateLimit-Source") != tc.mode.String() {
			t.Errorf("%s: %d, X-RateLimit-Source %q; want %d and %q", tc.mode, rec.Code, rec.Header().Get("X-RateLimit-Source"), tc.code, tc.mode)
		}
	}
}

// TestOverridesSeeTheKeyAsWritten: the key a rule's key function writes is
// the key overrides and tiers see (an override on "user:carol" matches
// carol's requests), since no rule puts anything in front of it.
func TestOverridesSeeTheKeyAsWritten(t *testing.T) {
	e := newEnv(t)
	lim, err := floodgate.New(e.store, floodgate.Policy{
		Name:      "users",
		Limits:    []floodgate.Limit{floodgate.PerMinute(1)},
		Overrides: map[string][]floodgate.Limit{"user:carol": {floodgate.PerMinute(5)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	user := func(r *http.Request) string { return r.Header.Get("X-Test-User") }
	h := mustNew(t, httplimit.Config{Rules: []httplimit.Rule{{Limiter: lim, Key: httplimit.KeyByUser(user, nil)}}}).Handler(ok)
	for i := range 5 {
		if rec := get(h, "/", client, "X-Test-User", "carol"); rec.Code != 200 || rec.Header().Get("X-RateLimit-Limit") != "5" {
			t.Fatalf("carol's request %d: %d, limit %q; want her override of 5", i+1, rec.Code, rec.Header().Get("X-RateLimit-Limit"))
		}
	}
	get(h, "/", client, "X-Test-User", "dave")
	if rec := get(h, "/", client, "X-Test-User", "dave"); rec.Code != 429 {
		t.Fatalf("dave's second request: %d, want the default limit of 1", rec.Code)
	}
}

// Header values whose numbers outgrow the response's value block are still
// whole and stay apart: three policies with long names, in RateLimit and
// RateLimit-Policy, next to X-RateLimit-* and Retry-After, over two
// responses that must not share bytes.
func TestHeaderValuesPastTheBlock(t *testing.T) {
	e := newEnv(t)
	long := strings.Repeat("p", 60)
	var rules []httplimit.Rule
	for i := range 3 {
		rules = append(rules, httplimit.Rule{Limiter: e.limiter(long+strconv.Itoa(i), floodgate.PerHour(2)), Key: httplimit.KeyConst("k")})
	}
	h := mustNew(t, httplimit.Config{Rules: rules}).Handler(bare)
	var got []http.Header
	for range 3 {
		w := &nopWriter{h: make(http.Header)}
		req, _ := http.NewRequest("GET", "http://example.com/", nil)
		req.RemoteAddr = "203.0.113.7:4711"
		h.ServeHTTP(w, req)
		got = append(got, w.h)
	}
	for i, want := range []string{"1", "0"} {
		if v := got[i].Get("X-Ratelimit-Remaining"); v != want {
			t.Errorf("response %d: X-RateLimit-Remaining %q, want %q", i+1, v, want)
		}
		rl := got[i].Get("Ratelimit")
		for j := range 3 {
			if item := `"` + long + strconv.Itoa(j) + `";r=` + want + ";t="; !strings.Contains(rl, item) {
				t.Errorf("response %d: RateLimit %q lacks %q", i+1, rl, item)
			}
		}
		if n := len(got[i].Values("Ratelimit-Policy")); n != 3 {
			t.Errorf("response %d: %d RateLimit-Policy lines, want 3", i+1, n)
		}
	}
	if v := got[2].Get("Retry-After"); v == "" || got[2].Get("X-Ratelimit-Remaining") != "0" {
		t.Errorf("denied response: Retry-After %q, X-RateLimit-Remaining %q", v, got[2].Get("X-Ratelimit-Remaining"))
	}
}
