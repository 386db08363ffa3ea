package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// The image's files, and nothing else: no shell, no other program.
var wantFiles = []string{
	"etc/", "etc/floodgate/", "etc/floodgate/floodgate.yaml", "etc/group", "etc/passwd",
	"tmp/", "usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/floodgate",
}

// TestImage builds the image twice, reads it back from its OCI layout,
// checks its configuration and files, and runs the binary from its layer
// with the configuration from its layer until the demo limit answers 429.
func TestImage(t *testing.T) {
	dir := t.TempDir()
	var builds []result
	for i := range 2 {
		r, err := build(options{
			root: "../..", out: filepath.Join(dir, fmt.Sprint("layout", i)), tag: "test",
			arch: runtime.GOARCH, archive: filepath.Join(dir, fmt.Sprint("archive", i, ".tar")),
		})
		if err != nil {
			t.Fatal(err)
		}
		builds = append(builds, r)
	}
	if builds[0].digest != builds[1].digest {
		t.Fatalf("two builds of the same tree: manifests %s and %s", builds[0].digest, builds[1].digest)
	}
	for _, f := range []string{"layout%d/index.json", "archive%d.tar"} {
		a, b := read(t, filepath.Join(dir, fmt.Sprintf(f, 0))), read(t, filepath.Join(dir, fmt.Sprintf(f, 1)))
		if !bytes.Equal(a, b) {
			t.Errorf("two builds of the same tree: %s differs", fmt.Sprintf(f, 0))
		}
	}
	created := commitTime(t)

	// The layout names one image, for this platform, by floodgate:TAG.
	idx, err := layout.ImageIndexFromPath(filepath.Join(dir, "layout0"))
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("the layout holds %d manifests, want 1", len(im.Manifests))
	}
	desc := im.Manifests[0]
	if desc.Digest != builds[0].digest || desc.Annotations["org.opencontainers.image.ref.name"] != "floodgate:test" ||
		desc.Platform == nil || desc.Platform.OS != "linux" || desc.Platform.Architecture != runtime.GOARCH {
		t.Errorf("index entry: %+v, want %s named floodgate:test for linux/%s", desc, builds[0].digest, runtime.GOARCH)
	}
	img, err := idx.Image(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}

	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532", c.User)
	}
	if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/floodgate"}) || !slices.Equal(c.Cmd, []string{"serve", "/etc/floodgate/floodgate.yaml"}) {
		t.Errorf("entrypoint %q cmd %q", c.Entrypoint, c.Cmd)
	}
	if got := slices.Sorted(maps.Keys(c.ExposedPorts)); !slices.Equal(got, []string{"8080/tcp", "8081/tcp", "9090/tcp"}) {
		t.Errorf("exposed ports %q", got)
	}
	// The healthcheck runs floodgate health on the admin port, with time
	// for the command's own 2s timeout; serveImage runs it.
	hc := c.Healthcheck
	wantTest := []string{"CMD", "/usr/local/bin/floodgate", "health", "-addr", "http://127.0.0.1:9090"}
	if hc == nil || !slices.Equal(hc.Test, wantTest) || hc.Interval <= 0 || hc.Timeout <= 2*time.Second || hc.Retries <= 0 {
		t.Fatalf("healthcheck %+v, want %q every interval, timing out after more than 2s, with retries", hc, wantTest)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH || !cf.Created.Time.Equal(created) {
		t.Errorf("config: %s/%s created %v, want linux/%s created at the commit, %v", cf.OS, cf.Architecture, cf.Created, runtime.GOARCH, created)
	}
	version := builds[0].version
	wantLabels := map[string]string{
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.source":   "https://github.com/floodgate-go/floodgate",
		"org.opencontainers.image.created":  created.Format(time.RFC3339),
		"org.opencontainers.image.revision": gitOut(t, "rev-parse", "HEAD"),
	}
	for k, v := range wantLabels {
		if c.Labels[k] != v || v == "" {
			t.Errorf("label %s = %q, want %q", k, c.Labels[k], v)
		}
	}

	// One layer: the files above, owned by root, stamped with the commit's
	// time; the binary static.
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	files := untar(t, layers[0], created)
	if got := slices.Collect(maps.Keys(files)); !sameSet(got, wantFiles) {
		t.Errorf("the layer holds %q, want exactly %q", slices.Sorted(slices.Values(got)), wantFiles)
	}
	if p := string(files["etc/passwd"]); !strings.Contains(p, "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot at 65532:\n%s", p)
	}
	bin := filepath.Join(dir, "floodgate")
	if err := os.WriteFile(bin, files["usr/local/bin/floodgate"], 0o755); err != nil {
		t.Fatal(err)
	}
	checkStatic(t, bin)
	config := files["etc/floodgate/floodgate.yaml"]

	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "floodgate "+version+" ") {
		t.Errorf("floodgate version: %v %q, want floodgate %s …", err, out, version)
	}

	// The configuration listens on the exposed ports, on every address.
	listen := regexp.MustCompile(`(?m)^  listen: "([^"]*)"`)
	var addrs []string
	for _, m := range listen.FindAllStringSubmatch(string(config), -1) {
		addrs = append(addrs, m[1])
	}
	if !slices.Equal(addrs, []string{":8080", ":8081", ":9090"}) {
		t.Errorf("the image's configuration listens on %q, want :8080 :8081 :9090 (the exposed ports)", addrs)
	}
	file := filepath.Join(dir, "floodgate.yaml")
	if err := os.WriteFile(file, listen.ReplaceAll(config, []byte(`  listen: "127.0.0.1:0"`)), 0o644); err != nil {
		t.Fatal(err)
	}
	// As it is in the image, the file is valid with the tokens a listener
	// off loopback needs, and refused without them, naming what is missing.
	original := filepath.Join(dir, "image.yaml")
	if err := os.WriteFile(original, config, 0o644); err != nil {
		t.Fatal(err)
	}
	validate := exec.Command(bin, "validate", original)
	validate.Env = environ()
	if out, err := validate.CombinedOutput(); err == nil || !strings.Contains(string(out), "FLOODGATE_CHECK_TOKEN") {
		t.Errorf("floodgate validate without FLOODGATE_CHECK_TOKEN: %v\n%s", err, out)
	}
	validate = exec.Command(bin, "validate", original)
	validate.Env = environ("FLOODGATE_CHECK_TOKEN=c", "FLOODGATE_ADMIN_TOKEN=a")
	if out, err := validate.CombinedOutput(); err != nil {
		t.Errorf("floodgate validate with the tokens: %v\n%s", err, out)
	}
	serveImage(t, bin, file, hc.Test[2:])
}

