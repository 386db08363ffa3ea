package httplimit_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/httplimit"
)

// Every refusal the middleware writes — a limit's 429, the 503 of a
// limiter that failed closed or could not decide, the 500 of an invalid
// cost — takes the body format of Config.Body and goes through
// Config.OnLimited, so an application's error envelope covers them all.
func TestRefusalsShareBodyAndHandler(t *testing.T) {
	e := newEnv(t)
	refusals := []struct {
		name   string
		status int
		source floodgate.Source
		rule   func(name string) httplimit.Rule
		cfg    func(*httplimit.Config)
	}{
		{"limit", 429, "memory", func(name string) httplimit.Rule {
			return httplimit.Rule{Limiter: e.limiter(name, floodgate.PerHour(1))}
		}, nil},
		{"fail closed", 503, floodgate.SourceFailClosed, func(string) httplimit.Rule {
			return httplimit.Rule{Limiter: failoverLimiter(t, failover.FailClosed)}
		}, nil},
		{"could not decide", 503, httplimit.SourceError, func(string) httplimit.Rule {
			return httplimit.Rule{Limiter: failing{}}
		}, func(c *httplimit.Config) { c.OnError = httplimit.UnavailableOnError }},
		{"invalid cost", 500, httplimit.SourceInvalidCost, func(name string) httplimit.Rule {
			return httplimit.Rule{Limiter: e.limiter(name, floodgate.PerHour(1)), Cost: func(*http.Request) int64 { return -1 }}
		}, nil},
	}
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	policies := 0
	for _, rf := range refusals {
		// answer is the response to the second request, after one that may
		// pass, of a middleware of its own.
		answer := func(cfg httplimit.Config) (int, http.Header, string) {
			policies++
			cfg.Rules = []httplimit.Rule{rf.rule(fmt.Sprint("p", policies))}
			cfg.Logger = slog.New(slog.DiscardHandler)
			if rf.cfg != nil {
				rf.cfg(&cfg)
			}
			h := mustNew(t, cfg).Handler(ok)
			rec := get(h, "/", "192.0.2.1:1")
			if rec.Code < 400 {
				rec = get(h, "/", "192.0.2.1:1")
			}
			return rec.Code, rec.Header(), rec.Body.String()
		}
		t.Run(rf.name, func(t *testing.T) {
			for _, body := range []httplimit.Body{httplimit.BodyProblem, httplimit.BodyJSON, httplimit.BodyNone} {
				code, h, b := answer(httplimit.Config{Body: body})
				if code != rf.status {
					t.Errorf("body %d: status %d, want %d", body, code, rf.status)
				}
				switch body {
				case httplimit.BodyProblem:
					var p struct{ Status int }
					if h.Get("Content-Type") != "application/problem+json" || json.Unmarshal([]byte(b), &p) != nil || p.Status != rf.status {
						t.Errorf("problem body: %q %q", h.Get("Content-Type"), b)
					}
				case httplimit.BodyJSON:
					var j struct{ Error string }
					if h.Get("Content-Type") != "application/json" || json.Unmarshal([]byte(b), &j) != nil || j.Error == "" {
						t.Errorf("JSON body: %q %q", h.Get("Content-Type"), b)
					}
				case httplimit.BodyNone:
					if b != "" || h.Get("Content-Type") != "" {
						t.Errorf("no body: %q %q", h.Get("Content-Type"), b)
					}
				}
			}
			var seen floodgate.Result
			code, _, b := answer(httplimit.Config{OnLimited: func(w http.ResponseWriter, _ *http.Request, res floodgate.Result) {
				seen = res
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(httplimit.Status(res))
				fmt.Fprintf(w, `{"error":"refused","code":%d}`, httplimit.Status(res))
			}})
			if code != rf.status || b != fmt.Sprintf(`{"error":"refused","code":%d}`, rf.status) || seen.Source != rf.source {
				t.Errorf("OnLimited: %d %q, Source %q; want %d and Source %q", code, b, seen.Source, rf.status, rf.source)
			}
		})
	}
}
