package httplimit_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
)

// login answers 200 to the password "right" and 401 to any other.
var login = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if r.PostFormValue("password") != "right" {
		http.Error(w, "wrong password", http.StatusUnauthorized)
		return
	}
	io.WriteString(w, "welcome "+r.PostFormValue("user"))
})

func postLogin(h http.Handler, remote, user, password string) *httptest.ResponseRecorder {
	form := url.Values{"user": {user}, "password": {password}}
	req := httptest.NewRequest("POST", "/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.RemoteAddr = remote
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// Failed logins are limited per client and account; successful ones are not
// charged at all.
func TestCountFailedProtectsLogin(t *testing.T) {
	e := newEnv(t)
	failures := e.limiter("login-failures", floodgate.PerMinute(3))
	h := mustNew(t, httplimit.Config{Rules: []httplimit.Rule{{
		Limiter: failures,
		Key:     httplimit.JoinKeys(httplimit.KeyByIP(nil), httplimit.KeyByFormValue("user")),
		Count:   httplimit.CountFailed,
	}}}).Handler(login)

	for i := range 20 {
		rec := postLogin(h, client, "alice", "right")
		if rec.Code != 200 || rec.Body.String() != "welcome alice" {
			t.Fatalf("successful login %d: %d %q", i+1, rec.Code, rec.Body)
		}
		// Charged while the handler ran, so the header shows one less.
		if got := rec.Header().Get("X-RateLimit-Remaining"); got != "2" {
			t.Fatalf("successful login %d: remaining %s, want 2", i+1, got)
		}
	}
	for i := range 3 {
		if rec := postLogin(h, client, "alice", "guess"); rec.Code != 401 {
			t.Fatalf("failed login %d: %d", i+1, rec.Code)
		}
	}
	// Locked: even the right password is refused until a failure expires.
	for _, pw := range []string{"guess", "right"} {
		rec := postLogin(h, client, "ALICE ", pw)
		if rec.Code != 429 {
			t.Fatalf("login with %q after 3 failures: %d, want 429", pw, rec.Code)
		}
		if got := rec.Header().Get("Retry-After"); got != "20" {
			t.Fatalf("Retry-After %s, want 20", got)
		}
	}
	// Another account from the same client, and the same account from
	// another client, are not affected.
	if rec := postLogin(h, client, "bob", "guess"); rec.Code != 401 {
		t.Fatalf("other account: %d", rec.Code)
	}
	if rec := postLogin(h, "198.51.100.2:1", "alice", "right"); rec.Code != 200 {
		t.Fatalf("other client: %d", rec.Code)
	}
	e.clock.Advance(20 * time.Second)
	if rec := postLogin(h, client, "alice", "right"); rec.Code != 200 {
		t.Fatalf("after Retry-After: %d", rec.Code)
	}
}

// Concurrent guesses are charged before their answers are known, so no more
// than the limit can be in flight.
func TestCountFailedConcurrent(t *testing.T) {
	e := newEnv(t)
	release := make(chan struct{})
	var entered sync.WaitGroup
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered.Done()
		<-release
		http.Error(w, "wrong", http.StatusUnauthorized)
	})
	h := mustNew(t, httplimit.Config{Rules: []httplimit.Rule{{
		Limiter: e.limiter("login", floodgate.PerMinute(3)),
		Count:   httplimit.CountFailed,
	}}}).Handler(slow)
	entered.Add(3)
	codes := make(chan int, 3)
	for range 3 {
		go func() { codes <- get(h, "/", client).Code }()
	}
	entered.Wait()
	if rec := get(h, "/", client); rec.Code != 429 {
		t.Fatalf("4th concurrent guess: %d, want 429", rec.Code)
	}
	close(release)
	for range 3 {
		if c := <-codes; c != 401 {
			t.Fatalf("guess answered %d", c)
		}
	}
}

func TestCountSuccessful(t *testing.T) {
	e := newEnv(t)
	h := mustNew(t, httplimit.Config{Rules: []httplimit.Rule{{
		Limiter: e.limiter("quota", floodgate.PerMinute(2)),
		Count:   httplimit.CountSuccessful,
	}}}).Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/bad":
			w.WriteHeader(http.StatusBadRequest)
		case "/empty":
			// no write at all: net/http answers 200
		default:
			io.WriteString(w, "ok")
		}
	}))
	for range 10 {
		if rec := get(h, "/bad", client); rec.Code != 400 {
			t.Fatalf("bad request: %d", rec.Code)
		}
	}
	if rec := get(h, "/empty", client); rec.Code != 200 {
		t.Fatalf("first success: %d", rec.Code)
	}
	if rec := get(h, "/", client); rec.Code != 200 {
		t.Fatalf("second success: %d", rec.Code)
	}
	if rec := get(h, "/bad", client); rec.Code != 429 {
		t.Fatalf("after the quota: %d, want 429", rec.Code)
	}
}

