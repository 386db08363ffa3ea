package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/daemon"
	"github.com/floodgate-go/floodgate/testkit"
)

// TestValidateAgreesWithServe: for every example configuration and
// hundreds of mutations of them (a line deleted or doubled, a value
// replaced by one that a hurried operator or an attacker might write),
// `floodgate validate` accepts exactly the files `floodgate serve` starts
// with, and every refusal names a line of the file.
func TestValidateAgreesWithServe(t *testing.T) {
	if testing.Short() {
		t.Skip("a long test; make test runs it")
	}
	t.Setenv("REDIS_PASSWORD", "secret")
	t.Setenv("ADMIN_TOKEN", "token")
	dir := t.TempDir()
	c := testkit.WriteCert(t, dir, "server", 1)
	cert, key := c.CertFile, c.KeyFile
	if err := os.MkdirAll(filepath.Join(dir, "envoy"), 0o755); err != nil {
		t.Fatal(err)
	}
	envoy, err := os.ReadFile("../../examples/envoy/ratelimit-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "envoy", "ratelimit-config.yaml"), envoy, 0o644); err != nil {
		t.Fatal(err)
	}
	sources, _ := filepath.Glob("../../examples/config/*.yaml")
	if len(sources) == 0 {
		t.Fatal("no example configurations")
	}
	listen := regexp.MustCompile(`(?m)^(\s*listen:)\s*\S+`)
	var corpus []string
	for _, src := range append(sources, "default") {
		var b []byte
		if src == "default" {
			b = config.DefaultYAML()
		} else if b, err = os.ReadFile(src); err != nil {
			t.Fatal(err)
		}
		// Every listener on a free loopback port, the TLS files real.
		text := listen.ReplaceAllString(string(b), "${1} 127.0.0.1:0")
		if !strings.Contains(text, "\nadmin:") {
			text += "\nadmin: {listen: 127.0.0.1:0}\n"
		}
		text = strings.NewReplacer("/etc/floodgate/server.crt", cert, "/etc/floodgate/server.key", key).Replace(text)
		corpus = append(corpus, mutations(text)...)
	}

	var accepted, refused int
	cfgDir := filepath.Join(dir, "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, text := range corpus {
		path := filepath.Join(cfgDir, fmt.Sprintf("m%04d.yaml", i))
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if c, err := config.Load(path); err == nil && !onFreePorts(c) {
			// A listener left at its default names a fixed port that
			// another process on the machine may hold: not a verdict of
			// the file.
			continue
		}
		_, _, verr := checkFile(path)
		serr := serveOnce(path)
		switch {
		case (verr == nil) != (serr == nil):
			t.Errorf("validate and serve disagree on\n%s\nvalidate: %v\nserve: %v", text, verr, serr)
		case verr == nil:
			accepted++
		default:
			refused++
			var errs config.Errors
			if !errors.As(verr, &errs) {
				t.Errorf("validate refused without positions: %v\n%s", verr, text)
				continue
			}
			for _, e := range errs {
				if e.Pos.Line == 0 {
					t.Errorf("an error without a line: %v\n%s", e, text)
				}
			}
		}
	}
	t.Logf("%d files: %d accepted, %d refused by both", len(corpus), accepted, refused)
	if accepted < 50 || refused < 50 {
		t.Fatalf("a corpus of %d accepted and %d refused files tells little; mutate more", accepted, refused)
	}
}

// onFreePorts reports whether every listener of c asks for a free port.
func onFreePorts(c *config.Config) bool {
	var addrs []string
	if c.Proxy != nil {
		addrs = append(addrs, c.Proxy.Listen)
	}
	if c.Check != nil {
		addrs = append(addrs, c.Check.Listen)
	}
	if c.Envoy != nil {
		addrs = append(addrs, c.Envoy.Listen)
	}
	if c.Postgres != nil {
		addrs = append(addrs, c.Postgres.Listen)
	}
	if c.Admin != nil && c.Admin.Listen != "" {
		addrs = append(addrs, c.Admin.Listen)
	}
	for _, a := range addrs {
		if !strings.HasSuffix(a, ":0") {
			return false
		}
	}
	return true
}

