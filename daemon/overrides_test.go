package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/admin"
	"github.com/floodgate-go/floodgate/status"
	"github.com/floodgate-go/floodgate/testkit"
)

// lockedBuffer is a log destination several goroutines write.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func overridesConf(storage string, rate int) string {
	return fmt.Sprintf(`%s
policies:
  api: {rate: %d/min, tiers: {free: {rate: 1/min}}}
check: {listen: 127.0.0.1:0}
admin: {listen: 127.0.0.1:0, token: s3cret}
`, storage, rate)
}

func startedWithLog(t *testing.T, yaml string, w io.Writer) *Daemon {
	t.Helper()
	d, err := New(mustParse(t, yaml), Options{Logger: slog.New(slog.NewJSONHandler(w, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d.Shutdown(ctx)
	})
	return d
}

// adminCall sends an admin request with the token and returns the status
// and body.
func adminCall(t *testing.T, d *Daemon, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+d.Addrs().Admin.String()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// checks asks d's check API about key n times and counts the allowed.
func checks(t *testing.T, d *Daemon, key string, n int) int {
	t.Helper()
	allowed := 0
	for range n {
		resp, err := http.Post("http://"+d.Addrs().Check.String()+"/v1/check", "application/json",
			strings.NewReader(fmt.Sprintf(`{"policy":"api","key":%q}`, key)))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			allowed++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("check %s: %d", key, resp.StatusCode)
		}
	}
	return allowed
}

func limitSet(t *testing.T, d *Daemon, key string) string {
	t.Helper()
	code, body := adminCall(t, d, "GET", "/v1/keys?policy=api&key="+key, "")
	var st admin.KeyState
	if err := json.Unmarshal([]byte(body), &st); err != nil || code != 200 {
		t.Fatalf("GET /v1/keys: %d %s", code, body)
	}
	return st.LimitSet
}

// TestRuntimeOverridesTwoDaemonsOneRedis: an override set on one daemon
// applies on it at once and on a second daemon on the same Redis within
// the refresh; the state under it is shared; it is listed with who set it
// and why by the admin API and the status page of both, survives a
// reload, and a delete on either ends it on both. A multiplier for a tier
// applies to the tier's keys.
func TestRuntimeOverridesTwoDaemonsOneRedis(t *testing.T) {
	srv := testkit.Redis(t)
	storage := fmt.Sprintf("storage: {engine: redis, redis: {addrs: [%q]}, failure: {mode: fail_closed}}", srv.Addr)
	var logA lockedBuffer
	a := startedWithLog(t, overridesConf(storage, 2), &logA)
	b := started(t, overridesConf(storage, 2))

	if got := checks(t, b, "user:42", 3); got != 2 {
		t.Fatalf("before the override: %d of 3 allowed, want 2", got)
	}
	code, body := adminCall(t, a, "PUT", "/v1/overrides?policy=api&key=user:42", `{"rate": "5/min", "ttl": "1h", "by": "alice", "reason": "INC-4411"}`)
	if code != 200 || !strings.Contains(body, `"limits":["5/min"]`) || !strings.Contains(body, `"by":"alice"`) {
		t.Fatalf("PUT: %d %s", code, body)
	}
	// On the daemon that set it, at once; the raised limit starts full.
	if got := checks(t, a, "user:42", 4); got != 4 {
		t.Fatalf("on a, under the override: %d of 4 allowed, want 4", got)
	}
	testkit.Eventually(t, 5*time.Second, "b applies the override", func() bool {
		return strings.HasPrefix(limitSet(t, b, "user:42"), "runtime:key:user:42@")
	})
	if code, body := adminCall(t, b, "GET", "/v1/keys?policy=api&key=user:42", ""); code != 200 ||
		!strings.Contains(body, `"runtime_override":{`) || !strings.Contains(body, `"reason":"INC-4411"`) {
		t.Fatalf("/v1/keys does not name the runtime override: %d %s", code, body)
	}
	// The state under the override is in Redis: b sees what a spent.
	if got := checks(t, b, "user:42", 2); got != 1 {
		t.Fatalf("on b, under the override: %d of 2 allowed, want 1 (a spent 4 of 5)", got)
	}
	if got := checks(t, b, "user:7", 3); got != 2 {
		t.Fatalf("another key on b: %d of 3 allowed, want 2", got)
	}
	for _, d := range []*Daemon{a, b} {
		code, body := adminCall(t, d, "GET", "/v1/overrides", "")
		var list struct{ Overrides []admin.OverrideView }
		if err := json.Unmarshal([]byte(body), &list); err != nil || code != 200 || len(list.Overrides) != 1 ||
			list.Overrides[0].Key != "user:42" || list.Overrides[0].Reason != "INC-4411" || time.Until(list.Overrides[0].Expires) < 59*time.Minute {
			t.Fatalf("GET /v1/overrides: %d %s", code, body)
		}
		code, body = adminCall(t, d, "GET", "/v1/status", "")
		var snap status.Snapshot
		if err := json.Unmarshal([]byte(body), &snap); err != nil || code != 200 {
			t.Fatalf("GET /v1/status: %d %s", code, body)
		}
		found := false
		for _, p := range snap.Policies {
			if p.Name == "api" && len(p.RuntimeOverrides) == 1 && p.RuntimeOverrides[0].By == "alice" && p.RuntimeOverrides[0].Key != "" {
				found = true
			}
		}
		if !found {
			t.Fatalf("the status page does not list the override: %s", body)
		}
	}
	if code, body := adminCall(t, b, "GET", "/metrics", ""); code != 200 || !strings.Contains(body, "\nfloodgate_runtime_overrides 1\n") {
		t.Fatalf("b's /metrics does not count the override: %d", code)
	}
	if log := logA.String(); !strings.Contains(log, `"msg":"runtime override set"`) || !strings.Contains(log, `"by":"alice"`) || !strings.Contains(log, `"reason":"INC-4411"`) {
		t.Fatalf("the change is not logged with who and why:\n%s", log)
	}
	// A reload (a new rate for the policy) keeps the override.
	if err := a.Apply(mustParse(t, overridesConf(storage, 3))); err != nil {
		t.Fatal(err)
	}
	if got := limitSet(t, a, "user:42"); !strings.HasPrefix(got, "runtime:key:user:42@") {
		t.Fatalf("after a reload the key's limits are %q", got)
	}
	// A tier's multiplier.
	if code, body := adminCall(t, b, "PUT", "/v1/overrides?policy=api&tier=free", "multiplier: 3\nttl: 10m\n"); code != 200 {
		t.Fatalf("PUT tier: %d %s", code, body)
	}
	if got := checks(t, b, "tier:free|u9", 4); got != 3 {
		t.Fatalf("tier free ×3: %d of 4 allowed, want 3", got)
	}
	// A delete on b ends it on a within the refresh.
	if code, body := adminCall(t, b, "DELETE", "/v1/overrides?policy=api&key=user:42", ""); code != 200 {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	testkit.Eventually(t, 5*time.Second, "a drops the deleted override", func() bool {
		return limitSet(t, a, "user:42") == ""
	})
	if code, _ := adminCall(t, b, "DELETE", "/v1/overrides?policy=api&key=user:42", ""); code != 404 {
		t.Fatalf("a second DELETE: %d, want 404", code)
	}
}

// TestRuntimeOverrideRequests: what the admin API refuses, and that it
// asks for the token.
func TestRuntimeOverrideRequests(t *testing.T) {
	d := started(t, overridesConf("", 2))
	for _, c := range []struct {
		method, path, body string
		code               int
		want               string
	}{
		{"PUT", "/v1/overrides?policy=nope&key=k", `{"rate":"1/s","ttl":"1h"}`, 404, "no policy"},
		{"PUT", "/v1/overrides?policy=api", `{"rate":"1/s","ttl":"1h"}`, 400, "and one of"},
		{"PUT", "/v1/overrides?policy=api&key=k&tier=free", `{"rate":"1/s","ttl":"1h"}`, 400, "and one of"},
		{"PUT", "/v1/overrides?policy=api&key=k", `{"rate":"1/s"}`, 400, "no ttl"},
		{"PUT", "/v1/overrides?policy=api&key=k", `{"rate":"1/s","ttl":"1h","colour":"red"}`, 400, "colour"},
		{"PUT", "/v1/overrides?policy=api&tier=gold", `{"multiplier":2,"ttl":"1h"}`, 400, "no tier"},
		{"PUT", "/v1/overrides?policy=api&key=k", `{"rate":"1/s","ttl":"1h","reason":"` + strings.Repeat("x", 70<<10) + `"}`, 413, "64 KiB"},
		{"PATCH", "/v1/overrides?policy=api&key=k", ``, 405, ""},
	} {
		code, body := adminCall(t, d, c.method, c.path, c.body)
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("%s %s %.40q: %d %s, want %d with %q", c.method, c.path, c.body, code, body, c.code, c.want)
		}
	}
	req, _ := http.NewRequest("PUT", "http://"+d.Addrs().Admin.String()+"/v1/overrides?policy=api&key=k", strings.NewReader(`{"rate":"1/s","ttl":"1h"}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("PUT without the token: %d, want 401", resp.StatusCode)
	}
	// On the memory engine the override applies and survives a reload.
	if code, body := adminCall(t, d, "PUT", "/v1/overrides?policy=api&key=k", `{"multiplier":2,"ttl":"1h"}`); code != 200 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	if err := d.Apply(mustParse(t, overridesConf("", 5))); err != nil {
		t.Fatal(err)
	}
	if got := checks(t, d, "k", 11); got != 10 {
		t.Fatalf("×2 after a reload to 5/min: %d of 11 allowed, want 10", got)
	}
}

// TestRuntimeOverrideHybridWithoutFraction: a hybrid engine with no
// fraction cannot decide limits without local ones, which every runtime
// override is: the PUT is refused with the reason, rather than accepted
// and every request of the key refused.
func TestRuntimeOverrideHybridWithoutFraction(t *testing.T) {
	srv := testkit.Redis(t)
	d := started(t, fmt.Sprintf(`
storage: {engine: hybrid, redis: {addrs: [%q]}}
policies:
  api: {rate: 100/min, local: {rate: 50/min}}
check: {listen: 127.0.0.1:0}
admin: {listen: 127.0.0.1:0, token: s3cret}
`, srv.Addr))
	code, body := adminCall(t, d, "PUT", "/v1/overrides?policy=api&key=k", `{"multiplier": 2, "ttl": "1h"}`)
	if code != 400 || !strings.Contains(body, "no fraction") {
		t.Fatalf("PUT on a hybrid engine without a fraction: %d %s, want 400 naming the fraction", code, body)
	}
	if got := checks(t, d, "k", 1); got != 1 {
		t.Fatalf("the key after the refused PUT: %d of 1 allowed", got)
	}
}

// TestRuntimeOverrideOfARemovedPolicy: an override of a policy a reload
// removed stays listed and can be deleted.
func TestRuntimeOverrideOfARemovedPolicy(t *testing.T) {
	d := started(t, overridesConf("", 2))
	if code, body := adminCall(t, d, "PUT", "/v1/overrides?policy=api&key=k", `{"multiplier": 2, "ttl": "1h"}`); code != 200 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	if err := d.Apply(mustParse(t, strings.Replace(overridesConf("", 2), "api:", "web:", 1))); err != nil {
		t.Fatal(err)
	}
	if code, body := adminCall(t, d, "GET", "/v1/overrides", ""); code != 200 || !strings.Contains(body, `"policy":"api"`) {
		t.Fatalf("GET after the reload: %d %s", code, body)
	}
	if code, body := adminCall(t, d, "DELETE", "/v1/overrides?policy=api&key=k", ""); code != 200 {
		t.Fatalf("DELETE of the removed policy's override: %d %s", code, body)
	}
}
