// Package httplimittest is the behaviour every HTTP front end of floodgate
// shares, checked against a real server on loopback: the rate-limit
// headers, the 429 body, client addresses behind untrusted and trusted
// peers, failed-login counting, and the Redis engine shared by two servers.
// The framework adapters' tests start their framework's server and hand it
// to Run, so every adapter is held to one standard; an adapter for another
// framework can hold itself to it the same way.
//
// The Redis checks start a real redis-server through package testkit: the
// Debian package redis-server must be installed.
package httplimittest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clientip"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/httpmatch"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/testkit"
	"github.com/redis/go-redis/v9"
)

// Setup is what the server under test limits. It serves two routes, each
// behind the adapter:
//
//   - GET /hello answers 200 "hello", limited by API, keyed by the client
//     address as ClientIP resolves it;
//   - POST /login answers 204 when the form field password is "right" and
//     401 otherwise, limited by Login, keyed by client address, counting
//     failed responses only.
type Setup struct {
	API      floodgate.Limiter
	Login    floodgate.Limiter
	ClientIP clientip.Config
}

// A Server starts the framework's server for s on a loopback port, stops
// it when the test ends, and returns its base URL ("http://127.0.0.1:port").
type Server func(t *testing.T, s Setup) string

// Run runs the shared checks against servers that srv starts.
func Run(t *testing.T, srv Server) {
	t.Run("headers and 429 body", func(t *testing.T) { testHeaders(t, srv) })
	t.Run("spoofed X-Forwarded-For from an untrusted peer", func(t *testing.T) { testSpoofed(t, srv) })
	t.Run("X-Forwarded-For from a trusted proxy", func(t *testing.T) { testTrusted(t, srv) })
	t.Run("failed logins counted, successful ones refunded", func(t *testing.T) { testLogin(t, srv) })
	t.Run("redis engine", func(t *testing.T) { testRedis(t, srv) })
}

// Limiters returns an api and a login limiter with the given limits on a
// memory store that lives as long as the test.
func Limiters(t testing.TB, api, login floodgate.Limit) (floodgate.Limiter, floodgate.Limiter) {
	t.Helper()
	s := memstore.New(memstore.Options{})
	t.Cleanup(func() { s.Close() })
	return limiter(t, s, "api", api), limiter(t, s, "login", login)
}

