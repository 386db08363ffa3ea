package fiberlimit_test

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	fiberlimit "github.com/floodgate-go/floodgate/contrib/fiber"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/httplimit/httplimittest"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/gofiber/fiber/v3"
)

// serve runs app on a loopback port until the test ends.
func serve(t *testing.T, app *fiber.App) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true}) }()
	t.Cleanup(func() {
		if err := app.Shutdown(); err != nil {
			t.Error(err)
		}
		<-done
	})
	return "http://" + ln.Addr().String()
}

func TestAdapter(t *testing.T) {
	httplimittest.Run(t, func(t *testing.T, s httplimittest.Setup) string {
		app := fiber.New()
		app.Get("/hello", fiberlimit.New(fiberlimit.Config{Limiter: s.API, ClientIP: s.ClientIP}),
			func(c fiber.Ctx) error { return c.SendString("hello") })
		app.Post("/login", fiberlimit.New(fiberlimit.Config{Limiter: s.Login, ClientIP: s.ClientIP, SkipSuccessfulRequests: true}),
			func(c fiber.Ctx) error { return c.SendStatus(httplimittest.LoginStatus(c.FormValue("password"))) })
		return serve(t, app)
	})
}

// do sends one request through app.Test and returns status, header and body.
func do(t *testing.T, app *fiber.App, method, path string, header ...string) (int, http.Header, string) {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := app.Test(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func statuses(t *testing.T, app *fiber.App, n int, path string, header ...string) []int {
	t.Helper()
	var got []int
	for range n {
		s, _, _ := do(t, app, "GET", path, header...)
		got = append(got, s)
	}
	return got
}

func equal(t *testing.T, what string, got []int, want ...int) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %v, want %v", what, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("%s: %v, want %v", what, got, want)
			return
		}
	}
}

func app(cfg fiberlimit.Config) *fiber.App {
	a := fiber.New()
	a.Use(fiberlimit.New(cfg))
	a.Get("/*", func(c fiber.Ctx) error {
		if c.Query("fail") != "" {
			return fiber.ErrBadRequest
		}
		if c.Query("err") != "" {
			return errors.New("plain error")
		}
		return c.SendString("ok")
	})
	return a
}

func TestDefaults(t *testing.T) {
	a := app(fiberlimit.Config{})
	equal(t, "requests", statuses(t, a, 6, "/"), 200, 200, 200, 200, 200, 429)
	status, h, body := do(t, a, "GET", "/")
	if status != 429 || h.Get("X-Ratelimit-Limit") != "5" || h.Get("Ratelimit-Policy") != `"limiter";q=5;w=60` ||
		h.Get("Retry-After") == "" || h.Get("Content-Type") != "application/problem+json" || !strings.Contains(body, `"violated-policies":["limiter"]`) {
		t.Errorf("429: header %v body %s", h, body)
	}
}

func TestNextMaxAndKey(t *testing.T) {
	a := app(fiberlimit.Config{
		Max:          1,
		Next:         func(c fiber.Ctx) bool { return c.Path() == "/health" },
		MaxFunc:      func(c fiber.Ctx) int { return map[string]int{"pro": 3, "free": 1, "none": 0}[c.Get("X-Plan")] },
		KeyGenerator: func(c fiber.Ctx) string { return c.Get("X-Account") },
	})
	equal(t, "health", statuses(t, a, 3, "/health"), 200, 200, 200)
	equal(t, "free account a", statuses(t, a, 2, "/", "X-Plan", "free", "X-Account", "a"), 200, 429)
	equal(t, "pro account b", statuses(t, a, 4, "/", "X-Plan", "pro", "X-Account", "b"), 200, 200, 200, 429)
	equal(t, "unlimited plan", statuses(t, a, 3, "/", "X-Plan", "none", "X-Account", "a"), 200, 200, 200)
	_, h, _ := do(t, a, "GET", "/", "X-Plan", "pro", "X-Account", "c")
	if h.Get("X-Ratelimit-Limit") != "3" || h.Get("Ratelimit-Policy") != `"limiter/3";q=3;w=60` {
		t.Errorf("pro headers: %v", h)
	}
}

func TestLimitReachedAndHeadersOff(t *testing.T) {
	a := app(fiberlimit.Config{Max: 1, DisableHeaders: true,
		LimitReached: func(c fiber.Ctx) error { return c.Status(418).SendString("teapot") }})
	do(t, a, "GET", "/")
	status, h, body := do(t, a, "GET", "/")
	if status != 418 || body != "teapot" {
		t.Errorf("limited: %d %q", status, body)
	}
	for _, name := range []string{"X-Ratelimit-Limit", "Ratelimit", "Ratelimit-Policy", "Retry-After"} {
		if h.Get(name) != "" {
			t.Errorf("%s sent with DisableHeaders", name)
		}
	}
}

