package daemon

import (
	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/envoyrules"
	"github.com/floodgate-go/floodgate/testkit"

	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Generous: the machine is shared; the watcher's debounce is 100 ms.
const eventTimeout = 20 * time.Second

func watchConfig(rate string) []byte {
	return []byte("policies:\n  api: {rate: " + rate + "}\nproxy: {upstream: demo, routes: [{limits: [{policy: api}]}]}\n")
}

type reload struct {
	c   *config.Config
	err error
}

func startWatch(t *testing.T, path string) (*Watcher, chan reload) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan reload, 16)
	w, err := Watch(ctx, path, func(c *config.Config, err error) { ch <- reload{c, err} })
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		<-w.Done()
	})
	return w, ch
}

func next(t *testing.T, ch chan reload) reload {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(eventTimeout):
		t.Fatal("no reload within the timeout")
		return reload{}
	}
}

// nextGood waits for the next valid configuration. An in-place write is a
// truncate then a write; on a loaded machine the watcher may read between
// the two and report the empty file ("nothing to serve"), which is right
// for what was on disk, so such reports are skipped.
func nextGood(t *testing.T, ch chan reload) reload {
	t.Helper()
	for {
		r := next(t, ch)
		if r.err != nil && strings.Contains(r.err.Error(), "nothing to serve") {
			continue
		}
		return r
	}
}

func rateOf(t *testing.T, r reload) string {
	t.Helper()
	if r.err != nil {
		t.Fatalf("reload error: %v", r.err)
	}
	return r.c.Policies["api"].Rate.String()
}

// replace saves data as editors do: a new file renamed over the old one.
func replace(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".swp")
	write(t, tmp, data)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestWatchWriteAndRename(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "floodgate.yaml")
	write(t, path, watchConfig("1/s"))
	w, ch := startWatch(t, path)
	if got := w.Config().Policies["api"].Rate.String(); got != "1/s" {
		t.Fatalf("initial rate %s", got)
	}
	first := w.Config().Digest

	// In-place write.
	write(t, path, watchConfig("2/s"))
	r2 := nextGood(t, ch)
	if got := rateOf(t, r2); got != "2/s" {
		t.Fatalf("after write: %s", got)
	}
	if len(r2.c.Digest) != 64 || r2.c.Digest == first {
		t.Errorf("digest %q after a change, was %q", r2.c.Digest, first)
	}

	// The same bytes again, then new ones: the first must not call back,
	// so the next call carries the new content.
	replace(t, path, watchConfig("2/s"))
	replace(t, path, watchConfig("3/s"))
	if got := rateOf(t, next(t, ch)); got != "3/s" {
		t.Fatalf("after rename: %s", got)
	}

	// A broken file is reported and the last good config stays current.
	replace(t, path, []byte("policies:\n  api: {rate: 0/s}\nproxy: {upstream: demo}\n"))
	r := next(t, ch)
	if r.err == nil || !strings.Contains(r.err.Error(), "policies.api.rate") {
		t.Fatalf("want an error at policies.api.rate, got %v", r.err)
	}
	if got := w.Config().Policies["api"].Rate.String(); got != "3/s" {
		t.Errorf("current after a bad file = %s, want 3/s", got)
	}

	// Reload (SIGHUP) with unchanged bytes says so (neither a
	// configuration nor an error); a change made and then reloaded calls
	// back with it.
	w.Reload()
	if r := next(t, ch); r.c != nil || r.err != nil {
		t.Fatalf("a reload of unchanged bytes: %+v", r)
	}
	replace(t, path, watchConfig("4/s"))
	w.Reload()
	if got := rateOf(t, next(t, ch)); got != "4/s" {
		t.Fatalf("after reload: %s", got)
	}
}

