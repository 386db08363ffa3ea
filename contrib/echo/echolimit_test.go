package echolimit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
	echolimit "github.com/floodgate-go/floodgate/contrib/echo"
	"github.com/floodgate-go/floodgate/contrib/internal/adaptertest"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
)

func TestAdapter(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T, s adaptertest.Setup) string {
		e := echo.New()
		e.Use(echolimit.New(adaptertest.Middleware(t, s)))
		e.GET("/hello", func(c echo.Context) error { return c.String(http.StatusOK, "hello") })
		e.POST("/login", func(c echo.Context) error { return c.NoContent(adaptertest.LoginStatus(c.FormValue("password"))) })
		return adaptertest.Serve(t, e)
	})
}

// With Echo's test tooling (a context over a recorder): a denied request is
// answered by the middleware and never reaches the handler.
func TestContext(t *testing.T) {
	api, login := adaptertest.Limiters(t, floodgate.PerMinute(1), floodgate.PerHour(1))
	e := echo.New()
	ran := 0
	h := echolimit.New(adaptertest.Middleware(t, adaptertest.Setup{API: api, Login: login}))(func(c echo.Context) error {
		ran++
		return c.String(http.StatusOK, "hello")
	})
	for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/hello", nil)
		if err := h(e.NewContext(req, rec)); err != nil {
			t.Fatal(err)
		}
		if rec.Code != want || rec.Header().Get("X-Ratelimit-Limit") != "1" {
			t.Errorf("request %d: %d with X-RateLimit-Limit %q, want %d with 1", i+1, rec.Code, rec.Header().Get("X-Ratelimit-Limit"), want)
		}
	}
	if ran != 1 {
		t.Errorf("handler ran %d times, want 1", ran)
	}
}

// Handler errors count with the status Echo's error handler answers, and
// a panic behind middleware.Recover counts as a failure.
func TestErrorsCountAsFailures(t *testing.T) {
	api, login := adaptertest.Limiters(t, floodgate.PerMinute(100), floodgate.PerHour(3))
	e := echo.New()
	e.Use(middleware.Recover())
	e.Use(echolimit.New(adaptertest.Middleware(t, adaptertest.Setup{API: api, Login: login})))
	e.POST("/login", func(c echo.Context) error {
		switch c.FormValue("password") {
		case "panic":
			panic("handler failed")
		case "forbidden":
			return echo.NewHTTPError(http.StatusForbidden, "no")
		case "error":
			return echo.ErrBadGateway.WithInternal(http.ErrHandlerTimeout)
		}
		return c.NoContent(http.StatusNoContent)
	})
	post := func(pw string) int {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("POST", "/login", strings.NewReader("password="+pw))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		e.ServeHTTP(rec, req)
		return rec.Code
	}
	for i, tt := range []struct {
		pw   string
		want int
	}{{"ok", 204}, {"panic", 500}, {"ok", 204}, {"forbidden", 403}, {"ok", 204}, {"error", 502}, {"ok", 429}} {
		if got := post(tt.pw); got != tt.want {
			t.Errorf("attempt %d (%s): %d, want %d", i+1, tt.pw, got, tt.want)
		}
	}
}
