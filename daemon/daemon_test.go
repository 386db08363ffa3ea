package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"testing"

	"github.com/floodgate-go/floodgate/config"
)

func mustParse(t testing.TB, yaml string) *config.Config {
	t.Helper()
	c, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func reloadConf(i int) string {
	return fmt.Sprintf(`
policies:
  api: {rate: %d/min}
  p%d: {rate: 5/s}
  tiered: {rate: 10/min, tiers: {pro: {rate: 100/min}}}
proxy:
  listen: 127.0.0.1:0
  upstream: demo
  user_trusted_from: [127.0.0.1/32]
  routes:
    - name: all
      limits: [{policy: api, key: ip}, {policy: tiered, key: "header:X-Key", tier_header: X-Plan}]
check: {listen: 127.0.0.1:0}
admin: {listen: ""}
`, 100+i%7, i)
}

// TestReloadsKeepMemoryFlat: a daemon that reloads its configuration for
// weeks must not grow. 1,000 reloads, each with a policy of a new name,
// serving a request after each, leave the heap where a few reloads left it.
func TestReloadsKeepMemoryFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("a long test; make test runs it")
	}
	d, err := New(mustParse(t, reloadConf(0)), Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	defer d.Shutdown(context.Background())
	url := "http://" + d.Addrs().Proxy.String() + "/"
	serve := func() {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("X-Key", "k")
		req.Header.Set("X-Plan", "pro")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	heap := func() uint64 {
		for range 3 {
			runtime.GC()
		}
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	reload := func(from, to int) {
		for i := from; i < to; i++ {
			if err := d.Apply(mustParse(t, reloadConf(i))); err != nil {
				t.Fatal(err)
			}
			serve()
		}
	}
	reload(1, 50)
	before := heap()
	reload(50, 1050)
	after := heap()
	t.Logf("heap after 50 reloads %d KiB, after 1,050 reloads %d KiB", before>>10, after>>10)
	// Each reload builds about a hundred kilobytes of limiters, routes and
	// middleware; a leak of one reload's worth per reload would add
	// megabytes. Allow 1 MiB of noise.
	if after > before+1<<20 {
		t.Fatalf("the heap grew from %d KiB to %d KiB over 1,000 reloads", before>>10, after>>10)
	}
}
