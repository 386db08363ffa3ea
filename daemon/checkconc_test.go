package daemon

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/testkit"
)

func checkConcConf(extra string) string {
	return `
policies:
  api: {rate: 10/second}
check:
  listen: 127.0.0.1:0
  token: s3cret
  concurrency:
    reports: {limit: 2, lease: 1m}
admin: {listen: ""}
` + extra
}

type leaseReply struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

// lease posts body to the check API's path with the bearer token (none
// when token is empty).
func lease(t *testing.T, d *Daemon, path, token, body string) leaseReply {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+d.Addrs().Check.String()+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hangClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := leaseReply{status: resp.StatusCode, header: resp.Header, raw: string(b)}
	if len(b) > 0 {
		if err := json.Unmarshal(b, &r.body); err != nil {
			t.Errorf("%s answered %d with a body that is not JSON: %q", path, r.status, b)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s answered Content-Type %q", path, ct)
		}
	}
	return r
}

func acquire(t *testing.T, d *Daemon, body string) leaseReply {
	t.Helper()
	return lease(t, d, "/v1/concurrency/acquire", "s3cret", body)
}

func tokenOf(t *testing.T, r leaseReply) string {
	t.Helper()
	tok, _ := r.body["token"].(string)
	if r.status != 200 || tok == "" {
		t.Fatalf("acquire: %d %s, want 200 with a token", r.status, r.raw)
	}
	return tok
}

// leaseLifecycle runs the lease endpoints' contract against daemons a and
// b, which share one store when b is not a: acquire to the limit, then 429;
// renew keeps the slot; release frees it and is idempotent; renew after
// release is 410.
func leaseLifecycle(t *testing.T, a, b *Daemon) {
	const key = `{"name":"reports","key":"user:42"}`
	r1 := acquire(t, a, key)
	t1 := tokenOf(t, r1)
	if r1.body["limit"] != 2.0 || r1.body["in_flight"] != 1.0 || r1.body["expires_in_ms"] != 60000.0 {
		t.Errorf("first acquire: %s, want limit 2, in_flight 1, expires_in_ms 60000", r1.raw)
	}
	r2 := acquire(t, b, key)
	t2 := tokenOf(t, r2)
	if r2.body["in_flight"] != 2.0 {
		t.Errorf("second acquire: %s, want in_flight 2", r2.raw)
	}
	if r := acquire(t, a, key); r.status != 429 {
		t.Fatalf("acquire beyond the limit: %d %s, want 429", r.status, r.raw)
	}
	if r := acquire(t, b, `{"name":"reports","key":"user:7"}`); r.status != 200 {
		t.Errorf("another key: %d %s, want 200 (slots are per key)", r.status, r.raw)
	}

	renew := fmt.Sprintf(`{"name":"reports","key":"user:42","token":%q}`, t1)
	if r := lease(t, b, "/v1/concurrency/renew", "s3cret", renew); r.status != 204 {
		t.Errorf("renew: %d %s, want 204", r.status, r.raw)
	}
	if r := acquire(t, a, key); r.status != 429 {
		t.Errorf("acquire after a renewal: %d %s, want 429 (the renewed lease still holds)", r.status, r.raw)
	}

	release := fmt.Sprintf(`{"name":"reports","key":"user:42","token":%q}`, t2)
	for i := range 2 {
		if r := lease(t, a, "/v1/concurrency/release", "s3cret", release); r.status != 204 {
			t.Errorf("release %d: %d %s, want 204", i+1, r.status, r.raw)
		}
	}
	t3 := tokenOf(t, acquire(t, b, key))
	if r := acquire(t, a, key); r.status != 429 {
		t.Errorf("acquire after a double release and a new acquire: %d %s, want 429 (the second release freed nothing)", r.status, r.raw)
	}
	if r := lease(t, a, "/v1/concurrency/renew", "s3cret", release); r.status != 410 {
		t.Errorf("renew of a released lease: %d %s, want 410", r.status, r.raw)
	}
	for _, tok := range []string{t1, t3} {
		lease(t, a, "/v1/concurrency/release", "s3cret", fmt.Sprintf(`{"name":"reports","key":"user:42","token":%q}`, tok))
	}
	tokenOf(t, acquire(t, a, key))
}

// TestCheckConcurrencyLeases: the lease endpoints over the check API of a
// real daemon with the memory engine.
func TestCheckConcurrencyLeases(t *testing.T) {
	d := started(t, checkConcConf(""))
	leaseLifecycle(t, d, d)
}

