package daemon

import (
	"net/http"
	"strings"
	"testing"
)

func checkHdrConf(headers string) string {
	return `
policies:
  api: {rate: 1/minute}
proxy:
  listen: 127.0.0.1:0
  upstream: demo
  headers: ` + headers + `
check:
  listen: 127.0.0.1:0
admin: {listen: ""}
`
}

// postCheck posts a check of key to d's check API and returns the
// status and the header of its answer.
func postCheck(t *testing.T, d *Daemon, key string) (int, http.Header) {
	t.Helper()
	resp, err := http.Post("http://"+d.Addrs().Check.String()+"/v1/check", "application/json",
		strings.NewReader(`{"policy":"api","key":"`+key+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

// TestCheckHeadersFollowProxy: the check API's answers carry the header
// families proxy.headers selects, from the start and after a reload that
// changes them.
func TestCheckHeadersFollowProxy(t *testing.T) {
	families := map[string]string{
		"disable_x_ratelimit": "X-Ratelimit-Remaining",
		"disable_ratelimit":   "Ratelimit-Policy",
		"disable_retry_after": "Retry-After",
	}
	// want checks a denied check's answer: each family present unless off.
	want := func(t *testing.T, d *Daemon, key string, off map[string]bool) {
		t.Helper()
		postCheck(t, d, key)
		status, h := postCheck(t, d, key)
		if status != http.StatusTooManyRequests {
			t.Fatalf("second check of %s: %d, want 429", key, status)
		}
		for opt, name := range families {
			if got := h.Get(name) != ""; got == off[opt] {
				t.Errorf("%s %v: %s present %v", opt, off[opt], name, got)
			}
		}
	}
	d := started(t, checkHdrConf("{}"))
	want(t, d, "k1", nil)

	off := map[string]bool{"disable_x_ratelimit": true, "disable_ratelimit": true, "disable_retry_after": true}
	d = started(t, checkHdrConf("{disable_x_ratelimit: true, disable_ratelimit: true, disable_retry_after: true}"))
	want(t, d, "k1", off)

	if err := d.Apply(mustParse(t, checkHdrConf("{disable_ratelimit: true}"))); err != nil {
		t.Fatal(err)
	}
	want(t, d, "k2", map[string]bool{"disable_ratelimit": true})
}
