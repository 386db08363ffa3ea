package echolimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/floodgate-go/floodgate"
	echolimit "github.com/floodgate-go/floodgate/contrib/echov5"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/httpmatch"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"
)

func serve(e *echo.Echo, method, path string, n int) {
	for range n {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
		fmt.Println(rec.Code, rec.Header().Get("X-Ratelimit-Remaining"))
	}
}

// Two requests a minute per client address, in one line.
func ExampleByIP() {
	e := echo.New()
	e.Use(echolimit.ByIP(2, time.Minute))
	e.GET("/hello", func(c *echo.Context) error { return c.String(http.StatusOK, "hello") })
	serve(e, "GET", "/hello", 3)
	// Output:
	// 200 1
	// 200 0
	// 429 0
}

// Rules of httplimit in Echo: failed logins only, with a handler that
// answers through Echo's errors.
func ExampleNew() {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	login, _ := floodgate.New(store, floodgate.Policy{Name: "login", Limits: []floodgate.Limit{floodgate.PerHour(2)}})
	mw, err := httplimit.New(httplimit.Config{Rules: []httplimit.Rule{
		{Limiter: login, Match: httpmatch.PathPrefix("/login"), Count: httplimit.CountFailed},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	e := echo.New()
	e.Use(middleware.Recover(), echolimit.New(mw))
	e.POST("/login", func(c *echo.Context) error { return echo.ErrUnauthorized })
	serve(e, "POST", "/login", 3)
	// Output:
	// 401 1
	// 401 0
	// 429 0
}
