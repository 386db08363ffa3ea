package ginlimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/floodgate-go/floodgate"
	ginlimit "github.com/floodgate-go/floodgate/contrib/gin"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/httplimit/httplimittest"
	"github.com/gin-gonic/gin"
)

func init() { gin.SetMode(gin.TestMode) }

func TestAdapter(t *testing.T) {
	httplimittest.Run(t, func(t *testing.T, s httplimittest.Setup) string {
		r := gin.New()
		r.Use(ginlimit.New(httplimittest.Middleware(t, s)))
		r.GET("/hello", func(c *gin.Context) { c.String(http.StatusOK, "hello") })
		r.POST("/login", func(c *gin.Context) { c.Status(httplimittest.LoginStatus(c.PostForm("password"))) })
		return httplimittest.Serve(t, r)
	})
}

// With gin's own test context: a denied request is answered and aborted,
// so the handler after the middleware never runs.
func TestTestContext(t *testing.T) {
	api, login := httplimittest.Limiters(t, floodgate.PerMinute(1), floodgate.PerHour(1))
	h := ginlimit.New(httplimittest.Middleware(t, httplimittest.Setup{API: api, Login: login}))
	httplimittest.OneThenDenied(t, func(rec *httptest.ResponseRecorder) bool {
		c, _ := gin.CreateTestContext(rec)
		c.Request = httptest.NewRequest("GET", "/hello", nil)
		h(c)
		return !c.IsAborted()
	})
}

// A handler that panics behind gin.Recovery counts as a failed login: its
// charge is kept. Gin's errors (c.AbortWithStatus) count by their status.
func TestPanicAndAbortCountAsFailures(t *testing.T) {
	api, login := httplimittest.Limiters(t, floodgate.PerMinute(100), floodgate.PerHour(2))
	r := gin.New()
	r.Use(gin.CustomRecoveryWithWriter(nil, func(c *gin.Context, _ any) { c.AbortWithStatus(500) }))
	r.Use(ginlimit.New(httplimittest.Middleware(t, httplimittest.Setup{API: api, Login: login})))
	r.POST("/login", func(c *gin.Context) {
		switch c.PostForm("password") {
		case "panic":
			panic("handler failed")
		case "abort":
			c.AbortWithStatus(http.StatusForbidden)
		default:
			c.Status(http.StatusNoContent)
		}
	})
	try := httplimittest.Try
	httplimittest.Attempts(t, r, try("ok", 204), try("panic", 500), try("ok", 204), try("abort", 403), try("ok", 429))
}

// Config.OnLimited writes through gin's writer.
func TestOnLimited(t *testing.T) {
	api, _ := httplimittest.Limiters(t, floodgate.PerMinute(1), floodgate.PerHour(1))
	mw, err := httplimit.New(httplimit.Config{
		Rules: []httplimit.Rule{{Limiter: api}},
		OnLimited: func(w http.ResponseWriter, _ *http.Request, res floodgate.Result) {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("slow down"))
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := gin.New()
	r.Use(ginlimit.New(mw))
	r.GET("/", func(c *gin.Context) { c.String(200, "ok") })
	var last *httptest.ResponseRecorder
	for range 2 {
		last = httptest.NewRecorder()
		r.ServeHTTP(last, httptest.NewRequest("GET", "/", nil))
	}
	if last.Code != http.StatusServiceUnavailable || last.Body.String() != "slow down" || last.Header().Get("Retry-After") == "" {
		t.Errorf("limited: %d %q, Retry-After %q", last.Code, last.Body.String(), last.Header().Get("Retry-After"))
	}
}