// serveOnce does what serve does with the file at path: load, build, bind
// every listener, then shut down.
func serveOnce(path string) error {
	cfg, err := config.Load(path)
	if err != nil {
		return err
	}
	d, err := daemon.New(cfg, daemon.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	if err := d.Start(); err != nil {
		d.Close()
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return d.Shutdown(ctx)
}

// mutations returns text and its mutations: each line deleted, each line
// doubled (a field set twice), and each value replaced by each of a few
// values that are wrong in different ways.
func mutations(text string) []string {
	out := []string{text}
	lines := strings.Split(text, "\n")
	join := func(ls []string) string { return strings.Join(ls, "\n") }
	value := regexp.MustCompile(`^(\s*-?\s*[A-Za-z_]+:\s+)([^#\s{\[][^#]*?)\s*(#.*)?$`)
	bad := []string{"", "0", "-1", "fe80::1%eth0", "64:ff9b::/96", "10.1.2.3/8", "/{", "x", "ftp://h", "1.5/s", "600000000/s", "sliding_log", "fail_open"}
	for i, l := range lines {
		if strings.TrimSpace(l) == "" || strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		del := append(append([]string(nil), lines[:i]...), lines[i+1:]...)
		out = append(out, join(del))
		dup := append(append(append([]string(nil), lines[:i+1]...), l), lines[i+1:]...)
		out = append(out, join(dup))
		if m := value.FindStringSubmatch(l); m != nil {
			for _, v := range bad {
				ls := append([]string(nil), lines...)
				ls[i] = m[1] + v
				out = append(out, join(ls))
			}
		}
	}
	return out
}

// TestValidateForms: validate takes its file as an argument, as -config or
// on standard input, and -h is help, not an error.
func TestValidateForms(t *testing.T) {
	good := "policies: {api: {rate: 1/s}}\ncheck: {listen: 127.0.0.1:0}\n"
	file := filepath.Join(t.TempDir(), "f.yaml")
	os.WriteFile(file, []byte(good), 0o644)
	for _, args := range [][]string{{"validate", file}, {"validate", "-config", file}} {
		var out, errOut strings.Builder
		if code := run(args, &out, &errOut); code != 0 || !strings.Contains(out.String(), "ok") {
			t.Errorf("%v: exit %d %s%s", args, code, out.String(), errOut.String())
		}
	}
	var out, errOut strings.Builder
	if code := run([]string{"validate", "-h"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "floodgate validate [-config] FILE") {
		t.Errorf("validate -h: exit %d %q", code, out.String())
	}
	cmd := exec.Command(binary, "validate", "-")
	cmd.Stdin = strings.NewReader("policies: {api: {rate: fast}}\ncheck: {}\n")
	b, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(b), "(stdin):1:") || !strings.Contains(string(b), "policies.api.rate") {
		t.Errorf("validate - with a bad file on stdin: %v %s", err, b)
	}
}

// TestBannerTriesALimitedRoute: the banner's try: line sends enough
// requests to the first route that has limits and refuses (not a shadow
// route) to reach its 429: two more than its smallest capacity.
func TestBannerTriesALimitedRoute(t *testing.T) {
	c, err := config.Parse("f.yaml", []byte(`
policies: {login: {rate: 5/min}, big: {rate: 100/min}}
proxy:
  upstream: demo
  routes:
    - {name: health, match: {path: /healthz}}
    - {name: trial, match: {path: /trial}, shadow: true, limits: [{policy: login}]}
    - {name: login, match: {path: "/users/{id}/login", methods: [POST]}, limits: [{policy: login}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	got := tryLine(c, "localhost:8080")
	if !strings.Contains(got, "$(seq 7)") || !strings.Contains(got, "-X POST") || !strings.Contains(got, "http://localhost:8080/users/1/login") || !strings.Contains(got, `route "login"`) {
		t.Errorf("try line %q", got)
	}
	c.Proxy.Routes = c.Proxy.Routes[:2]
	if got := tryLine(c, "localhost:8080"); got != "" {
		t.Errorf("with no limited route: %q", got)
	}
}

// TestCheckNeedsAKey: floodgate check without -key is a usage error, not a
// decision for the empty key.
func TestCheckNeedsAKey(t *testing.T) {
	var out, errOut strings.Builder
	if code := run([]string{"check", "-policy", "api"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "-key") {
		t.Errorf("check without -key: exit %d %q", code, errOut.String())
	}
}

// TestValidateWarnsOfUnreachableRedis: a configuration whose Redis cannot
// be reached is valid (serve starts with it and decides by its failure
// mode), so validate exits 0, but it says so on standard error; with Redis
// up it says nothing.
func TestValidateWarnsOfUnreachableRedis(t *testing.T) {
	up := testkit.Redis(t)
	for _, tc := range []struct {
		addr, warn string
	}{
		{testkit.RefusingAddr(t), "cannot be reached"},
		{up.Addr, ""},
	} {
		file := filepath.Join(t.TempDir(), "f.yaml")
		os.WriteFile(file, []byte(fmt.Sprintf("storage: {engine: redis, redis: {addrs: [%q]}, failure: {mode: local_fallback}}\npolicies: {api: {rate: 1/s}}\ncheck: {listen: 127.0.0.1:0}\nadmin: {listen: \"\"}\n", tc.addr)), 0o644)
		var out, errOut strings.Builder
		code := run([]string{"validate", file}, &out, &errOut)
		if code != 0 || !strings.Contains(out.String(), "ok") {
			t.Fatalf("Redis at %s: exit %d %s%s, want 0 and ok", tc.addr, code, out.String(), errOut.String())
		}
		switch {
		case tc.warn == "" && errOut.Len() > 0:
			t.Errorf("Redis up: stderr %q, want nothing", errOut.String())
		case tc.warn != "" && (!strings.Contains(errOut.String(), file+": warning: storage.redis: "+tc.addr+" "+tc.warn) ||
			!strings.Contains(errOut.String(), "limiting per instance until Redis is back")):
			t.Errorf("Redis refusing: stderr %q, want a warning that it %s", errOut.String(), tc.warn)
		}
	}
}
