package fiberlimit_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clock"
	fiberlimit "github.com/floodgate-go/floodgate/contrib/fiber"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/limiter"
)

// The walkthrough of Fiber's limiter, run against Fiber's limiter and
// fiberlimit side by side: an app with an {error, code} error envelope, a
// limiter on the group /api (100 a minute), the default limiter on
// /api/tasks (5 a minute), a login limiter on /api/login (5 failed
// attempts per 15 minutes, answered by LimitReached in the envelope), and
// /api/keyed limited per X-API-Key. Each scenario says what both do alike
// and where fiberlimit differs on purpose.

// limiters builds the walkthrough's limiters for one implementation.
type limiters struct {
	name                 string
	group, tasks, login  fiber.Handler
	keyed                fiber.Handler
	deniedHasQuotaFields bool // a 429 carries X-RateLimit-*
}

func envelope(c fiber.Ctx, code int, msg string) error {
	return c.Status(code).JSON(fiber.Map{"error": msg, "code": code})
}

func loginReached(c fiber.Ctx) error {
	return envelope(c, fiber.StatusTooManyRequests, "too many login attempts")
}

func byAPIKey(c fiber.Ctx) string { return c.Get("X-API-Key") }

func fiberLimiters() limiters {
	return limiters{
		name:  "fiber",
		group: limiter.New(limiter.Config{Max: 100, Expiration: time.Minute}),
		tasks: limiter.New(),
		login: limiter.New(limiter.Config{Max: 5, Expiration: 15 * time.Minute, SkipSuccessfulRequests: true,
			LimitReached: loginReached}),
		keyed: limiter.New(limiter.Config{KeyGenerator: byAPIKey}),
	}
}

func floodgateLimiters(store floodgate.Store) limiters {
	return limiters{
		name:  "fiberlimit",
		group: fiberlimit.New(fiberlimit.Config{Max: 100, Expiration: time.Minute, Name: "api", Store: store}),
		tasks: fiberlimit.New(fiberlimit.Config{Name: "tasks", Store: store}),
		login: fiberlimit.New(fiberlimit.Config{Max: 5, Expiration: 15 * time.Minute, SkipSuccessfulRequests: true,
			LimitReached: loginReached, Name: "login", Store: store}),
		keyed:                fiberlimit.New(fiberlimit.Config{KeyGenerator: byAPIKey, Name: "keyed", Store: store}),
		deniedHasQuotaFields: true,
	}
}

func walkthroughApp(l limiters) *fiber.App {
	app := fiber.New(fiber.Config{ErrorHandler: func(c fiber.Ctx, err error) error {
		code := fiber.StatusInternalServerError
		if fe, ok := errors.AsType[*fiber.Error](err); ok {
			code = fe.Code
		}
		return envelope(c, code, err.Error())
	}})
	api := app.Group("/api", l.group)
	api.Get("/tasks", l.tasks, func(c fiber.Ctx) error { return c.JSON([]string{"write tests"}) })
	api.Post("/login", l.login, func(c fiber.Ctx) error {
		if c.FormValue("password") != "right" {
			return fiber.ErrUnauthorized
		}
		return c.SendStatus(fiber.StatusNoContent)
	})
	api.Get("/keyed", l.keyed, func(c fiber.Ctx) error { return c.SendString("ok") })
	return app
}

type answer struct {
	status int
	header http.Header
	body   string
}

