package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/daemon"
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
	cert, key := writeCert(t, dir)
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
		_, verr := checkFile(path)
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

// writeCert writes a self-signed certificate for localhost and its key.
func writeCert(t *testing.T, dir string) (certPath, keyPath string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath = filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certPath, keyPath
}
