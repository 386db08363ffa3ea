package echolimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/floodgate-go/floodgate"
	echolimit "github.com/floodgate-go/floodgate/contrib/echov5"
	"github.com/floodgate-go/floodgate/httplimit/httplimittest"
	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"
)

func TestAdapter(t *testing.T) {
	httplimittest.Run(t, func(t *testing.T, s httplimittest.Setup) string {
		e := echo.New()
		e.Use(echolimit.New(httplimittest.Middleware(t, s)))
		e.GET("/hello", func(c *echo.Context) error { return c.String(http.StatusOK, "hello") })
		e.POST("/login", func(c *echo.Context) error { return c.NoContent(httplimittest.LoginStatus(c.FormValue("password"))) })
		return httplimittest.Serve(t, e)
	})
}

// With Echo's test tooling (a context over a recorder): a denied request is
// answered by the middleware and never reaches the handler.
func TestContext(t *testing.T) {
	api, login := httplimittest.Limiters(t, floodgate.PerMinute(1), floodgate.PerHour(1))
	e := echo.New()
	mw := echolimit.New(httplimittest.Middleware(t, httplimittest.Setup{API: api, Login: login}))
	httplimittest.OneThenDenied(t, func(rec *httptest.ResponseRecorder) bool {
		ran := false
		h := mw(func(c *echo.Context) error { ran = true; return c.String(http.StatusOK, "hello") })
		if err := h(e.NewContext(httptest.NewRequest("GET", "/hello", nil), rec)); err != nil {
			t.Fatal(err)
		}
		return ran
	})
}

// Handler errors count with the status Echo's error handler answers, and
// a panic behind middleware.Recover counts as a failure.
func TestErrorsCountAsFailures(t *testing.T) {
	api, login := httplimittest.Limiters(t, floodgate.PerMinute(100), floodgate.PerHour(3))
	e := echo.New()
	e.Use(middleware.Recover())
	e.Use(echolimit.New(httplimittest.Middleware(t, httplimittest.Setup{API: api, Login: login})))
	e.POST("/login", func(c *echo.Context) error {
		switch c.FormValue("password") {
		case "panic":
			panic("handler failed")
		case "forbidden":
			return echo.NewHTTPError(http.StatusForbidden, "no")
		case "error":
			return echo.HTTPError{Code: http.StatusBadGateway}.Wrap(http.ErrHandlerTimeout)
		}
		return c.NoContent(http.StatusNoContent)
	})
	try := httplimittest.Try
	httplimittest.Attempts(t, e, try("ok", 204), try("panic", 500), try("ok", 204), try("forbidden", 403), try("ok", 204), try("error", 502), try("ok", 429))
}
