package checkapi

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/testkit"
)

// checkClient posts bodies to a check API.
type checkClient struct {
	t   *testing.T
	url string
	c   *http.Client
}

func (c checkClient) post(body string) (*http.Response, map[string]any) {
	c.t.Helper()
	resp, b := testkit.Do(c.t, c.c, testkit.NewRequest(c.t, "POST", c.url, strings.NewReader(body)))
	var m map[string]any
	if err := json.Unmarshal([]byte(b), &m); err != nil {
		c.t.Fatalf("answer is not JSON: %q (%v)", b, err)
	}
	return resp, m
}

func startCheck(t *testing.T, policies map[string]floodgate.Limiter) (*API, checkClient) {
	t.Helper()
	return startCheckLogged(t, policies, nil)
}

// startCheckLogged serves a check API on a free loopback port until t ends.
func startCheckLogged(t *testing.T, policies map[string]floodgate.Limiter, log *slog.Logger) (*API, checkClient) {
	t.Helper()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := New(Config{Policies: policies, Logger: log})
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	return c, checkClient{t: t, url: srv.URL + Path, c: srv.Client()}
}

func TestCheckSingle(t *testing.T) {
	api := floodgatetest.MemLimiter(t, "api", floodgate.PerMinute(2))
	_, c := startCheck(t, map[string]floodgate.Limiter{"api": api})
	for i := range 2 {
		resp, m := c.post(`{"policy":"api","key":"user:42"}`)
		if resp.StatusCode != 200 || m["allowed"] != true || m["remaining"] != float64(1-i) {
			t.Fatalf("check %d: %d %v", i+1, resp.StatusCode, m)
		}
		lim := m["limit"].(map[string]any)
		if lim["rate"] != 2.0 || lim["period"] != "min" || lim["period_seconds"] != 60.0 || lim["burst"] != 2.0 || lim["algorithm"] != "gcra" {
			t.Errorf("limit %v", lim)
		}
		if m["source"] != "memory" || m["policy"] != "api" {
			t.Errorf("source/policy %v", m)
		}
		if got, want := resp.Header.Get("X-Ratelimit-Remaining"), []string{"1", "0"}[i]; got != want {
			t.Errorf("X-RateLimit-Remaining %q, want %q", got, want)
		}
	}
	resp, m := c.post(`{"policy":"api","key":"user:42"}`)
	if resp.StatusCode != 429 || m["allowed"] != false {
		t.Fatalf("3rd check: %d %v", resp.StatusCode, m)
	}
	ra, _ := m["retry_after"].(float64)
	if ra <= 0 || ra > 30 {
		t.Errorf("retry_after %v, want about 30 s", m["retry_after"])
	}
	if resp.Header.Get("Retry-After") == "" || resp.Header.Get("Ratelimit-Policy") != `"api";q=2;w=60` || resp.Header.Get("X-Ratelimit-Remaining") != "0" {
		t.Errorf("headers %v", resp.Header)
	}
	// Another key has its own quota; cost 0 peeks.
	if resp, m := c.post(`{"policy":"api","key":"user:7","cost":0}`); resp.StatusCode != 200 || m["remaining"] != 2.0 {
		t.Errorf("peek: %d %v", resp.StatusCode, m)
	}
	// A peek at the exhausted key says the next request would be refused,
	// and when it would pass, charging nothing.
	for range 2 {
		resp, m := c.post(`{"policy":"api","key":"user:42","cost":0}`)
		if ra, _ := m["retry_after"].(float64); resp.StatusCode != 429 || m["allowed"] != false || m["remaining"] != 0.0 || ra <= 0 || ra > 30 {
			t.Fatalf("peek at an exhausted key: %d %v; want 429, not allowed, with retry_after", resp.StatusCode, m)
		}
	}
	if _, m := c.post(`{"checks":[{"policy":"api","key":"user:7","cost":0}]}`); m["checks"].([]any)[0].(map[string]any)["charged"] != false {
		t.Errorf("a peek in a batch says it charged: %v", m)
	}
	// A cost above the capacity can never pass.
	if resp, m := c.post(`{"policy":"api","key":"user:7","cost":3}`); resp.StatusCode != 429 || m["retry_after"] != nil {
		t.Errorf("impossible cost: %d %v", resp.StatusCode, m)
	}
}