// serveImage runs floodgate serve file, runs the healthcheck's arguments
// (health) on it, its -addr moved to the served admin listener, and gets a
// 429 from its proxy and its check API.
func serveImage(t *testing.T, bin, file string, health []string) {
	cmd := exec.Command(bin, "serve", file)
	cmd.Env = environ("FLOODGATE_CHECK_TOKEN=check-secret", "FLOODGATE_ADMIN_TOKEN=admin-secret")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		logs  strings.Builder
		addrs = map[string]string{}
		bound = make(chan struct{})
	)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line struct{ Msg, Listener, Addr string }
			_ = json.Unmarshal(sc.Bytes(), &line)
			mu.Lock()
			logs.WriteString(sc.Text() + "\n")
			if line.Msg == "listening" {
				addrs[line.Listener] = line.Addr
				if len(addrs) == 3 {
					close(bound)
				}
			}
			mu.Unlock()
		}
	}()
	logged := func() string { mu.Lock(); defer mu.Unlock(); return logs.String() }
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("floodgate serve after SIGTERM: %v\n%s", err, logged())
		}
	}()
	select {
	case <-bound:
	case <-time.After(30 * time.Second):
		t.Fatalf("floodgate serve did not bind its three listeners:\n%s", logged())
	}
	mu.Lock()
	proxy, check, admin := addrs["proxy"], addrs["check"], addrs["admin"]
	mu.Unlock()

	for _, probe := range []string{"/healthz", "/readyz"} {
		if code := do(t, "GET", "http://"+admin+probe, "", ""); code != 200 {
			t.Errorf("%s: %d", probe, code)
		}
	}
	i := slices.Index(health, "-addr")
	if i < 0 || i+1 >= len(health) {
		t.Fatalf("the healthcheck %q gives no -addr", health)
	}
	health = slices.Clone(health)
	health[i+1] = "http://" + admin
	for _, args := range [][]string{health, append(health, "-ready")} {
		hc := exec.Command(bin, args...)
		hc.Env = environ() // the probes need no token
		if out, err := hc.CombinedOutput(); err != nil {
			t.Errorf("floodgate %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	if code := do(t, "GET", "http://"+admin+"/v1/config", "", ""); code != http.StatusUnauthorized {
		t.Errorf("/v1/config without the admin token: %d, want 401", code)
	}
	if code := do(t, "GET", "http://"+admin+"/v1/config", "admin-secret", ""); code != 200 {
		t.Errorf("/v1/config with the admin token: %d, want 200", code)
	}
	untilDenied(t, "the proxy", func() int { return do(t, "GET", "http://"+proxy+"/", "", "") })
	body := `{"policy": "default", "key": "image-test"}`
	if code := do(t, "POST", "http://"+check+"/v1/check", "", body); code != http.StatusUnauthorized {
		t.Errorf("the check API without its token: %d, want 401", code)
	}
	untilDenied(t, "the check API", func() int { return do(t, "POST", "http://"+check+"/v1/check", "check-secret", body) })
}

// untilDenied calls call until it answers 429: the demo limit's burst is 5.
func untilDenied(t *testing.T, what string, call func() int) {
	t.Helper()
	var codes []int
	for range 10 {
		codes = append(codes, call())
		if codes[len(codes)-1] == http.StatusTooManyRequests {
			break
		}
	}
	if codes[0] != 200 || codes[len(codes)-1] != http.StatusTooManyRequests {
		t.Errorf("%s answered %v, want 200s then 429", what, codes)
	}
}

func do(t *testing.T, method, url, token, body string) int {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// environ is this process's environment without floodgate's tokens, plus
// extra.
func environ(extra ...string) []string {
	env := slices.DeleteFunc(os.Environ(), func(s string) bool { return strings.HasPrefix(s, "FLOODGATE_") })
	return append(env, extra...)
}

// untar reads the layer's files by name, checking that each is root's and
// stamped with mtime.
func untar(t *testing.T, l v1.Layer, mtime time.Time) map[string][]byte {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(mtime) {
			t.Errorf("%s: owner %d:%d, time %v; want 0:0 at %v", h.Name, h.Uid, h.Gid, h.ModTime, mtime)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = data
	}
}

// checkStatic fails unless bin is an ELF executable with no interpreter
// and no shared libraries: it runs on an empty base.
func checkStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary is dynamically linked (%v)", p.Type)
		}
	}
}

func commitTime(t *testing.T) time.Time {
	t.Helper()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return time.Unix(n, 0).UTC()
	}
	n, err := strconv.ParseInt(gitOut(t, "log", "-1", "--format=%ct", "HEAD"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return time.Unix(n, 0).UTC()
}

func gitOut(t *testing.T, args ...string) string {
	t.Helper()
	out, err := git("../..", args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sameSet(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}