func call(t *testing.T, app *fiber.App, method, path string, header ...string) answer {
	t.Helper()
	var body io.Reader
	if method == "POST" {
		body = strings.NewReader(header[len(header)-1])
		header = header[:len(header)-1]
	}
	req := httptest.NewRequest(method, path, body)
	if method == "POST" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := app.Test(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

func both(t *testing.T, scenario func(t *testing.T, l limiters, app *fiber.App)) {
	for _, mk := range []func() limiters{fiberLimiters, func() limiters {
		s := memstore.New(memstore.Options{})
		t.Cleanup(func() { s.Close() })
		return floodgateLimiters(s)
	}} {
		l := mk()
		t.Run(l.name, func(t *testing.T) { scenario(t, l, walkthroughApp(l)) })
	}
}

func TestWalkthroughSideBySide(t *testing.T) {
	// 1. Seven GET /api/tasks in a row: the sixth and seventh are 429 with
	// Retry-After. Fiber's 429 has neither X-RateLimit-* nor a body;
	// fiberlimit's has the quota fields and a problem detail, so a client
	// sees why and until when.
	t.Run("seven requests", func(t *testing.T) {
		both(t, func(t *testing.T, l limiters, app *fiber.App) {
			var got []int
			var last answer
			for range 7 {
				last = call(t, app, "GET", "/api/tasks")
				got = append(got, last.status)
			}
			if fmt.Sprint(got) != "[200 200 200 200 200 429 429]" {
				t.Fatalf("statuses %v", got)
			}
			if ra, err := strconv.Atoi(last.header.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
				t.Errorf("Retry-After %q", last.header.Get("Retry-After"))
			}
			if has := last.header.Get("X-Ratelimit-Remaining") == "0"; has != l.deniedHasQuotaFields {
				t.Errorf("429 with X-RateLimit-Remaining %q", last.header.Get("X-Ratelimit-Remaining"))
			}
			if l.deniedHasQuotaFields && !strings.Contains(last.body, `"status":429`) {
				t.Errorf("429 body %q, want a problem detail", last.body)
			}
		})
	})

	// 2. The fields of a successful answer: X-RateLimit-Limit, -Remaining
	// going down, -Reset. /api/tasks is behind two limiters, the group's
	// (100) and its own (5). Fiber's outer limiter overwrites the inner
	// one's fields, so they describe the group's 100 while 5 is what
	// binds; fiberlimit merges them into one set describing the binding
	// limit, and RateLimit-Policy lists both.
	t.Run("success fields", func(t *testing.T) {
		both(t, func(t *testing.T, l limiters, app *fiber.App) {
			for i := range 3 {
				a := call(t, app, "GET", "/api/tasks")
				limit, remaining := "100", strconv.Itoa(99-i)
				if l.deniedHasQuotaFields {
					limit, remaining = "5", strconv.Itoa(4-i)
				}
				for _, f := range []string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"} {
					if n := len(a.header.Values(f)); n != 1 {
						t.Errorf("%s sent %d times", f, n)
					}
				}
				if a.header.Get("X-Ratelimit-Limit") != limit || a.header.Get("X-Ratelimit-Remaining") != remaining || a.header.Get("X-Ratelimit-Reset") == "" {
					t.Errorf("request %d: %v", i+1, a.header)
				}
				if l.deniedHasQuotaFields {
					if p := a.header.Values("Ratelimit-Policy"); fmt.Sprint(p) != `["api";q=100;w=60 "tasks";q=5;w=60]` {
						t.Errorf("RateLimit-Policy %q", p)
					}
				}
			}
		})
	})

	// 3. Five failed logins, then the sixth: LimitReached's envelope and a
	// Retry-After of the whole 15 minutes, counted from the first attempt
	// in both.
	t.Run("failed logins", func(t *testing.T) {
		both(t, func(t *testing.T, l limiters, app *fiber.App) {
			for i := range 5 {
				if a := call(t, app, "POST", "/api/login", "password=wrong"); a.status != 401 {
					t.Fatalf("attempt %d: %d", i+1, a.status)
				}
			}
			a := call(t, app, "POST", "/api/login", "password=wrong")
			var env struct {
				Error string
				Code  int
			}
			if a.status != 429 || json.Unmarshal([]byte(a.body), &env) != nil || env.Code != 429 {
				t.Fatalf("sixth attempt: %d %q", a.status, a.body)
			}
			if ra, err := strconv.Atoi(a.header.Get("Retry-After")); err != nil || ra < 890 || ra > 900 {
				t.Errorf("Retry-After %q, want the 15 minutes", a.header.Get("Retry-After"))
			}
		})
	})

	// 4. A successful login does not use up the login budget.
	t.Run("successful logins", func(t *testing.T) {
		both(t, func(t *testing.T, l limiters, app *fiber.App) {
			call(t, app, "POST", "/api/login", "password=wrong")
			for i := range 6 {
				if a := call(t, app, "POST", "/api/login", "password=right"); a.status != 204 {
					t.Fatalf("login %d: %d", i+1, a.status)
				}
			}
			for i := range 4 {
				if a := call(t, app, "POST", "/api/login", "password=wrong"); a.status != 401 {
					t.Fatalf("failure %d after the successes: %d, want 401 (4 of 5 left)", i+2, a.status)
				}
			}
			if a := call(t, app, "POST", "/api/login", "password=wrong"); a.status != 429 {
				t.Errorf("sixth failure: %d, want 429", a.status)
			}
		})
	})

	// 5. Keyed by X-API-Key: two keys, two budgets.
	t.Run("two API keys", func(t *testing.T) {
		both(t, func(t *testing.T, l limiters, app *fiber.App) {
			var got []string
			for _, k := range []string{"a", "a", "a", "b", "a", "b"} {
				got = append(got, k+":"+call(t, app, "GET", "/api/keyed", "X-API-Key", k).header.Get("X-Ratelimit-Remaining"))
			}
			want := "[a:4 a:3 a:2 b:4 a:1 b:3]"
			if !l.deniedHasQuotaFields {
				// Fiber's group limiter overwrites the fields: its own count.
				want = "[a:99 a:98 a:97 b:96 a:95 b:94]"
			}
			if fmt.Sprint(got) != want {
				t.Errorf("remaining %v, want %v", got, want)
			}
		})
	})
}

// The lockout of a FixedWindow lasts Expiration from the first counted
// request, wherever it falls against the clock: the 15-minute lockout
// ends after 15 minutes, not at the next quarter hour.
func TestLockoutLastsExpiration(t *testing.T) {
	var now atomic.Int64
	// A start 247 s before a quarter hour: an aligned window would end the
	// lockout after 247 s.
	start := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC).Add(15*time.Minute - 247*time.Second).UnixNano()
	now.Store(start)
	s := memstore.New(memstore.Options{Clock: clock.Func(now.Load)})
	defer s.Close()
	for _, w := range []fiberlimit.Window{nil, fiberlimit.FixedWindow{}, fiberlimit.SlidingWindow{}} {
		now.Store(start)
		app := fiber.New()
		app.Post("/login", fiberlimit.New(fiberlimit.Config{Max: 5, Expiration: 15 * time.Minute, SkipSuccessfulRequests: true,
			LimiterMiddleware: w, Store: s, Name: fmt.Sprintf("login-%T", w)}), func(c fiber.Ctx) error { return fiber.ErrUnauthorized })
		for range 5 {
			call(t, app, "POST", "/login", "")
		}
		for _, at := range []struct {
			after time.Duration
			want  int
		}{{247 * time.Second, 429}, {15*time.Minute - time.Millisecond, 429}, {15 * time.Minute, 401}} {
			now.Store(start + int64(at.after))
			if a := call(t, app, "POST", "/login", ""); a.status != at.want {
				t.Errorf("%T: %s after the first attempt: %d, want %d", w, at.after, a.status, at.want)
			}
		}
	}
}

