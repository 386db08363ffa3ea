package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/status"
)

// TestManyPoliciesMemory: an Envoy file of 10,000 descriptors builds a
// daemon (what serve and validate build) whose live heap stays small: a
// policy's status record is made on its first decision, not up front
// (it was 2 × 53 KB per policy, a gigabyte for this file). A reload of the
// same file does not double it. The page still shows the history of a
// policy that decided, and the policies that never did with empty history.
func TestManyPoliciesMemory(t *testing.T) {
	const descriptors = 10000
	rl := filepath.Join(t.TempDir(), "rl.yaml")
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	for i := range descriptors {
		fmt.Fprintf(&b, "  - key: k\n    value: v%d\n    rate_limit: {unit: second, requests_per_unit: %d}\n", i, i+1)
	}
	if err := os.WriteFile(rl, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	file := fmt.Sprintf("envoy: {listen: 127.0.0.1:0, ratelimit_config: [%s]}\n", rl)
	heap := func() uint64 {
		for range 3 {
			runtime.GC()
		}
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	// The bound: envoyproxy/ratelimit serves this file in about 57 MiB of
	// resident memory; the daemon's live heap, configuration included,
	// stays well under that.
	const bound = 40 << 20
	before := heap()
	d, err := New(mustParse(t, file), Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	built := heap()
	if err := d.Apply(mustParse(t, file)); err != nil {
		t.Fatal(err)
	}
	reloaded := heap()
	t.Logf("live heap of %d policies: %d KiB built, %d KiB after a reload", d.Policies(), (built-before)>>10, (reloaded-before)>>10)
	if d.Policies() != descriptors {
		t.Fatalf("%d policies, want %d", d.Policies(), descriptors)
	}
	if built-before > bound || reloaded-before > bound {
		t.Fatalf("live heap %d MiB built, %d MiB reloaded; bound %d MiB", (built-before)>>20, (reloaded-before)>>20, bound>>20)
	}

	const busy, idle = "d.k_v7", "d.k_v8"
	lim := d.cur.Load().limiters[busy]
	if lim == nil || d.cur.Load().limiters[idle] == nil {
		t.Fatalf("no policies %q, %q", busy, idle)
	}
	for range 10 {
		floodgate.Allow(context.Background(), lim, "k=v7")
	}
	d.status.st.Tick()
	rec := httptest.NewRecorder()
	d.status.st.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/status", nil))
	var snap status.Snapshot
	if err := json.Unmarshal(rec.Body.Bytes(), &snap); err != nil {
		t.Fatalf("GET /v1/status: %d %v", rec.Code, err)
	}
	if len(snap.Policies) != descriptors {
		t.Fatalf("the page shows %d policies, want %d", len(snap.Policies), descriptors)
	}
	byName := map[string]status.PolicyStatus{}
	for _, p := range snap.Policies {
		byName[p.Name] = p
	}
	p := byName[busy]
	// 8/s: 8 allowed and 2 denied, unless a second began among the ten.
	if len(p.Points) != 1 || p.Points[0].Allowed+p.Points[0].Denied != 10 || p.Points[0].Allowed < 8 || len(p.TopConsuming) != 1 || p.Total != p.Points[0] {
		t.Errorf("policy with traffic: points %+v, total %+v, top %+v %+v", p.Points, p.Total, p.TopConsuming, p.TopLimited)
	}
	p = byName[idle]
	if p.Points == nil || len(p.Points) != 0 || p.Total != (status.Point{}) || p.TopConsuming == nil || len(p.TopConsuming)+len(p.TopLimited) != 0 || !strings.HasPrefix(p.Limits[0], "9/s") {
		t.Errorf("policy without traffic: %+v", p)
	}
}
