package httplimit_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clientip"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/memstore"
)

// One limit per client address, with every header field.
func Example() {
	clock := floodgatetest.NewClock(floodgatetest.Start) // a real server leaves Clock nil
	store := memstore.New(memstore.Options{Clock: clock})
	defer store.Close()
	api, err := floodgate.New(store, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerMinute(2)}})
	if err != nil {
		panic(err)
	}
	mw, err := httplimit.New(httplimit.Config{Rules: []httplimit.Rule{{Limiter: api}}})
	if err != nil {
		panic(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello\n")
	}))

	for range 3 {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = "203.0.113.7:4711"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Println(rec.Code)
		for _, name := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit", "Retry-After"} {
			if v := rec.Header().Get(name); v != "" {
				fmt.Printf("  %s: %s\n", name, v)
			}
		}
		fmt.Print("  ", rec.Body.String())
	}
	// Output:
	// 200
	//   X-RateLimit-Limit: 2
	//   X-RateLimit-Remaining: 1
	//   X-RateLimit-Reset: 30
	//   RateLimit-Policy: "api";q=2;w=60
	//   RateLimit: "api";r=1;t=30
	//   hello
	// 200
	//   X-RateLimit-Limit: 2
	//   X-RateLimit-Remaining: 0
	//   X-RateLimit-Reset: 60
	//   RateLimit-Policy: "api";q=2;w=60
	//   RateLimit: "api";r=0;t=60
	//   hello
	// 429
	//   X-RateLimit-Limit: 2
	//   X-RateLimit-Remaining: 0
	//   X-RateLimit-Reset: 60
	//   RateLimit-Policy: "api";q=2;w=60
	//   RateLimit: "api";r=0;t=30
	//   Retry-After: 30
	//   {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"Too many requests; retry in 30 seconds.","retry-after":30,"violated-policies":["api"]}
}

type ctxUser struct{}

// A global limit, then one per user, then one per address: a request that
// a later link refuses is refunded by the earlier ones, and the headers
// describe the tightest limit.
func ExampleNew_layered() {
	clock := floodgatetest.NewClock(floodgatetest.Start)
	store := memstore.New(memstore.Options{Clock: clock})
	defer store.Close()
	policy := func(name string, l floodgate.Limit) floodgate.Limiter {
		lim, err := floodgate.New(store, floodgate.Policy{Name: name, Limits: []floodgate.Limit{l}})
		if err != nil {
			panic(err)
		}
		return lim
	}
	userID := httplimit.FromContext(ctxUser{})
	mw, err := httplimit.New(httplimit.Config{Rules: []httplimit.Rule{
		{Limiter: policy("global", floodgate.PerSecond(1000)), Key: httplimit.KeyConst("all")},
		{Limiter: policy("user", floodgate.PerMinute(60)), Key: httplimit.KeyByUser(userID, nil)},
		{Limiter: policy("ip", floodgate.PerMinute(2)), Key: httplimit.KeyByIP(nil)},
	}})
	if err != nil {
		panic(err)
	}
	h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))

	for range 3 {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = "198.51.100.20:5000"
		req = req.WithContext(context.WithValue(req.Context(), ctxUser{}, "alice"))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("RateLimit"))
	}
	// Output:
	// 200 "global";r=999;t=1, "user";r=59;t=1, "ip";r=1;t=30
	// 200 "global";r=998;t=1, "user";r=58;t=2, "ip";r=0;t=60
	// 429 "global";r=997;t=1, "user";r=57;t=3, "ip";r=0;t=30
}

// Against password guessing: at most 5 failed logins per client address
// and account in 15 minutes. Successful logins are not counted.
func ExampleRule_countFailed() {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	failures, err := floodgate.New(store, floodgate.Policy{
		Name:   "login-failures",
		Limits: []floodgate.Limit{{Rate: 5, Period: 15 * time.Minute}},
	})
	if err != nil {
		panic(err)
	}
	// Behind a load balancer at 10.0.0.0/8 that appends to X-Forwarded-For.
	ips, err := clientip.New(clientip.Config{TrustedProxies: []string{"10.0.0.0/8"}})
	if err != nil {
		panic(err)
	}
	mw, err := httplimit.New(httplimit.Config{Rules: []httplimit.Rule{{
		Limiter: failures,
		Key:     httplimit.JoinKeys(httplimit.KeyByIP(ips), httplimit.KeyByFormValue("username")),
		Count:   httplimit.CountFailed,
	}}})
	if err != nil {
		panic(err)
	}
	login := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.PostFormValue("password") != "correct horse" {
			http.Error(w, "wrong username or password", http.StatusUnauthorized)
			return
		}
		io.WriteString(w, "welcome\n")
	}))

	try := func(password string) int {
		form := url.Values{"username": {"alice"}, "password": {password}}
		req := httptest.NewRequest("POST", "/login", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Forwarded-For", "203.0.113.7")
		req.RemoteAddr = "10.0.0.1:31000"
		rec := httptest.NewRecorder()
		login.ServeHTTP(rec, req)
		return rec.Code
	}
	for range 10 {
		try("correct horse")
	}
	fmt.Println("after 10 good logins:", try("correct horse"))
	for range 5 {
		try("guess")
	}
	fmt.Println("after 5 bad ones:", try("correct horse"))
	// Output:
	// after 10 good logins: 200
	// after 5 bad ones: 429
}