// Aligned windows are what the lockout test rules out by default: the
// same five failures 247 s before a quarter hour are forgiven at it.
func TestAlignedWindowEndsAtTheClock(t *testing.T) {
	var now atomic.Int64
	start := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC).Add(15*time.Minute - 247*time.Second).UnixNano()
	now.Store(start)
	s := memstore.New(memstore.Options{Clock: clock.Func(now.Load)})
	defer s.Close()
	app := fiber.New()
	app.Post("/login", fiberlimit.New(fiberlimit.Config{Max: 5, Expiration: 15 * time.Minute,
		LimiterMiddleware: fiberlimit.FixedWindow{Aligned: true}, Store: s}), func(c fiber.Ctx) error { return fiber.ErrUnauthorized })
	for range 5 {
		call(t, app, "POST", "/login", "")
	}
	now.Store(start + int64(247*time.Second))
	if a := call(t, app, "POST", "/login", ""); a.status != 401 {
		t.Errorf("aligned window at the quarter hour: %d, want 401", a.status)
	}
}

// ExpirationFunc gives a request its own period, as in Fiber: each
// (max, expiration) pair is a limit of its own.
func TestExpirationFunc(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC).UnixNano())
	s := memstore.New(memstore.Options{Clock: clock.Func(now.Load)})
	defer s.Close()
	app := fiber.New()
	app.Use(fiberlimit.New(fiberlimit.Config{Max: 1, Expiration: time.Minute, Store: s,
		ExpirationFunc: func(c fiber.Ctx) time.Duration {
			if c.Path() == "/slow" {
				return time.Hour
			}
			return 0 // Expiration
		}}))
	app.Get("/*", func(c fiber.Ctx) error { return nil })
	codes := func(path string) string {
		return fmt.Sprint(call(t, app, "GET", path).status, call(t, app, "GET", path).status)
	}
	if got := codes("/fast") + " " + codes("/slow"); got != "200 429 200 429" {
		t.Fatalf("first minute: %s", got)
	}
	now.Add(int64(time.Minute))
	if got := codes("/fast") + " " + codes("/slow"); got != "200 429 429 429" {
		t.Errorf("a minute later: %s, want /fast refilled and /slow not", got)
	}
	if p := call(t, app, "GET", "/slow").header.Get("Ratelimit-Policy"); p != `"limiter/1/1h0m0s";q=1;w=3600` {
		t.Errorf("RateLimit-Policy of /slow %q", p)
	}
}

