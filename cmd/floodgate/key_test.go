package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// checkKey charges key under policy once through the check API and reports
// whether it passed.
func checkKey(t *testing.T, d *daemonProc, policy, key string) bool {
	t.Helper()
	body := fmt.Sprintf(`{"policy":%q,"key":%q}`, policy, key)
	resp, err := http.Post("http://"+d.addr("check")+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch resp.StatusCode {
	case 200:
		return true
	case 429:
		return false
	}
	t.Fatalf("check %s/%s: %d", policy, key, resp.StatusCode)
	return false
}

func snapshot(t *testing.T, admin string, header ...string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest("GET", admin+"/v1/status", nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/v1/status: %d %v", resp.StatusCode, err)
	}
	return s
}

// TestKeyShowAndReset: a limited key is seen by `floodgate key show`
// without being charged, forgiven by `floodgate key reset`, logged redacted
// and counted; the status page's JSON lists it among the top limited keys.
func TestKeyShowAndReset(t *testing.T) {
	d := startDaemon(t, `
policies:
  api: {rate: 3/min}
check: {listen: 127.0.0.1:0}
admin: {listen: 127.0.0.1:0}
`, "check", "admin")
	admin := "http://" + d.addr("admin")
	for i := range 3 {
		if !checkKey(t, d, "api", "user:42") {
			t.Fatalf("request %d denied", i+1)
		}
	}
	for range 5 {
		if checkKey(t, d, "api", "user:42") {
			t.Fatal("a 4th request in the minute passed")
		}
	}
	var out, errOut bytes.Buffer
	show := func() string {
		t.Helper()
		out.Reset()
		if code := run([]string{"key", "show", "-addr", admin, "-policy", "api", "-key", "user:42"}, &out, &errOut); code != 0 {
			t.Fatalf("floodgate key show: exit %d\n%s", code, errOut.String())
		}
		return out.String()
	}
	for range 3 { // a show charges nothing, however often
		if s := show(); !strings.Contains(s, "LIMITED") || !strings.Contains(s, "remaining:  0 under 3/min") {
			t.Fatalf("floodgate key show of a limited key:\n%s", s)
		}
	}
	redacted := regexp.MustCompile(`logged as (k:[0-9a-f]{12})`).FindStringSubmatch(out.String())
	if redacted == nil {
		t.Fatalf("no redacted key in:\n%s", out.String())
	}
	// The status JSON names the key, redacted, as the top limited one.
	s := snapshot(t, admin)
	pol := s["policies"].([]any)[0].(map[string]any)
	top := pol["top_limited"].([]any)
	if pol["name"] != "api" || len(top) == 0 || top[0].(map[string]any)["key"] != redacted[1] || top[0].(map[string]any)["count"].(float64) != 5 {
		t.Fatalf("status JSON: %v; want %s first with 5 denials", pol, redacted[1])
	}

	out.Reset()
	if code := run([]string{"key", "reset", "-addr", admin, "-policy", "api", "-key", "user:42"}, &out, &errOut); code != 0 {
		t.Fatalf("floodgate key reset: exit %d\n%s", code, errOut.String())
	}
	if s := out.String(); !strings.Contains(s, "reset:      yes") || !strings.Contains(s, "remaining:  3 under 3/min") || !strings.Contains(s, "not limited") {
		t.Fatalf("floodgate key reset:\n%s", s)
	}
	for i := range 3 {
		if !checkKey(t, d, "api", "user:42") {
			t.Fatalf("after the reset, request %d was denied", i+1)
		}
	}
	if checkKey(t, d, "api", "user:42") {
		t.Fatal("after the reset, a 4th request passed: the reset gave more than full capacity")
	}
	if n := metric(t, d, `floodgate_key_resets_total{policy="api"}`); n != 1 {
		t.Errorf("floodgate_key_resets_total = %v, want 1", n)
	}
	logs := d.logs()
	if !regexp.MustCompile(`msg="key reset" remote=127\.0\.0\.1:\d+ policy=api key=` + redacted[1]).MatchString(logs) {
		t.Errorf("no reset log line with who, policy and redacted key:\n%s", grepLines(logs, "reset"))
	}
	if strings.Contains(logs, "user:42") {
		t.Errorf("the raw key is in the logs:\n%s", grepLines(logs, "user:42"))
	}

	// Bad requests say what to do.
	errOut.Reset()
	if code := run([]string{"key", "show", "-addr", admin, "-policy", "nope", "-key", "k"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "the policies are: api") {
		t.Errorf("unknown policy: exit %d: %s", code, errOut.String())
	}
	if code := run([]string{"key", "show", "-policy", "api"}, &out, &errOut); code != 2 {
		t.Errorf("missing -key: exit %d, want 2", code)
	}
	if code := run([]string{"key", "forget"}, &out, &errOut); code != 2 {
		t.Errorf("unknown verb: exit %d, want 2", code)
	}
}

func do(t *testing.T, method, url string, header ...string) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestAdminOffLoopback: an admin listener bound to every interface serves
// the key API only with its token, and without a configured token refuses
// resets; the proxy and check listeners never serve admin routes.
func TestAdminOffLoopback(t *testing.T) {
	up := upstream(t)
	withToken := startDaemon(t, fmt.Sprintf(`
policies:
  api: {rate: 3/min}
proxy:
  listen: 127.0.0.1:0
  upstream: %s
  routes:
    - name: all
      limits: [{policy: api, key: ip}]
check: {listen: 127.0.0.1:0}
admin: {listen: "0.0.0.0:0", token: s3cret}
`, up), "proxy", "check", "admin")
	admin := "http://" + strings.Replace(withToken.addr("admin"), "0.0.0.0:", "127.0.0.1:", 1)
	keys := admin + "/v1/keys?policy=api&key=203.0.113.7"
	bearer := []string{"Authorization", "Bearer s3cret"}
	for _, c := range []struct {
		method, url string
		header      []string
		want        int
	}{
		{"GET", keys, nil, 401},
		{"DELETE", keys, nil, 401},
		{"DELETE", keys, []string{"Authorization", "Bearer wrong"}, 401},
		{"GET", admin + "/v1/status", nil, 401},
		{"GET", keys, bearer, 200},
		{"DELETE", keys, bearer, 200},
		{"GET", admin + "/v1/status", bearer, 200},
		{"GET", admin + "/", nil, 200}, // the page itself holds no data
		{"GET", admin + "/metrics", nil, 200},
	} {
		if got := do(t, c.method, c.url, c.header...); got != c.want {
			t.Errorf("%s %s %v: %d, want %d", c.method, c.url, c.header, got, c.want)
		}
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"key", "reset", "-addr", admin, "-policy", "api", "-key", "203.0.113.7"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "401") {
		t.Errorf("floodgate key reset without -token: exit %d %s", code, errOut.String())
	}
	if code := run([]string{"key", "reset", "-addr", admin, "-token", "s3cret", "-policy", "api", "-key", "203.0.113.7"}, &out, &errOut); code != 0 {
		t.Errorf("floodgate key reset -token: exit %d %s", code, errOut.String())
	}
	// Neither the proxy (which passes the request upstream) nor the check
	// API answers admin routes.
	for _, path := range []string{"/v1/keys?policy=api&key=user:42", "/v1/status", "/"} {
		req, _ := http.NewRequest("DELETE", "http://"+withToken.addr("proxy")+path, nil)
		req.Header.Set("Authorization", "Bearer s3cret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.Header.Get("X-Upstream") != "yes" && resp.StatusCode != 429 {
			t.Errorf("the proxy answered DELETE %s itself: %d %s", path, resp.StatusCode, body)
		}
		if got := do(t, "DELETE", "http://"+withToken.addr("check")+path, bearer...); got == 200 {
			t.Errorf("the check API answered DELETE %s", path)
		}
	}

	// Without a token, an admin listener off loopback is refused before
	// anything listens: validate and serve say so.
	file := filepath.Join(t.TempDir(), "open.yaml")
	os.WriteFile(file, []byte("policies:\n  api: {rate: 3/min}\ncheck: {listen: 127.0.0.1:0}\nadmin: {listen: \"0.0.0.0:0\"}\n"), 0o644)
	var out2, errOut2 bytes.Buffer
	if code := run([]string{"validate", file}, &out2, &errOut2); code != 1 || !strings.Contains(errOut2.String(), "admin.listen") || !strings.Contains(errOut2.String(), "admin.token") {
		t.Errorf("validate of an open admin listener: exit %d %s", code, errOut2.String())
	}
}
