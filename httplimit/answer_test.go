package httplimit_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clientip"
	"github.com/floodgate-go/floodgate/httplimit"
)

// An Evaluator's answer, written through Headers, ContentType and AppendBody,
// is the response the middleware writes for the same limits.
func TestEvaluatorMatchesMiddleware(t *testing.T) {
	e := newEnv(t)
	limit := floodgate.PerMinute(2)
	mwLim, dLim := e.limiter("mw", limit), e.limiter("mw2", limit)
	h := mustNew(t, httplimit.Config{Rules: []httplimit.Rule{{Limiter: mwLim, Key: httplimit.KeyConst("k")}}}).Handler(ok)
	d, err := httplimit.NewEvaluator(httplimit.EvaluatorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		rec := get(h, "/", "192.0.2.1:1")
		var v httplimit.Answer
		d.Evaluate(context.Background(), &v, httplimit.Charge{Limiter: dLim, Key: "k", Cost: 1})
		got := make(http.Header)
		v.Headers(func(name, value string) { got.Add(name, value) })
		wantStatus := rec.Code
		if wantStatus == http.StatusOK {
			wantStatus = 0
		}
		if v.Status() != wantStatus {
			t.Fatalf("request %d: Status() = %d, middleware answered %d", i, v.Status(), rec.Code)
		}
		want := rec.Header().Clone()
		// The policies differ in name only.
		for _, name := range []string{"Ratelimit", "Ratelimit-Policy"} {
			for j, val := range got[name] {
				got[name][j] = strings.ReplaceAll(val, `"mw2"`, `"mw"`)
			}
		}
		ct := want.Get("Content-Type")
		want.Del("Content-Type")
		if ct != v.ContentType() && v.Status() != 0 {
			t.Errorf("request %d: ContentType() = %q, middleware sent %q", i, v.ContentType(), ct)
		}
		checkHeaders(t, got, flatten(want))
		if v.Status() != 0 {
			body := strings.ReplaceAll(string(v.AppendBody(nil)), `"mw2"`, `"mw"`)
			if body != rec.Body.String() {
				t.Errorf("request %d: body %q, middleware wrote %q", i, body, rec.Body.String())
			}
		}
	}
}

func flatten(h http.Header) map[string]string {
	m := make(map[string]string)
	for _, name := range rateHeaders {
		if vs := h.Values(name); len(vs) > 0 {
			m[name] = strings.Join(vs, "\n")
		}
	}
	return m
}

// Serve settles a count-failed charge: a success is refunded, a failure and
// a panic keep their charge.
func TestVerdictServe(t *testing.T) {
	e := newEnv(t)
	lim := e.limiter("login", floodgate.PerHour(3))
	d, _ := httplimit.NewEvaluator(httplimit.EvaluatorConfig{})
	attempt := func(status int, panics bool) (remaining int64) {
		t.Helper()
		var v httplimit.Answer
		d.Evaluate(context.Background(), &v, httplimit.Charge{Limiter: lim, Key: "alice", Cost: 1, Count: httplimit.CountFailed})
		if !v.Counts() {
			t.Fatal("Counts() = false for an admitted count-failed charge")
		}
		func() {
			defer func() { recover() }()
			v.Serve(func() int {
				if panics {
					panic("handler")
				}
				return status
			}, nil)
		}()
		res, err := lim.AllowN(context.Background(), "alice", 0)
		if err != nil {
			t.Fatal(err)
		}
		return res.Remaining
	}
	if r := attempt(http.StatusOK, false); r != 3 {
		t.Errorf("after a success: %d remaining, want 3", r)
	}
	if r := attempt(http.StatusUnauthorized, false); r != 2 {
		t.Errorf("after a failure: %d remaining, want 2", r)
	}
	if r := attempt(0, true); r != 1 {
		t.Errorf("after a panic: %d remaining, want 1", r)
	}
}

// A negative cost, too many charges and a failing limiter are reported, not
// served unlimited.
func TestEvaluatorErrors(t *testing.T) {
	e := newEnv(t)
	lim := e.limiter("x", floodgate.PerHour(3))
	d, _ := httplimit.NewEvaluator(httplimit.EvaluatorConfig{Logger: slog.New(slog.DiscardHandler)})
	var v httplimit.Answer
	d.Evaluate(context.Background(), &v, httplimit.Charge{Limiter: lim, Key: "k", Cost: -1})
	if v.Status() != http.StatusInternalServerError || v.ContentType() != "application/problem+json" || len(v.AppendBody(nil)) == 0 {
		t.Errorf("negative cost: status %d, type %q", v.Status(), v.ContentType())
	}
	many := make([]httplimit.Charge, httplimit.MaxRules+1)
	d.Evaluate(context.Background(), &v, many...)
	if v.Err() == nil {
		t.Error("too many charges: no error")
	}
	d.Evaluate(context.Background(), &v, httplimit.Charge{Limiter: failing{}, Key: "k", Cost: 1})
	if v.Err() == nil || v.Status() != 0 {
		t.Errorf("failing limiter: err %v, status %d", v.Err(), v.Status())
	}
	if _, err := httplimit.NewEvaluator(httplimit.EvaluatorConfig{Body: 9}); err == nil {
		t.Error("unknown Body accepted")
	}
}

// A PeerKeyer keys as KeyByIP over the same config: a spoofed header from
// an untrusted peer is ignored, a trusted proxy's is read.
func TestPeerKeyer(t *testing.T) {
	for _, tt := range []struct {
		name  string
		cfg   clientip.Config
		peer  string
		lines []string
	}{
		{"no proxy, spoofed", clientip.Config{}, "203.0.113.7:4711", []string{"198.51.100.1"}},
		{"untrusted peer, spoofed", clientip.Config{TrustedProxies: []string{"10.0.0.0/8"}}, "203.0.113.7:4711", []string{"198.51.100.1"}},
		{"trusted proxy", clientip.Config{TrustedProxies: []string{"10.0.0.0/8"}}, "10.1.2.3:4711", []string{"1.1.1.1, 198.51.100.1"}},
		{"trusted, two lines", clientip.Config{TrustedProxies: []string{"10.0.0.0/8"}}, "10.1.2.3:4711", []string{"1.1.1.1", "198.51.100.1, 10.9.9.9"}},
		{"real ip header", clientip.Config{TrustedProxies: []string{"10.0.0.0/8"}, Header: "x-real-ip"}, "10.1.2.3:4711", []string{"198.51.100.1"}},
		{"ipv6 peer", clientip.Config{}, "[2001:db8::1]:80", nil},
		{"unix peer", clientip.Config{TrustedProxies: []string{"10.0.0.0/8"}}, "", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			k, err := httplimit.NewPeerKeyer(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			res, _ := clientip.New(tt.cfg)
			req := httptest.NewRequest("GET", "/", nil)
			req.RemoteAddr = tt.peer
			header := tt.cfg.Header
			if header == "" {
				header = "X-Forwarded-For"
			}
			for _, l := range tt.lines {
				req.Header.Add(header, l)
			}
			var peer netip.AddrPort
			if tt.peer != "" {
				peer = netip.MustParseAddrPort(tt.peer)
			}
			if got, want := k.Key(peer, tt.lines), httplimit.KeyByIP(res)(req); got != want {
				t.Errorf("Key = %q, KeyByIP = %q", got, want)
			}
		})
	}
}