// A count rule and a plain rule on one request: the plain rule keeps its
// charge, the count rule is refunded.
func TestCountMixedRules(t *testing.T) {
	e := newEnv(t)
	perIP := e.limiter("ip", floodgate.PerMinute(100))
	failures := e.limiter("failures", floodgate.PerMinute(5))
	h := mustNew(t, httplimit.Config{Rules: []httplimit.Rule{
		{Limiter: perIP},
		{Limiter: failures, Key: httplimit.JoinKeys(httplimit.KeyByIP(nil), httplimit.KeyByFormValue("user")), Count: httplimit.CountFailed},
	}}).Handler(login)
	for range 4 {
		postLogin(h, client, "alice", "right")
	}
	ctx := t.Context()
	if res, _ := perIP.AllowN(ctx, "203.0.113.7", 0); res.Remaining != 96 {
		t.Errorf("per-IP remaining %d, want 96", res.Remaining)
	}
	if res, _ := failures.AllowN(ctx, "203.0.113.7|alice", 0); res.Remaining != 5 {
		t.Errorf("failures remaining %d, want 5", res.Remaining)
	}
}

// A handler that panics leaves nothing locked or charged wrongly: the next
// request is served, and a count rule treats the panic as a failure.
func TestPanicInHandler(t *testing.T) {
	for _, count := range []httplimit.Count{httplimit.CountAll, httplimit.CountFailed, httplimit.CountSuccessful} {
		t.Run(map[httplimit.Count]string{0: "all", 1: "failed", 2: "successful"}[count], func(t *testing.T) {
			e := newEnv(t)
			lim := e.limiter("api", floodgate.PerMinute(5))
			h := mustNew(t, httplimit.Config{Rules: []httplimit.Rule{{Limiter: lim, Count: count}}}).Handler(
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/panic" {
						panic("boom")
					}
					io.WriteString(w, "ok")
				}))
			func() {
				defer func() {
					if v := recover(); v != "boom" {
						t.Fatalf("recovered %v, want the handler's panic", v)
					}
				}()
				get(h, "/panic", client)
			}()
			rec := get(h, "/", client)
			if rec.Code != 200 || rec.Body.String() != "ok" {
				t.Fatalf("request after the panic: %d %q", rec.Code, rec.Body)
			}
			// The panic is charged unless only successes count.
			want := map[httplimit.Count]string{httplimit.CountAll: "3", httplimit.CountFailed: "3", httplimit.CountSuccessful: "4"}[count]
			if got := rec.Header().Get("X-RateLimit-Remaining"); got != want {
				t.Errorf("remaining %s, want %s", got, want)
			}
		})
	}
}

// The statuswriter.Writer of count rules keeps Flusher, Hijacker, ReaderFrom and
// ResponseController working, on a real server.
func TestCountWriterInterfaces(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	var problems []string
	fail := func(s string) { mu.Lock(); problems = append(problems, s); mu.Unlock() }
	h := mustNew(t, httplimit.Config{Rules: []httplimit.Rule{{
		Limiter: e.limiter("api", floodgate.PerMinute(100)),
		Count:   httplimit.CountFailed,
	}}}).Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/flush":
			if _, ok := w.(http.Flusher); !ok {
				fail("not a Flusher")
			}
			if err := http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
				fail("SetWriteDeadline: " + err.Error())
			}
			io.WriteString(w, "part1,")
			w.(http.Flusher).Flush()
			if err := http.NewResponseController(w).Flush(); err != nil {
				fail("ResponseController.Flush: " + err.Error())
			}
			io.WriteString(w, "part2")
		case "/copy":
			if _, ok := w.(io.ReaderFrom); !ok {
				fail("not a ReaderFrom")
			}
			io.Copy(w, strings.NewReader("copied"))
		case "/hijack":
			conn, brw, err := w.(http.Hijacker).Hijack()
			if err != nil {
				fail("Hijack: " + err.Error())
				return
			}
			defer conn.Close()
			brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nhijacked")
			brw.Flush()
		}
	}))
	base := serve(t, h)
	fetch := func(path, want string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != want {
			t.Errorf("%s: body %q, want %q", path, body, want)
		}
	}
	fetch("/flush", "part1,part2")
	fetch("/copy", "copied")
	// The refunds happen before the server ends these responses: both were
	// successes, so both are refunded.
	if rec := get(h, "/copy", "127.0.0.1:1"); rec.Header().Get("X-RateLimit-Remaining") != "99" {
		t.Errorf("remaining %s after refunded requests, want 99", rec.Header().Get("X-RateLimit-Remaining"))
	}
	fetch("/hijack", "hijacked")
	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Error(p)
	}
}