// TestCheckConcurrencyLeasesRedisShared: with storage redis, two daemons
// over one real Redis share the slots: a lease acquired from one is
// counted, renewed and released through the other.
func TestCheckConcurrencyLeasesRedisShared(t *testing.T) {
	srv := testkit.Redis(t)
	conf := checkConcConf(fmt.Sprintf("storage: {engine: redis, redis: {addrs: [%s]}, failure: {mode: fail_closed}}\n", srv.Addr))
	a, b := started(t, conf), started(t, conf)
	leaseLifecycle(t, a, b)
}

// TestCheckConcurrencyLeaseExpires: a lease whose holder stops renewing
// frees its slot when its ttl runs out, in this process and in Redis, and
// can no longer be renewed.
func TestCheckConcurrencyLeaseExpires(t *testing.T) {
	srv := testkit.Redis(t)
	for name, extra := range map[string]string{
		"memory": "",
		"redis":  fmt.Sprintf("storage: {engine: redis, redis: {addrs: [%s]}, failure: {mode: fail_closed}}\n", srv.Addr),
	} {
		t.Run(name, func(t *testing.T) {
			d := started(t, strings.Replace(checkConcConf(extra), "{limit: 2, lease: 1m}", "{limit: 1, lease: 1m}", 1))
			const short = `{"name":"reports","key":"k","ttl":"200ms"}`
			tok := tokenOf(t, acquire(t, d, short))
			if r := acquire(t, d, short); r.status != 429 {
				t.Fatalf("acquire while the lease holds: %d %s, want 429", r.status, r.raw)
			}
			var last leaseReply
			testkit.Eventually(t, 10*time.Second, "the expired lease's slot granted again", func() bool {
				last = acquire(t, d, short)
				return last.status == 200
			})
			if r := lease(t, d, "/v1/concurrency/renew", "s3cret", fmt.Sprintf(`{"name":"reports","key":"k","token":%q}`, tok)); r.status != 410 {
				t.Errorf("renew of the expired lease: %d %s, want 410", r.status, r.raw)
			}
		})
	}
}