func limiter(t testing.TB, s floodgate.Store, name string, l floodgate.Limit) floodgate.Limiter {
	t.Helper()
	lim, err := floodgate.New(s, floodgate.Policy{Name: name, Limits: []floodgate.Limit{l}})
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// Middleware returns the httplimit.Middleware of s for adapters over
// net/http requests (chi, gin, echo): the API rule on /hello and the login
// rule on /login, both keyed by client address through s.ClientIP.
func Middleware(t testing.TB, s Setup) *httplimit.Middleware {
	t.Helper()
	res, err := clientip.New(s.ClientIP)
	if err != nil {
		t.Fatal(err)
	}
	key := httplimit.KeyByIP(res)
	m, err := httplimit.New(httplimit.Config{Rules: []httplimit.Rule{
		{Limiter: s.API, Key: key, Match: httpmatch.PathPrefix("/hello")},
		{Limiter: s.Login, Key: key, Match: httpmatch.PathPrefix("/login"), Count: httplimit.CountFailed},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// LoginStatus is the status POST /login answers for a submitted password.
func LoginStatus(password string) int {
	if password == "right" {
		return http.StatusNoContent
	}
	return http.StatusUnauthorized
}

// Serve serves h on a loopback port until the test ends and returns its
// base URL.
func Serve(t testing.TB, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return "http://" + ln.Addr().String()
}

// OneThenDenied checks a route limited to one request per client with the
// framework's own test tooling: serve handles one request to it, records
// the answer and reports whether the handler ran. The first request is
// served, the second answered 429 without reaching the handler, both with
// the rate-limit fields.
func OneThenDenied(t testing.TB, serve func(rec *httptest.ResponseRecorder) (handlerRan bool)) {
	t.Helper()
	for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
		rec := httptest.NewRecorder()
		ran := serve(rec)
		if rec.Code != want || rec.Header().Get("X-Ratelimit-Limit") != "1" || ran != (i == 0) {
			t.Errorf("request %d: %d with X-RateLimit-Limit %q, handler ran: %v; want %d with 1", i+1, rec.Code, rec.Header().Get("X-Ratelimit-Limit"), ran, want)
		}
	}
}

// An Attempt is a password posted to /login and the status it should get.
type Attempt struct {
	Password string
	Want     int
}

// Try is the Attempt of password that should get want.
func Try(password string, want int) Attempt { return Attempt{Password: password, Want: want} }

// Attempts posts each attempt's password to h's /login in turn, with the
// framework's handler and a recorder, and checks the statuses.
func Attempts(t testing.TB, h http.Handler, attempts ...Attempt) {
	t.Helper()
	for i, a := range attempts {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("POST", "/login", strings.NewReader(url.Values{"password": {a.Password}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		h.ServeHTTP(rec, req)
		if rec.Code != a.Want {
			t.Errorf("attempt %d (%s): %d, want %d", i+1, a.Password, rec.Code, a.Want)
		}
	}
}

// Response is what a check looks at of an answer.
type Response struct {
	Status int
	Header http.Header
	Body   string
}

// Do sends a request to base+path and reads the whole answer. header holds
// name, value pairs; a form, when not nil, is sent as a POST body.
func Do(t testing.TB, method, target string, form url.Values, header ...string) Response {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: string(b)}
}

// Expect fails the test unless r has the status and, for every name, value
// pair of fields, the field with exactly that value.
func Expect(t testing.TB, what string, r Response, status int, fields ...string) {
	t.Helper()
	if r.Status != status {
		t.Errorf("%s: status %d, want %d (body %q)", what, r.Status, status, r.Body)
	}
	for i := 0; i+1 < len(fields); i += 2 {
		if got := strings.Join(r.Header.Values(fields[i]), ", "); got != fields[i+1] {
			t.Errorf("%s: %s = %q, want %q", what, fields[i], got, fields[i+1])
		}
	}
}

// ExpectProblem fails the test unless r is the default 429 answer: the
// problem detail naming policy, with a Retry-After of 1 to maxRetry
// seconds that the body repeats.
func ExpectProblem(t testing.TB, what string, r Response, policy string, maxRetry int64) {
	t.Helper()
	Expect(t, what, r, http.StatusTooManyRequests, "Content-Type", "application/problem+json", "X-Ratelimit-Remaining", "0")
	retry, err := strconv.ParseInt(r.Header.Get("Retry-After"), 10, 64)
	if err != nil || retry < 1 || retry > maxRetry {
		t.Errorf("%s: Retry-After = %q, want 1 to %d seconds", what, r.Header.Get("Retry-After"), maxRetry)
	}
	var p struct {
		Type       string   `json:"type"`
		Status     int      `json:"status"`
		RetryAfter int64    `json:"retry-after"`
		Violated   []string `json:"violated-policies"`
	}
	if err := json.Unmarshal([]byte(r.Body), &p); err != nil {
		t.Fatalf("%s: body %q is not a problem detail: %v", what, r.Body, err)
	}
	if p.Status != 429 || p.RetryAfter != retry || len(p.Violated) != 1 || p.Violated[0] != policy ||
		!strings.HasSuffix(p.Type, "#quota-exceeded") {
		t.Errorf("%s: problem %+v, want status 429, retry-after %d, violated [%s]", what, p, retry, policy)
	}
}

func testHeaders(t *testing.T, srv Server) {
	api, login := Limiters(t, floodgate.PerMinute(3), floodgate.PerHour(5))
	base := srv(t, Setup{API: api, Login: login})
	for i := range 3 {
		r := Do(t, "GET", base+"/hello", nil)
		left := strconv.Itoa(2 - i)
		Expect(t, fmt.Sprintf("request %d", i+1), r, http.StatusOK,
			"X-Ratelimit-Limit", "3", "X-Ratelimit-Remaining", left,
			"Ratelimit-Policy", `"api";q=3;w=60`, "Retry-After", "")
		if r.Body != "hello" {
			t.Errorf("request %d: body %q, want hello", i+1, r.Body)
		}
		if rl := r.Header.Get("Ratelimit"); !strings.HasPrefix(rl, `"api";r=`+left+";t=") {
			t.Errorf("request %d: RateLimit = %q", i+1, rl)
		}
	}
	ExpectProblem(t, "request 4", Do(t, "GET", base+"/hello", nil), "api", 20)
}

func testSpoofed(t *testing.T, srv Server) {
	api, login := Limiters(t, floodgate.PerMinute(2), floodgate.PerHour(5))
	// The test client connects from 127.0.0.1, which is not trusted: every
	// request is keyed by 127.0.0.1 whatever it claims.
	base := srv(t, Setup{API: api, Login: login, ClientIP: clientip.Config{TrustedProxies: []string{"10.0.0.0/8"}}})
	for i := range 2 {
		Expect(t, "request", Do(t, "GET", base+"/hello", nil, "X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i+1)), http.StatusOK)
	}
	ExpectProblem(t, "request with a fresh spoofed address", Do(t, "GET", base+"/hello", nil, "X-Forwarded-For", "198.51.100.99"), "api", 30)
}

func testTrusted(t *testing.T, srv Server) {
	api, login := Limiters(t, floodgate.PerMinute(1), floodgate.PerHour(5))
	base := srv(t, Setup{API: api, Login: login, ClientIP: clientip.Config{TrustedProxies: []string{"127.0.0.1"}}})
	Expect(t, "client 1", Do(t, "GET", base+"/hello", nil, "X-Forwarded-For", "203.0.113.9, 198.51.100.1"), http.StatusOK)
	ExpectProblem(t, "client 1 again", Do(t, "GET", base+"/hello", nil, "X-Forwarded-For", "198.51.100.1"), "api", 60)
	Expect(t, "client 2", Do(t, "GET", base+"/hello", nil, "X-Forwarded-For", "198.51.100.2"), http.StatusOK)
}

func testLogin(t *testing.T, srv Server) {
	api, login := Limiters(t, floodgate.PerMinute(100), floodgate.PerHour(2))
	base := srv(t, Setup{API: api, Login: login})
	right, wrong := url.Values{"password": {"right"}}, url.Values{"password": {"wrong"}}
	for i := range 4 {
		Expect(t, fmt.Sprintf("good login %d", i+1), Do(t, "POST", base+"/login", right), http.StatusNoContent)
	}
	for i := range 2 {
		Expect(t, fmt.Sprintf("bad login %d", i+1), Do(t, "POST", base+"/login", wrong), http.StatusUnauthorized,
			"X-Ratelimit-Limit", "2")
	}
	ExpectProblem(t, "third bad login", Do(t, "POST", base+"/login", wrong), "login", 1800)
	ExpectProblem(t, "good login after the limit", Do(t, "POST", base+"/login", right), "login", 1800)
}

func testRedis(t *testing.T, srv Server) {
	client := Redis(t)
	store, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	api, login := limiter(t, store, "api", floodgate.PerMinute(2)), limiter(t, store, "login", floodgate.PerHour(2))
	base := srv(t, Setup{API: api, Login: login})
	for i := range 2 {
		Expect(t, fmt.Sprintf("request %d", i+1), Do(t, "GET", base+"/hello", nil), http.StatusOK,
			"X-Ratelimit-Remaining", strconv.Itoa(1-i))
	}
	ExpectProblem(t, "request 3", Do(t, "GET", base+"/hello", nil), "api", 30)
	keys, err := client.Keys(context.Background(), redisstore.DefaultPrefix+"{api::127.0.0.1}*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 {
		t.Errorf("keys in Redis for the client: %q, want one", keys)
	}
	// A second server, with a store and limiter of its own on the same
	// Redis, shares the limit.
	store2, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store2.Close() })
	other := srv(t, Setup{API: limiter(t, store2, "api", floodgate.PerMinute(2)), Login: login})
	ExpectProblem(t, "request 4, to another server", Do(t, "GET", other+"/hello", nil), "api", 30)
}

// Redis starts a redis-server for the test (testkit.Redis) and returns a
// client for it, closed when the test ends. The client's round trips end
// with their context and are never retried, as floodgate's Redis engine
// expects.
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	srv := testkit.Redis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}