// TestResponseCost: the token budget of an LLM API, whose cost is known
// only from the response. A request passes while budget remains, and is
// charged what its response reports.
func TestResponseCost(t *testing.T) {
	e := newEnv(t)
	budget := e.limiter("tokens", floodgate.Limit{Rate: 100, Period: time.Hour})
	tokens := func(status int, h http.Header) int64 {
		n, _ := strconv.ParseInt(h.Get("X-Tokens-Used"), 10, 64)
		return n
	}
	used := "30"
	llm := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Tokens-Used", used)
		io.WriteString(w, "completion")
	})
	h := mustNew(t, httplimit.Config{Rules: []httplimit.Rule{{Limiter: budget, ResponseCost: tokens}}}).Handler(llm)
	remaining := func() int64 {
		res, err := budget.AllowN(t.Context(), "203.0.113.7", 0)
		if err != nil {
			t.Fatal(err)
		}
		return res.Remaining
	}
	for i, want := range []int64{70, 40, 10} {
		if rec := get(h, "/", client); rec.Code != 200 {
			t.Fatalf("request %d: %d", i+1, rec.Code)
		}
		if got := remaining(); got != want {
			t.Fatalf("after request %d: %d tokens left, want %d", i+1, got, want)
		}
	}
	// 10 left: the request passes, costs 30, and empties the budget.
	if rec := get(h, "/", client); rec.Code != 200 || remaining() != 0 {
		t.Fatalf("request within the last 10 tokens: %d, %d left; want 200 and 0 left", rec.Code, remaining())
	}
	if rec := get(h, "/", client); rec.Code != 429 {
		t.Fatalf("request with no budget left: %d, want 429", rec.Code)
	}
	// A response that reports less than the up-front charge is refunded.
	budget.Reset(t.Context(), "203.0.113.7")
	used = "0"
	get(h, "/", client)
	if got := remaining(); got != 100 {
		t.Errorf("a response that cost nothing left %d of 100", got)
	}
}

// TestResponseCostBeyondCapacity: a response that reports more than a
// limit holds puts the key in debt for all of it, on every limit of the
// policy, instead of charging nothing; a negative (unknown) cost leaves
// the up-front charge standing.
func TestResponseCostBeyondCapacity(t *testing.T) {
	used := "5000"
	llm := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Tokens-Used", used)
		io.WriteString(w, "completion")
	})
	tokens := func(status int, h http.Header) int64 {
		n, err := strconv.ParseInt(h.Get("X-Tokens-Used"), 10, 64)
		if err != nil {
			return -1
		}
		return n
	}
	const key = "203.0.113.7"
	next := func(t *testing.T, lim floodgate.Limiter) floodgate.Result {
		t.Helper()
		res, err := lim.AllowN(t.Context(), key, 1)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	t.Run("one limit", func(t *testing.T) {
		e := newEnv(t)
		budget := e.limiter("hour", floodgate.PerHour(1000))
		h := mustNew(t, httplimit.Config{Rules: []httplimit.Rule{{Limiter: budget, ResponseCost: tokens}}}).Handler(llm)
		if rec := get(h, "/", client); rec.Code != 200 {
			t.Fatalf("%d", rec.Code)
		}
		// 5000 units at 3.6s each: the bucket is full again in 5h, and the
		// next unit passes once 4h0m3.6s have passed.
		if res := next(t, budget); res.Allowed || res.RetryAfter != 4*time.Hour+3600*time.Millisecond || res.ResetAfter != 5*time.Hour {
			t.Fatalf("after a response of 5000: %+v; want denied for 4h0m3.6s, full in 5h", res)
		}
	})
	t.Run("several limits", func(t *testing.T) {
		e := newEnv(t)
		budget := e.limiter("pair", floodgate.PerHour(1000), floodgate.PerMinute(100))
		hour := e.limiter("pair", floodgate.PerHour(1000)) // the same state, the hour alone
		used = "150"
		h := mustNew(t, httplimit.Config{Rules: []httplimit.Rule{{Limiter: budget, ResponseCost: tokens}}}).Handler(llm)
		get(h, "/", client)
		if res, _ := hour.AllowN(t.Context(), key, 0); res.Remaining != 850 {
			t.Fatalf("the hour holds %d, want 850", res.Remaining)
		}
		if res := next(t, budget); res.Allowed || res.Index != 1 || res.RetryAfter != 30600*time.Millisecond {
			t.Fatalf("%+v; want the minute to refuse for 30.6s (50 units of debt, then one)", res)
		}
	})
	t.Run("unknown cost", func(t *testing.T) {
		e := newEnv(t)
		budget := e.limiter("unknown", floodgate.PerHour(1000))
		used = "garbage"
		h := mustNew(t, httplimit.Config{Rules: []httplimit.Rule{{Limiter: budget, ResponseCost: tokens}}}).Handler(llm)
		get(h, "/", client)
		if res, _ := budget.AllowN(t.Context(), key, 0); res.Remaining != 999 {
			t.Fatalf("%d left; want the up-front unit to stand", res.Remaining)
		}
	})
}
