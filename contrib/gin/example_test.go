package ginlimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/floodgate-go/floodgate"
	ginlimit "github.com/floodgate-go/floodgate/contrib/gin"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/httpmatch"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/gin-gonic/gin"
)

// serve sends n requests to r and prints each status and the units left.
func serve(r http.Handler, method, path string, n int) {
	for range n {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
		fmt.Println(rec.Code, rec.Header().Get("X-Ratelimit-Remaining"))
	}
}

// Two requests a minute per client address, in one line.
func ExampleByIP() {
	r := gin.New()
	r.Use(ginlimit.ByIP(2, time.Minute))
	r.GET("/hello", func(c *gin.Context) { c.String(http.StatusOK, "hello") })
	serve(r, "GET", "/hello", 3)
	// Output:
	// 200 1
	// 200 0
	// 429 0
}

// Rules of httplimit in gin: a limit for the API and one that counts only
// failed logins.
func ExampleNew() {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	api, _ := floodgate.New(store, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerMinute(100)}})
	login, _ := floodgate.New(store, floodgate.Policy{Name: "login", Limits: []floodgate.Limit{floodgate.PerHour(2)}})
	mw, err := httplimit.New(httplimit.Config{Rules: []httplimit.Rule{
		{Limiter: api},
		{Limiter: login, Match: httpmatch.PathPrefix("/login"), Count: httplimit.CountFailed},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	r := gin.New()
	r.Use(gin.Recovery(), ginlimit.New(mw))
	r.POST("/login", func(c *gin.Context) { c.Status(http.StatusUnauthorized) })
	serve(r, "POST", "/login", 3)
	// Output:
	// 401 1
	// 401 0
	// 429 0
}