// Trusted proxies come from the app's own configuration. Behind a trusted
// proxy on loopback, a client that writes a fresh X-Forwarded-For entry per
// request beats Fiber's limiter (its c.IP() is the header as written) and
// not fiberlimit's (the entry the proxy appended, walked from the right).
func TestTrustedProxiesFromFiberConfig(t *testing.T) {
	cfg := fiber.Config{TrustProxy: true, ProxyHeader: fiber.HeaderXForwardedFor,
		TrustProxyConfig: fiber.TrustProxyConfig{Loopback: true}}
	for _, tt := range []struct {
		name string
		mw   fiber.Handler
		want string
	}{
		{"fiber", limiter.New(limiter.Config{Max: 2}), "[200 200 200 200 200]"},
		{"fiberlimit", fiberlimit.New(fiberlimit.Config{Max: 2}), "[200 200 429 429 429]"},
	} {
		app := fiber.New(cfg)
		app.Use(tt.mw)
		app.Get("/", func(c fiber.Ctx) error { return c.SendString("ok") })
		base := serve(t, app)
		var got []int
		for i := range 5 {
			req, _ := http.NewRequest("GET", base+"/", nil)
			req.Header.Set("X-Forwarded-For", fmt.Sprintf("198.51.100.%d, 203.0.113.7", i+1))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			got = append(got, resp.StatusCode)
		}
		if fmt.Sprint(got) != tt.want {
			t.Errorf("%s: %v, want %s", tt.name, got, tt.want)
		}
	}
	if c := fiberlimit.TrustedProxies(fiber.Config{}); len(c.TrustedProxies) != 0 || c.Header != "" {
		t.Errorf("no TrustProxy: %+v, want no trusted proxy", c)
	}
}