// TestWatchConfigMapSwap reproduces how Kubernetes updates a mounted
// ConfigMap: the file is a symlink to ..data/floodgate.yaml, and ..data a
// symlink to a timestamped directory that is replaced by renaming a new
// symlink over it.
func TestWatchConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	version := func(name, rate string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, name, "floodgate.yaml"), watchConfig(rate))
	}
	version("..2026_12_01_08_00_00.1", "10/min")
	if err := os.Symlink("..2026_12_01_08_00_00.1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "floodgate.yaml")
	if err := os.Symlink("..data/floodgate.yaml", path); err != nil {
		t.Fatal(err)
	}
	w, ch := startWatch(t, path)
	if got := w.Config().Policies["api"].Rate.String(); got != "10/min" {
		t.Fatalf("initial %s", got)
	}

	version("..2026_12_01_08_05_00.2", "20/min")
	if err := os.Symlink("..2026_12_01_08_05_00.2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "..2026_12_01_08_00_00.1")); err != nil {
		t.Fatal(err)
	}
	if got := rateOf(t, next(t, ch)); got != "20/min" {
		t.Fatalf("after the swap: %s", got)
	}
}

// TestWatchEnvoyFile: a change to a referenced Envoy configuration, in
// another directory, reloads too.
func TestWatchEnvoyFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "envoy"), 0o755); err != nil {
		t.Fatal(err)
	}
	rules := func(n string) []byte {
		return []byte("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: " + n + "}\n")
	}
	write(t, filepath.Join(dir, "envoy", "rules.yaml"), rules("10"))
	path := filepath.Join(dir, "floodgate.yaml")
	write(t, path, []byte("envoy: {ratelimit_config: [envoy/rules.yaml]}\n"))
	w, ch := startWatch(t, path)
	match := func(c *config.Config) int64 {
		r := c.Envoy.Rules.Match("edge", []envoyrules.Entry{{Key: "remote_address", Value: "10.0.0.1"}})
		if r == nil {
			t.Fatal("no rule")
		}
		return r.Limits[0].Rate
	}
	if got := match(w.Config()); got != 10 {
		t.Fatalf("initial %d", got)
	}
	replace(t, filepath.Join(dir, "envoy", "rules.yaml"), rules("20"))
	r := next(t, ch)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if got := match(r.c); got != 20 {
		t.Fatalf("after the change %d", got)
	}
}

func TestWatchInitialError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	write(t, path, []byte("nonsense: 1\n"))
	if _, err := Watch(context.Background(), path, func(*config.Config, error) {}); err == nil || !strings.Contains(err.Error(), "nonsense") {
		t.Fatalf("err = %v", err)
	}
}

// TestWatchSymlinkTarget: the configured path is a symlink to a file in
// another directory, which is edited in place.
func TestWatchSymlinkTarget(t *testing.T) {
	target := filepath.Join(t.TempDir(), "real.yaml")
	write(t, target, watchConfig("1/h"))
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	_, ch := startWatch(t, path)
	replace(t, target, watchConfig("2/h"))
	if got := rateOf(t, nextGood(t, ch)); got != "2/h" {
		t.Fatalf("after editing the target: %s", got)
	}
}

// A file written without pause in the configuration's directory (a log)
// neither puts a change off for ever nor makes the watcher parse the
// configuration on each write: the checks it causes find the bytes
// unchanged and parse nothing, and a change to the configuration is still
// applied.
func TestWatchBusyNeighbour(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "floodgate.yaml")
	write(t, path, watchConfig("1/s"))
	_, ch := startWatch(t, path)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		f, err := os.Create(filepath.Join(dir, "access.log"))
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		tick := time.NewTicker(5 * time.Millisecond) // far more often than the debounce
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				f.WriteString("GET / 200\n")
			}
		}
	}()
	defer func() { close(stop); <-done }()
	before := unchangedChecks.Load()
	testkit.Eventually(t, eventTimeout, "checks of the unchanged configuration while the log is written", func() bool {
		return unchangedChecks.Load() >= before+2
	})
	select {
	case r := <-ch:
		t.Fatalf("a log written beside the configuration called back: %+v", r)
	default:
	}
	replace(t, path, watchConfig("2/s"))
	if got := rateOf(t, next(t, ch)); got != "2/s" {
		t.Fatalf("after a change beside a busy log: %s", got)
	}
}
