package daemon

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/status"
	"github.com/floodgate-go/floodgate/testkit"
)

// TestStatusReloads: the page's configuration panel names the version in
// service and the last reload's result, with the file and line of a
// rejected file; policies removed by a reload leave the page.
func TestStatusReloads(t *testing.T) {
	first := mustParse(t, `
policies:
  api: {rate: 10/s}
  old: {rate: 1/s}
check: {listen: 127.0.0.1:0}
admin: {listen: ""}
`)
	d, err := New(first, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	snap := d.status.st.Snapshot()
	if snap.Config.Version != first.Digest || snap.Config.LastReload == nil || !snap.Config.LastReload.OK || len(snap.Policies) != 2 {
		t.Fatalf("at start: %+v, %d policies", snap.Config, len(snap.Policies))
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("policies:\n  api: {rate: 10/s}\n  broken: {rate: fast}\ncheck: {listen: 127.0.0.1:0}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, lerr := config.Load(bad)
	if lerr == nil {
		t.Fatal("the bad file loaded")
	}
	d.ReloadFailed(lerr)
	snap = d.status.st.Snapshot()
	if r := snap.Config.LastReload; r == nil || r.OK || !strings.Contains(r.Error, "bad.yaml:3:") || snap.Config.Version != first.Digest {
		t.Fatalf("after a rejected file: %+v", snap.Config)
	}

	second := mustParse(t, `
policies:
  api: {rate: 20/s}
check: {listen: 127.0.0.1:0}
admin: {listen: ""}
`)
	if err := d.Apply(second); err != nil {
		t.Fatal(err)
	}
	snap = d.status.st.Snapshot()
	if r := snap.Config.LastReload; r == nil || !r.OK || snap.Config.Version != second.Digest {
		t.Fatalf("after a good reload: %+v", snap.Config)
	}
	if len(snap.Policies) != 1 || snap.Policies[0].Name != "api" || snap.Policies[0].Limits[0] != "20/s" {
		t.Fatalf("policies after the reload: %+v", snap.Policies)
	}
}

// TestStatusEngineHealth: with Redis, the engine panel names the failure
// mode, shows the round trip of its pings, and the breaker opening when
// Redis dies and closing when it is back, when Redis's error is the
// present no more.
func TestStatusEngineHealth(t *testing.T) {
	r := testkit.Redis(t)
	cfg := mustParse(t, `
storage:
  engine: redis
  redis: {addrs: [`+r.Addr+`]}
  failure: {mode: fail_open, timeout: 100ms, breaker: {min_calls: 1, backoff: 50ms, max_backoff: 100ms}}
policies:
  api: {rate: 100/s}
check: {listen: 127.0.0.1:0}
admin: {listen: ""}
`)
	d, err := New(cfg, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Shutdown(context.Background())
	ctx := context.Background()
	lim := d.cur.Load().limiters["api"]
	engine := func() *status.Engine {
		t.Helper()
		d.status.watch(ctx)
		return d.status.st.Snapshot().Engine
	}
	e := engine()
	if e.Name != "redis" || e.Failure != "fail-open" || e.Breaker != "closed" || e.RoundTrip == nil || e.RoundTrip.Samples != 1 || e.RoundTrip.Failed != 0 || e.RoundTrip.P99Ms <= 0 {
		t.Fatalf("healthy engine: %+v %+v", e, e.RoundTrip)
	}

	r.Kill()
	if res, err := floodgate.Allow(ctx, lim, "k"); err != nil || res.Source != "fail-open" {
		t.Fatalf("with Redis down: %+v %v, want fail-open", res, err)
	}
	e = engine()
	if e.Breaker != "open" || e.RoundTrip.Failed != 1 || e.RoundTrip.Error == "" ||
		len(e.Transitions) != 1 || e.Transitions[0].From != "closed" || e.Transitions[0].To != "open" {
		t.Fatalf("Redis down: %+v %+v", e, e.RoundTrip)
	}

	r.Restart()
	// The breaker lets a probe through once its back-off has passed.
	deadline := time.Now().Add(10 * time.Second)
	for d.engine.guard.State().String() != "closed" {
		if time.Now().After(deadline) {
			t.Fatal("the breaker did not close after Redis came back")
		}
		floodgate.Allow(ctx, lim, "k")
		time.Sleep(20 * time.Millisecond) // the back-off runs on the real clock
	}
	e = engine()
	last := e.Transitions[len(e.Transitions)-1]
	if e.Breaker != "closed" || last.To != "closed" {
		t.Fatalf("Redis back: %+v", e.Transitions)
	}
	// Redis answers again: its error is history, not the present.
	if rt := e.RoundTrip; rt.Error != "" || rt.LastError == "" || rt.LastErrorAt == nil || rt.Failed == 0 {
		t.Fatalf("Redis back, round trip: %+v", rt)
	}
}
