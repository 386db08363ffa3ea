package daemon

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/admin"
	"github.com/floodgate-go/floodgate/clock"
	"github.com/floodgate-go/floodgate/testkit"
)

// loginUpstream answers POST /login: 200 for the password "right", 401 for
// any other.
func loginUpstream(t *testing.T) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if string(b) != "password=right" {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, "wrong password")
			return
		}
		io.WriteString(w, "welcome")
	}))
	t.Cleanup(up.Close)
	return up
}

// loginConf protects POST /login with 3 failures per 15 minutes per client
// address, and a 15-minute penalty.
func loginConf(storage, upstream string) string {
	return fmt.Sprintf(`%s
policies:
  login: {rate: 3/15m, penalty: 15m}
proxy:
  listen: 127.0.0.1:0
  upstream: %s
  routes:
    - name: login
      match: {methods: [POST], path_prefix: /login}
      limits: [{policy: login, key: ip, count: failed}]
check: {listen: 127.0.0.1:0}
admin: {listen: 127.0.0.1:0}
`, storage, upstream)
}

type loginAnswer struct {
	status     int
	retryAfter int // seconds; -1 without the header
	remaining  string
	source     string
}

func login(t *testing.T, d *Daemon, password string) loginAnswer {
	t.Helper()
	req, err := http.NewRequest("POST", "http://"+d.Addrs().Proxy.String()+"/login", strings.NewReader("password="+password))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	a := loginAnswer{status: resp.StatusCode, retryAfter: -1, remaining: resp.Header.Get("X-RateLimit-Remaining"), source: resp.Header.Get("X-RateLimit-Source")}
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		if a.retryAfter, err = strconv.Atoi(ra); err != nil {
			t.Fatalf("Retry-After %q: %v", ra, err)
		}
	}
	return a
}

// keyState asks d's admin listener about the login key of 127.0.0.1 (GET
// inspects, DELETE resets).
func keyState(t *testing.T, d *Daemon, method string) admin.KeyState {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+d.Addrs().Admin.String()+"/v1/keys?policy=login&key=127.0.0.1", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st admin.KeyState
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%s /v1/keys: %d, %v", method, resp.StatusCode, err)
	}
	return st
}

// TestPenaltyLoginBruteForce: two daemons on one Redis protect a login.
// After three wrong passwords the next attempt is refused and starts the
// penalty; during it even the right password is refused with 429 and a
// Retry-After that counts down to the penalty's end (not the limit's own
// 5 minutes), by either daemon, and through the check API; the admin's key
// reset on one daemon lifts it for both.
func TestPenaltyLoginBruteForce(t *testing.T) {
	srv := testkit.Redis(t)
	up := loginUpstream(t)
	storage := fmt.Sprintf("storage: {engine: redis, redis: {addrs: [%q]}, failure: {mode: fail_closed}}", srv.Addr)
	a, b := started(t, loginConf(storage, up.URL)), started(t, loginConf(storage, up.URL))

	for i := range 3 {
		if got := login(t, a, "guess"+strconv.Itoa(i)); got.status != http.StatusUnauthorized {
			t.Fatalf("wrong password %d: %d, want the upstream's 401", i+1, got.status)
		}
	}
	// The limit's own wait would be 5 minutes (one failure refills every
	// 15m/3); the penalty's is 15.
	got := login(t, b, "right")
	if got.status != http.StatusTooManyRequests || got.retryAfter != 900 || got.remaining != "0" {
		t.Fatalf("the attempt after 3 failures: %+v, want 429, Retry-After 900, remaining 0", got)
	}
	for _, d := range []*Daemon{a, b} {
		got := login(t, d, "right")
		if got.status != http.StatusTooManyRequests || got.retryAfter <= 300 || got.retryAfter > 900 {
			t.Fatalf("the right password during the penalty: %+v, want 429 with the penalty's Retry-After", got)
		}
	}
	// The check API refuses the key too, and charges nothing.
	resp, err := http.Post("http://"+b.Addrs().Check.String()+"/v1/check", "application/json", strings.NewReader(`{"policy":"login","key":"127.0.0.1"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("check API during the penalty: %d %s", resp.StatusCode, body)
	}
	// Inspecting names the penalty.
	st := keyState(t, b, "GET")
	if st.Source != string(floodgate.SourcePenalty) || !st.Limited || st.Remaining != 0 || st.RetryAfterSeconds <= 300 || st.RetryAfterSeconds > 900 {
		t.Fatalf("the key's state during the penalty: %+v", st)
	}

	st = keyState(t, a, "DELETE")
	if !st.Reset || st.Limited || st.Source == string(floodgate.SourcePenalty) {
		t.Fatalf("the key's state after a reset: %+v", st)
	}
	for _, d := range []*Daemon{b, a} {
		if got := login(t, d, "right"); got.status != http.StatusOK {
			t.Fatalf("the right password after the reset: %+v, want 200", got)
		}
	}
}

// TestPenaltyLastsItsTimeThroughTheProxy: on a pinned clock, the penalty
// outlasts the limit (which is full again after 15 minutes) and ends
// exactly 15 minutes after the denial that started it.
func TestPenaltyLastsItsTimeThroughTheProxy(t *testing.T) {
	up := loginUpstream(t)
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	d, err := New(mustParse(t, loginConf("", up.URL)), Options{Logger: slog.New(slog.DiscardHandler), Clock: clock.Func(now.Load)})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })

	for i := range 3 {
		if got := login(t, d, "guess"); got.status != http.StatusUnauthorized {
			t.Fatalf("wrong password %d: %d", i+1, got.status)
		}
		now.Add(int64(time.Minute)) // the failures come a minute apart
	}
	if got := login(t, d, "right"); got.status != http.StatusTooManyRequests || got.retryAfter != 900 {
		t.Fatalf("the attempt after 3 failures: %+v, want 429 with Retry-After 900", got)
	}
	now.Add(int64(14 * time.Minute)) // the limit has refilled; the penalty has a minute left
	if got := login(t, d, "right"); got.status != http.StatusTooManyRequests || got.retryAfter != 60 {
		t.Fatalf("the right password a minute before the penalty ends: %+v, want 429 with Retry-After 60", got)
	}
	now.Add(int64(time.Minute))
	if got := login(t, d, "right"); got.status != http.StatusOK {
		t.Fatalf("the right password when the penalty ends: %+v, want 200", got)
	}
}