func TestSkipRequests(t *testing.T) {
	a := app(fiberlimit.Config{Max: 2, SkipFailedRequests: true})
	equal(t, "failures are refunded", statuses(t, a, 4, "/?fail=1"), 400, 400, 400, 400)
	equal(t, "plain errors count as 500", statuses(t, a, 2, "/?err=1"), 500, 500)
	equal(t, "successes count", statuses(t, a, 3, "/"), 200, 200, 429)

	b := app(fiberlimit.Config{Max: 2, SkipSuccessfulRequests: true})
	equal(t, "successes are refunded", statuses(t, b, 4, "/"), 200, 200, 200, 200)
	equal(t, "failures count", statuses(t, b, 3, "/?fail=1"), 400, 400, 429)

	if _, err := fiberlimit.NewHandler(fiberlimit.Config{SkipFailedRequests: true, SkipSuccessfulRequests: true}); !errors.Is(err, fiberlimit.ErrInvalidConfig) {
		t.Errorf("both skips: %v", err)
	}
}

// Keys longer than floodgate.MaxKeyLen are hashed, not truncated: two that
// share a long prefix keep limits of their own.
func TestLongKeys(t *testing.T) {
	prefix := strings.Repeat("k", 300)
	a := app(fiberlimit.Config{Max: 1, KeyGenerator: func(c fiber.Ctx) string { return prefix + c.Get("X-Id") }})
	equal(t, "key a", statuses(t, a, 2, "/", "X-Id", "a"), 200, 429)
	equal(t, "key b", statuses(t, a, 2, "/", "X-Id", "b"), 200, 429)
}

func TestAlgorithmAndStore(t *testing.T) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	a := app(fiberlimit.Config{Max: 2, Expiration: time.Hour, LimiterMiddleware: fiberlimit.FixedWindow{Aligned: true}, Store: s, Name: "fixed"})
	equal(t, "fixed window", statuses(t, a, 3, "/"), 200, 200, 429)
	_, h, _ := do(t, a, "GET", "/")
	if h.Get("Ratelimit-Policy") != `"fixed";q=2;w=3600` {
		t.Errorf("RateLimit-Policy %q", h.Get("Ratelimit-Policy"))
	}
}

// A limiter that fails is served by default, answered by OnError when it
// says so, and logged with the key redacted unless DisableValueRedaction.
func TestErrors(t *testing.T) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	for _, redact := range []bool{true, false} {
		var log bytes.Buffer
		cfg := fiberlimit.Config{Store: floodgatetest.Down(s), Logger: slog.New(slog.NewTextHandler(&log, nil)), DisableValueRedaction: !redact,
			KeyGenerator: func(fiber.Ctx) string { return "secret-api-key" }}
		equal(t, "fail open", statuses(t, app(cfg), 2, "/"), 200, 200)
		if strings.Contains(log.String(), "secret-api-key") == redact || !strings.Contains(log.String(), floodgatetest.ErrDown.Error()) {
			t.Errorf("redact %v: log %q", redact, log.String())
		}
	}
	a := app(fiberlimit.Config{Store: floodgatetest.Down(s), Logger: slog.New(slog.DiscardHandler),
		OnError: func(c fiber.Ctx, err error) bool { c.Status(503); return false }})
	equal(t, "OnError", statuses(t, a, 1, "/"), 503)
}

// The engine's failure mode decides: fail-closed answers 503, not 429.
func TestFailClosed(t *testing.T) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	fs, err := failover.New(floodgatetest.Down(s), failover.Options{Mode: failover.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	status, h, body := do(t, app(fiberlimit.Config{Store: fs}), "GET", "/")
	if status != 503 || h.Get("Content-Type") != "application/problem+json" || !strings.Contains(body, `"status":503`) {
		t.Errorf("fail closed: %d %v %s", status, h, body)
	}
}

// The fail-closed 503 takes the Body format and LimitReached, as the 429
// does.
func TestFailClosedShaped(t *testing.T) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	fs, err := failover.New(floodgatetest.Down(s), failover.Options{Mode: failover.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	status, h, body := do(t, app(fiberlimit.Config{Store: fs, Body: httplimit.BodyJSON}), "GET", "/")
	if status != 503 || h.Get("Content-Type") != "application/json" || !strings.Contains(body, `"error":"rate limiter unavailable"`) {
		t.Errorf("JSON body: %d %v %s", status, h, body)
	}
	status, _, body = do(t, app(fiberlimit.Config{Store: fs, LimitReached: func(c fiber.Ctx) error {
		code := httplimit.Status(fiberlimit.ResultOf(c))
		return c.Status(code).JSON(fiber.Map{"error": "refused", "code": code})
	}}), "GET", "/")
	if status != 503 || body != `{"code":503,"error":"refused"}` {
		t.Errorf("LimitReached: %d %s", status, body)
	}
}