func TestCheckBatchAllOrNothing(t *testing.T) {
	global := floodgatetest.MemLimiter(t, "global", floodgate.PerMinute(100))
	user := floodgatetest.MemLimiter(t, "user", floodgate.PerMinute(1))
	_, c := startCheck(t, map[string]floodgate.Limiter{"global": global, "user": user})
	batch := `{"checks":[{"policy":"global","key":"all"},{"policy":"user","key":"u1"}]}`
	resp, m := c.post(batch)
	if resp.StatusCode != 200 || m["allowed"] != true || m["index"] != 1.0 || m["policy"] != "user" {
		t.Fatalf("first batch: %d %v", resp.StatusCode, m)
	}
	if got := resp.Header.Values("Ratelimit-Policy"); len(got) != 2 {
		t.Errorf("RateLimit-Policy %q, want one line per policy", got)
	}
	resp, m = c.post(batch)
	if resp.StatusCode != 429 || m["index"] != 1.0 {
		t.Fatalf("second batch: %d %v", resp.StatusCode, m)
	}
	checks := m["checks"].([]any)
	if len(checks) != 2 || checks[1].(map[string]any)["allowed"] != false {
		t.Errorf("checks %v", checks)
	}
	// The global check of the denied batch was refunded: 99 left after one
	// charged batch, not 98.
	if _, m := c.post(`{"policy":"global","key":"all","cost":0}`); m["remaining"] != 99.0 {
		t.Errorf("global remaining %v, want 99: a denied batch charged an earlier check", m["remaining"])
	}
}

func TestCheckErrors(t *testing.T) {
	api := floodgatetest.MemLimiter(t, "api", floodgate.PerMinute(2))
	_, c := startCheck(t, map[string]floodgate.Limiter{"api": api})
	cases := []struct {
		name, body string
		status     int
		want       string
	}{
		{"malformed", `{"policy":`, 400, "malformed JSON"},
		{"unknown field", `{"policy":"api","key":"k","costs":1}`, 400, "unknown field"},
		{"unknown policy", `{"policy":"nope","key":"k"}`, 400, `unknown policy "nope"`},
		{"negative cost", `{"policy":"api","key":"k","cost":-1}`, 400, "negative"},
		{"two values", `{"policy":"api","key":"k"} {}`, 400, "more than one"},
		{"both forms", `{"policy":"api","checks":[{"policy":"api"}]}`, 400, "not both"},
		{"empty batch", `{"checks":[]}`, 400, "empty"},
		{"no key", `{"policy":"api"}`, 400, "give the key"},
		{"empty key", `{"policy":"api","key":""}`, 400, "give the key"},
		{"too many", `{"checks":[` + strings.Repeat(`{"policy":"api","key":"k"},`, MaxChecks) + `{"policy":"api","key":"k"}]}`, 400, "more than"},
		{"oversized", `{"policy":"api","key":"` + strings.Repeat("k", DefaultMaxBody) + `"}`, 413, "larger than"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c.t = t
			resp, m := c.post(tc.body)
			if resp.StatusCode != tc.status || !strings.Contains(m["error"].(string), tc.want) {
				t.Errorf("%d %v, want %d with %q", resp.StatusCode, m, tc.status, tc.want)
			}
		})
	}
	c.t = t
	resp, _ := testkit.Do(t, c.c, testkit.NewRequest(t, "GET", c.url, nil))
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d", resp.StatusCode)
	}
	// Nothing was charged by the refused requests.
	if _, m := c.post(`{"policy":"api","key":"k","cost":0}`); m["remaining"] != 2.0 {
		t.Errorf("remaining %v after refused requests, want 2", m["remaining"])
	}
}