// TestCheckConcurrencyBadRequests: the lease endpoints need the check
// API's token, JSON, a known name, a key, a well-formed token and a ttl
// within the limit's lease; each mistake is answered with a JSON error
// and holds nothing.
func TestCheckConcurrencyBadRequests(t *testing.T) {
	d := started(t, strings.Replace(checkConcConf(""), "{limit: 2, lease: 1m}", "{limit: 1, lease: 1m}", 1))
	if r := lease(t, d, "/v1/concurrency/acquire", "", `{"name":"reports","key":"k"}`); r.status != 401 || r.header.Get("WWW-Authenticate") == "" {
		t.Errorf("acquire without the token: %d %s, want 401", r.status, r.raw)
	}
	if r := lease(t, d, "/v1/concurrency/acquire", "wrong", `{"name":"reports","key":"k"}`); r.status != 401 {
		t.Errorf("acquire with a wrong token: %d %s, want 401", r.status, r.raw)
	}
	req, _ := http.NewRequest("POST", "http://"+d.Addrs().Check.String()+"/v1/concurrency/acquire", strings.NewReader(`{"name":"reports","key":"k"}`))
	req.Header.Set("Authorization", "Bearer s3cret")
	req.Header.Set("Content-Type", "text/plain")
	if resp, err := hangClient.Do(req); err != nil || resp.StatusCode != 415 {
		t.Errorf("acquire as text/plain: %v %v, want 415", resp, err)
	} else {
		resp.Body.Close()
	}
	req, _ = http.NewRequest("POST", "http://"+d.Addrs().Check.String()+"/v1/concurrency/acquire", strings.NewReader(`{"name":"reports","key":"k"}`))
	req.Header.Set("Authorization", "Bearer s3cret")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", "http://evil.example")
	if resp, err := hangClient.Do(req); err != nil || resp.StatusCode != 403 {
		t.Errorf("a cross-site acquire: %v %v, want 403", resp, err)
	} else {
		resp.Body.Close()
	}
	if resp, err := hangClient.Get("http://" + d.Addrs().Check.String() + "/v1/concurrency/acquire"); err != nil || resp.StatusCode != 405 {
		t.Errorf("GET acquire: %v %v, want 405", resp, err)
	} else {
		resp.Body.Close()
	}
	req, _ = http.NewRequest("POST", "http://"+d.Addrs().Check.String()+"/v1/concurrency/acquire", strings.NewReader(`{"name":"reports","key":"k"}`))
	req.Header.Set("Authorization", "Bearer s3cret")
	req.Header.Set("Content-Type", "application/json")
	req.Host = "rebound.example"
	if resp, err := hangClient.Do(req); err != nil || resp.StatusCode != 403 {
		t.Errorf("acquire with a foreign Host: %v %v, want 403", resp, err)
	} else {
		resp.Body.Close()
	}
	for _, c := range []struct{ path, body string }{
		{"/v1/concurrency/acquire", `{"name":"nope","key":"k"}`},
		{"/v1/concurrency/acquire", `{"name":"reports"}`},
		{"/v1/concurrency/acquire", `{"name":"reports","key":"k","ttl":"2m"}`},
		{"/v1/concurrency/acquire", `{"name":"reports","key":"k","ttl":"-1s"}`},
		{"/v1/concurrency/acquire", `{"name":"reports","key":"k","ttl":"soon"}`},
		{"/v1/concurrency/acquire", `{"name":"reports","key":"k","limit":5}`},
		{"/v1/concurrency/acquire", `{"name":"reports","key":"k"} {}`},
		{"/v1/concurrency/acquire", `{"name":"reports","key":"k","token":"0123456789abcdef0123456789abcdef"}`},
		{"/v1/concurrency/renew", `{"name":"reports","key":"k","token":"forged"}`},
		{"/v1/concurrency/renew", `{"name":"reports","key":"k"}`},
		{"/v1/concurrency/release", `{"name":"reports","key":"k","token":"0123456789ABCDEF0123456789ABCDEF"}`},
	} {
		if r := lease(t, d, c.path, "s3cret", c.body); r.status != 400 || r.body["error"] == nil {
			t.Errorf("%s %s: %d %s, want 400 with an error", c.path, c.body, r.status, r.raw)
		}
	}
	// A well-formed token that holds nothing is a lost lease, not a slot.
	if r := lease(t, d, "/v1/concurrency/renew", "s3cret", `{"name":"reports","key":"k","token":"0123456789abcdef0123456789abcdef"}`); r.status != 410 {
		t.Errorf("renew of an unknown token: %d %s, want 410", r.status, r.raw)
	}
	// Nothing above took the only slot.
	held := tokenOf(t, acquire(t, d, `{"name":"reports","key":"k"}`))
	// A well-formed token that acquire did not hand out releases nothing:
	// release is idempotent (204), and only a slot's own token frees it.
	forged := "0123456789abcdef0123456789abcdef"
	if forged == held {
		t.Fatal("acquire handed out the forged token")
	}
	if r := lease(t, d, "/v1/concurrency/release", "s3cret", fmt.Sprintf(`{"name":"reports","key":"k","token":%q}`, forged)); r.status != 204 {
		t.Errorf("release of a forged token: %d %s, want 204 (releasing nothing)", r.status, r.raw)
	}
	if r := acquire(t, d, `{"name":"reports","key":"k"}`); r.status != 429 {
		t.Errorf("after the release of a forged token, acquire: %d %s, want 429 (the slot still held)", r.status, r.raw)
	}
}

// TestCheckConcurrencyStoreDown: with storage redis failing closed, an
// acquire while Redis is down is a 503, not a slot and not a 429; once
// Redis is back, slots are granted again.
func TestCheckConcurrencyStoreDown(t *testing.T) {
	srv := testkit.Redis(t)
	d := started(t, checkConcConf(fmt.Sprintf("storage: {engine: redis, redis: {addrs: [%s]}, failure: {mode: fail_closed}}\n", srv.Addr)))
	tok := tokenOf(t, acquire(t, d, `{"name":"reports","key":"k"}`))
	srv.Stop()
	if r := acquire(t, d, `{"name":"reports","key":"k"}`); r.status != 503 || r.body["error"] == nil {
		t.Errorf("acquire with Redis down: %d %s, want 503 with an error", r.status, r.raw)
	}
	if r := lease(t, d, "/v1/concurrency/renew", "s3cret", fmt.Sprintf(`{"name":"reports","key":"k","token":%q}`, tok)); r.status != 503 {
		t.Errorf("renew with Redis down: %d %s, want 503 (the lease may still hold; the store cannot say)", r.status, r.raw)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "a slot granted once Redis is back", func() bool {
		return acquire(t, d, `{"name":"reports","key":"k2"}`).status == 200
	})
}