// Several rules in one middleware: all or nothing, one set of fields, and
// the 503 of a failed-closed limiter in the Body format, through
// LimitReached like a 429.
func TestRulesAndRefusals(t *testing.T) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	lim := func(name string, n int64) floodgate.Limiter {
		l, err := floodgate.New(s, floodgate.Policy{Name: name, Limits: []floodgate.Limit{floodgate.PerHour(n)}})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	app := fiber.New()
	app.Use(fiberlimit.New(fiberlimit.Config{Rules: []fiberlimit.Rule{
		{Limiter: lim("all", 3)},
		{Limiter: lim("writes", 1), Match: func(c fiber.Ctx) bool { return c.Method() == "POST" }},
	}}))
	app.All("/", func(c fiber.Ctx) error { return nil })
	var got []string
	for _, m := range []string{"POST", "POST", "GET", "GET", "GET"} {
		a := call(t, app, m, "/", "")
		got = append(got, fmt.Sprint(a.status, " ", a.header.Get("X-Ratelimit-Remaining")))
	}
	// The second POST is denied by "writes" and charged to neither.
	if fmt.Sprint(got) != "[200 0 429 0 200 1 200 0 429 0]" {
		t.Errorf("%v", got)
	}
	if _, err := fiberlimit.NewHandler(fiberlimit.Config{Max: 3, Rules: []fiberlimit.Rule{{Limiter: lim("x", 1)}}}); !errors.Is(err, fiberlimit.ErrInvalidConfig) {
		t.Errorf("Max with Rules: %v", err)
	}
}

// A key of one's own keeps the spoofing defence: the walkthrough's key (an
// API key, falling back to the client) spelled with ClientKey, or with ""
// for "the client", keys a client that writes X-Forwarded-For by the
// address the trusted proxy saw; spelled with c.IP(), as Fiber's docs
// spell it, every spoofed request has a key of its own. Requests that fall
// back ("") are keyed by their own client, never in one shared bucket.
func TestOwnKeyKeepsClientIdentity(t *testing.T) {
	cfg := fiber.Config{TrustProxy: true, ProxyHeader: fiber.HeaderXForwardedFor,
		TrustProxyConfig: fiber.TrustProxyConfig{Loopback: true}}
	apiKeyOr := func(fallback func(fiber.Ctx) string) func(fiber.Ctx) string {
		return func(c fiber.Ctx) string {
			if k := c.Get("X-API-Key"); k != "" {
				return "key:" + k
			}
			return fallback(c)
		}
	}
	for _, tt := range []struct {
		name string
		key  func(fiber.Ctx) string
		want string
	}{
		{"c.IP()", apiKeyOr(func(c fiber.Ctx) string { return "ip:" + c.IP() }), "[200 200 200 200 200] [200 200]"},
		{"ClientKey", apiKeyOr(func(c fiber.Ctx) string { return "ip:" + fiberlimit.ClientKey(c) }), "[200 200 429 429 429] [200 200]"},
		{"empty", apiKeyOr(func(fiber.Ctx) string { return "" }), "[200 200 429 429 429] [200 200]"},
	} {
		app := fiber.New(cfg)
		app.Use(fiberlimit.New(fiberlimit.Config{Max: 2, KeyGenerator: tt.key}))
		app.Get("/", func(c fiber.Ctx) error { return c.SendString("ok") })
		base := serve(t, app)
		// One client behind the proxy (203.0.113.7) that invents a new
		// address per request, then another client (203.0.113.8).
		send := func(n int, client string) []int {
			var got []int
			for i := range n {
				req, _ := http.NewRequest("GET", base+"/", nil)
				req.Header.Set("X-Forwarded-For", fmt.Sprintf("198.51.100.%d, %s", i+1, client))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				got = append(got, resp.StatusCode)
			}
			return got
		}
		if got := fmt.Sprint(send(5, "203.0.113.7"), send(2, "203.0.113.8")); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}