func TestCheckSetPolicies(t *testing.T) {
	a := floodgatetest.MemLimiter(t, "a", floodgate.PerMinute(1))
	s, c := startCheck(t, map[string]floodgate.Limiter{"a": a})
	if resp, _ := c.post(`{"policy":"b","key":"k"}`); resp.StatusCode != 400 {
		t.Fatalf("unknown policy b: %d", resp.StatusCode)
	}
	s.SetPolicies(map[string]floodgate.Limiter{"b": floodgatetest.MemLimiter(t, "b", floodgate.PerMinute(1))})
	if resp, _ := c.post(`{"policy":"b","key":"k"}`); resp.StatusCode != 200 {
		t.Errorf("policy b after SetPolicies: %d", resp.StatusCode)
	}
	if resp, _ := c.post(`{"policy":"a","key":"k"}`); resp.StatusCode != 400 {
		t.Errorf("policy a after SetPolicies: %d", resp.StatusCode)
	}
}

func TestAppendSeconds(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0", -time.Second: "0", time.Second: "1", 1500 * time.Millisecond: "1.5",
		time.Nanosecond: "0.001", 60*time.Second + 10*time.Millisecond: "60.01", 123456 * time.Microsecond: "0.124",
	} {
		if got := string(appendSeconds(nil, d)); got != want {
			t.Errorf("appendSeconds(%v) = %s, want %s", d, got, want)
		}
	}
}

// TestCheckToken: with a token configured, a request without it (or with
// another) is refused before any decision, so nobody else can spend a key's
// budget through the check API.
func TestCheckToken(t *testing.T) {
	api := floodgatetest.MemLimiter(t, "api", floodgate.PerMinute(1))
	srv := httptest.NewServer(New(Config{Policies: map[string]floodgate.Limiter{"api": api}, Token: "s3cret"}))
	t.Cleanup(srv.Close)
	url := srv.URL + Path
	post := func(auth string) int {
		req, _ := http.NewRequest("POST", url, strings.NewReader(`{"policy":"api","key":"k"}`))
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, auth := range []string{"", "Bearer wrong", "s3cret"} {
		if code := post(auth); code != http.StatusUnauthorized {
			t.Fatalf("Authorization %q: %d, want 401", auth, code)
		}
	}
	if code := post("Bearer s3cret"); code != http.StatusOK {
		t.Fatalf("with the token: %d, want 200", code)
	}
	// The refused requests spent nothing: the one unit went to the last.
	if code := post("Bearer s3cret"); code != http.StatusTooManyRequests {
		t.Fatalf("second request with the token: %d, want 429", code)
	}
}

// Denials are logged with the key redacted: every one at debug level.
func TestDenialsLoggedRedacted(t *testing.T) {
	var buf testkit.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	api := floodgatetest.MemLimiter(t, "api", floodgate.PerMinute(1))
	_, c := startCheckLogged(t, map[string]floodgate.Limiter{"api": api}, log)
	for range 4 {
		c.post(`{"policy":"api","key":"secret-api-key-123"}`)
	}
	out := buf.String()
	if strings.Contains(out, "secret-api-key-123") {
		t.Errorf("a key was logged in clear:\n%s", out)
	}
	if n := strings.Count(out, "request denied"); n != 3 {
		t.Errorf("%d denial lines, want 3:\n%s", n, out)
	}
	if !strings.Contains(out, floodgate.RedactKey("secret-api-key-123")) {
		t.Errorf("the redacted key is missing:\n%s", out)
	}
}

// TestCheckRefusesOtherSites: what a browser sends on a web page's behalf
// without asking (a text/plain or form POST, a cross-site Origin, a
// rebound Host) decides nothing and charges nothing.
func TestCheckRefusesOtherSites(t *testing.T) {
	api := floodgatetest.MemLimiter(t, "api", floodgate.PerMinute(1))
	c := New(Config{Policies: map[string]floodgate.Limiter{"api": api}, AllowedHosts: []string{"check.internal"}, Logger: slog.New(slog.DiscardHandler)})
	body := `{"policy":"api","key":"victim","cost":1}`
	for _, tc := range []struct {
		ctype, host, origin string
		want                int
	}{
		{"text/plain", "127.0.0.1", "", 415},
		{"application/x-www-form-urlencoded", "127.0.0.1", "", 415},
		{"", "127.0.0.1", "", 415},
		{"application/json", "attacker.example", "", 403},
		{"application/json", "127.0.0.1", "http://attacker.example", 403},
	} {
		req := httptest.NewRequest("POST", "http://127.0.0.1"+Path, strings.NewReader(body))
		req.Host = tc.host
		if tc.ctype != "" {
			req.Header.Set("Content-Type", tc.ctype)
		}
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("%q Host %q Origin %q: %d, want %d", tc.ctype, tc.host, tc.origin, rec.Code, tc.want)
		}
	}
	if res, _ := api.AllowN(context.Background(), "victim", 0); res.Remaining != 1 {
		t.Fatalf("refused requests charged the victim: %d left", res.Remaining)
	}
	req := httptest.NewRequest("POST", "http://check.internal"+Path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Errorf("an allowed host with JSON: %d %s", rec.Code, rec.Body)
	}
}

