package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// TestOverrideCommand: floodgate override set raises one key's limit at
// runtime, the proxy applies it, key show and explain name it with who
// set it and why, list shows it, and delete ends it; a mistake is the
// daemon's answer, not a silent success.
func TestOverrideCommand(t *testing.T) {
	up := upstream(t)
	d := startDaemon(t, fmt.Sprintf(`
policies:
  api: {rate: 2/min}
proxy:
  listen: 127.0.0.1:0
  upstream: %s
  routes:
    - name: api
      limits: [{policy: api, key: "header:X-Api-Key"}]
admin: {listen: 127.0.0.1:0}
`, up), "proxy", "admin")
	admin := "http://" + d.addr("admin")
	cli := func(args ...string) (int, string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		code := run(args, &out, &errOut)
		return code, out.String(), errOut.String()
	}
	allowed := func(n int) int {
		ok := 0
		for range n {
			if get(t, "http://"+d.addr("proxy")+"/items", "X-Api-Key", "k1").StatusCode == 200 {
				ok++
			}
		}
		return ok
	}
	if got := allowed(3); got != 2 {
		t.Fatalf("before the override: %d of 3 passed", got)
	}
	code, out, errOut := cli("override", "set", "-addr", admin, "-policy", "api", "-key", "x-api-key:k1", "-rate", "5/min",
		"-ttl", "1h", "-by", "alice", "-reason", "INC-4411")
	if code != 0 || !strings.Contains(out, "set: api key x-api-key:k1: 5/min until") || !strings.Contains(out, "by alice: INC-4411") {
		t.Fatalf("override set: exit %d\n%s%s", code, out, errOut)
	}
	if got := allowed(6); got != 5 {
		t.Fatalf("under the override: %d of 6 passed, want 5", got)
	}
	code, out, _ = cli("key", "show", "-addr", admin, "-policy", "api", "-key", "x-api-key:k1")
	if code != 0 || !strings.Contains(out, "runtime override 5/min until") || !strings.Contains(out, "by alice: INC-4411") {
		t.Fatalf("key show does not name the override:\n%s", out)
	}
	code, out, _ = cli("explain", "-addr", admin, "-http", "GET /items", "-H", "X-Api-Key: k1")
	if code != 0 || !strings.Contains(out, "runtime override 5/min") {
		t.Fatalf("explain does not name the override:\n%s", out)
	}
	if code, out, _ = cli("override", "list", "-addr", admin); code != 0 || !strings.Contains(out, "api key x-api-key:k1: 5/min") {
		t.Fatalf("override list: exit %d\n%s", code, out)
	}
	// Mistakes are answered.
	if code, _, errOut = cli("override", "set", "-addr", admin, "-policy", "api", "-key", "x-api-key:k1", "-rate", "5/min"); code != 1 || !strings.Contains(errOut, "no ttl") {
		t.Fatalf("set without -ttl: exit %d %s", code, errOut)
	}
	if code, _, errOut = cli("override", "set", "-addr", admin, "-policy", "api", "-key", "k", "-tier", "t", "-multiplier", "2", "-ttl", "1h"); code != 2 {
		t.Fatalf("set with -key and -tier: exit %d %s", code, errOut)
	}
	if code, _, errOut = cli("override", "set", "-addr", admin, "-policy", "api", "-key", "user:1", "-multiplier", "2", "-ttl", "1h"); code != 1 || !strings.Contains(errOut, "shapes") {
		t.Fatalf("set for a key of no shape: exit %d %s", code, errOut)
	}
	if code, out, errOut = cli("override", "delete", "-addr", admin, "-policy", "api", "-key", "x-api-key:k1"); code != 0 || !strings.Contains(out, "deleted") {
		t.Fatalf("override delete: exit %d %s%s", code, out, errOut)
	}
	if code, out, _ = cli("override", "list", "-addr", admin); code != 0 || !strings.Contains(out, "no runtime overrides") {
		t.Fatalf("override list after the delete: exit %d\n%s", code, out)
	}
	// Back under the file's limits: the key's old state, spent.
	if got := allowed(1); got != 0 {
		t.Fatalf("after the delete: %d of 1 passed, want 0", got)
	}
}