// TestCheckBatchReportsWhatTheEngineHolds: in a denied batch every entry
// says what the engine holds afterwards: the checks before the denying one
// with the units they gave back, those after it undecided with their
// state, and none charged.
func TestCheckBatchReportsWhatTheEngineHolds(t *testing.T) {
	a := floodgatetest.MemLimiter(t, "a", floodgate.PerMinute(5))
	b := floodgatetest.MemLimiter(t, "b", floodgate.PerMinute(1))
	cc := floodgatetest.MemLimiter(t, "c", floodgate.PerMinute(4))
	_, c := startCheck(t, map[string]floodgate.Limiter{"a": a, "b": b, "c": cc})
	c.post(`{"policy":"b","key":"k"}`) // b is spent
	c.post(`{"policy":"c","key":"k","cost":2}`)
	resp, m := c.post(`{"checks":[{"policy":"a","key":"k","cost":2},{"policy":"b","key":"k"},{"policy":"c","key":"k","cost":3}]}`)
	if resp.StatusCode != 429 || m["index"] != 1.0 {
		t.Fatalf("batch: %d %v", resp.StatusCode, m)
	}
	checks := m["checks"].([]any)
	e := func(i int) map[string]any { return checks[i].(map[string]any) }
	if e(0)["allowed"] != true || e(0)["remaining"] != 5.0 || e(0)["charged"] != false {
		t.Errorf("the refunded check: %v, want allowed with all 5 back, not charged", e(0))
	}
	if e(1)["allowed"] != false || e(1)["remaining"] != 0.0 || e(1)["charged"] != false {
		t.Errorf("the denying check: %v", e(1))
	}
	if e(2)["decided"] != false || e(2)["remaining"] != 2.0 || e(2)["allowed"] != false || e(2)["charged"] != false {
		t.Errorf("the undecided check: %v, want its 2 left, and that 3 would not pass", e(2))
	}
	for _, p := range []struct {
		policy string
		left   float64
	}{{"a", 5}, {"c", 2}} {
		if _, m := c.post(`{"policy":"` + p.policy + `","key":"k","cost":0}`); m["remaining"] != p.left {
			t.Errorf("%s remaining %v after the denied batch, want %v", p.policy, m["remaining"], p.left)
		}
	}
	// More checks than one decision holds is refused, whole.
	many := `{"checks":[` + strings.TrimSuffix(strings.Repeat(`{"policy":"a","key":"x"},`, MaxChecks+1), ",") + `]}`
	if resp, m := c.post(many); resp.StatusCode != 400 || !strings.Contains(m["error"].(string), "more than") {
		t.Errorf("%d checks: %d %v", MaxChecks+1, resp.StatusCode, m)
	}
	if _, m := c.post(`{"policy":"a","key":"x","cost":0}`); m["remaining"] != 5.0 {
		t.Errorf("a refused batch charged: %v", m)
	}
}
