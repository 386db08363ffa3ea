package status

import (
	"context"
	"hash/maphash"
	"runtime"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
)

func tinyLimiter(t *testing.T, name string, l floodgate.Limit) floodgate.Limiter {
	t.Helper()
	s := memstore.New(memstore.Options{})
	t.Cleanup(func() { s.Close() })
	lim, err := floodgate.New(s, floodgate.Policy{Name: name, Limits: []floodgate.Limit{l}})
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// TestStatusCountsAndWindow: decisions show in the chart points and the
// last minute, peeks do not, keys are redacted, and top keys leave the
// window after Buckets spans.
func TestStatusCountsAndWindow(t *testing.T) {
	ctx := context.Background()
	s := New(Options{Buckets: 3, Span: 2 * time.Second, Step: time.Second, History: 4})
	lim := s.Limiter(tinyLimiter(t, "api", floodgate.PerHour(3)))
	for range 5 {
		floodgate.Allow(ctx, lim, "user:1")
	}
	lim.AllowN(ctx, "user:2", 2)
	lim.AllowN(ctx, "user:1", 0) // a peek
	s.Tick()
	snap := s.Snapshot()
	p := snap.Policies[0]
	if p.Name != "api" || p.Limits[0] != "3/h" {
		t.Fatalf("policy %+v", p)
	}
	if p.LastMinute != (Point{Allowed: 4, Denied: 2}) || len(p.Points) != 1 || p.Points[0] != p.LastMinute || p.DenialRatio != 2.0/6 {
		t.Fatalf("counts: last minute %+v, points %+v, ratio %v", p.LastMinute, p.Points, p.DenialRatio)
	}
	if p.Sources["memory"] != 6 {
		t.Errorf("sources %v, want 6 decisions by memory", p.Sources)
	}
	r1 := floodgate.RedactKey("user:1")
	if len(p.TopLimited) != 1 || p.TopLimited[0].Key != r1 || p.TopLimited[0].Count != 2 || p.TopLimited[0].Recent != nil {
		t.Errorf("top limited %+v, want %s with 2", p.TopLimited, r1)
	}
	if len(p.TopConsuming) != 2 || p.TopConsuming[0].Key != r1 || p.TopConsuming[0].Count != 3 || p.TopConsuming[1].Count != 2 {
		t.Errorf("top consuming %+v", p.TopConsuming)
	}
	// The chart keeps History points; the window forgets after Buckets
	// spans (3 × 2 Ticks).
	for range 5 {
		s.Tick()
	}
	p = s.Snapshot().Policies[0]
	if len(p.Points) != 4 || len(p.TopLimited) != 0 || len(p.TopConsuming) != 0 {
		t.Errorf("after 6 ticks: %d points, top %+v %+v", len(p.Points), p.TopLimited, p.TopConsuming)
	}
	if p.Total != (Point{Allowed: 4, Denied: 2}) {
		t.Errorf("totals %+v", p.Total)
	}

	// A policy rebuilt by a reload keeps its record; one removed leaves.
	lim2 := s.Limiter(tinyLimiter(t, "api", floodgate.PerHour(3)))
	floodgate.Allow(ctx, lim2, "user:3")
	s.Limiter(tinyLimiter(t, "gone", floodgate.PerHour(3)))
	s.Retain([]string{"api"})
	snap = s.Snapshot()
	if len(snap.Policies) != 1 || snap.Policies[0].Total.Allowed != 5 {
		t.Errorf("after a reload: %+v", snap.Policies)
	}
}

// TestStatusRawKeys: with RawKeys, keys are shown as they are.
func TestStatusRawKeys(t *testing.T) {
	s := New(Options{RawKeys: true})
	lim := s.Limiter(tinyLimiter(t, "api", floodgate.PerHour(1)))
	floodgate.Allow(context.Background(), lim, "user:1")
	floodgate.Allow(context.Background(), lim, "user:1")
	if top := s.Snapshot().Policies[0].TopLimited; len(top) != 1 || top[0].Key != "user:1" {
		t.Fatalf("top limited %+v", top)
	}
}

// TestStatusRecentDecisions: once a Tick finds a key among the top
// limited, its decisions are kept with route, limit, remaining and source,
// at most RecentPerKey of them, on the page and through Recent; a key that
// is not a heavy hitter keeps none, and one that leaves the top loses its
// ring.
func TestStatusRecentDecisions(t *testing.T) {
	ctx := context.Background()
	s := New(Options{Buckets: 2, Span: time.Second, Step: time.Second, RawKeys: true})
	base := s.Limiter(tinyLimiter(t, "api", floodgate.PerHour(2)))
	lim := WithRoute(base, "login")
	for range 3 {
		floodgate.Allow(ctx, lim, "user:1")
	}
	floodgate.Allow(ctx, lim, "user:2")
	if got := s.Recent("api", "user:1"); got != nil {
		t.Fatalf("before a Tick: %+v", got)
	}
	s.Tick()
	for range RecentPerKey + 3 {
		floodgate.Allow(ctx, lim, "user:1")
	}
	floodgate.Allow(ctx, lim, "user:2")
	got := s.Recent("api", "user:1")
	if len(got) != RecentPerKey {
		t.Fatalf("%d recent decisions, want %d", len(got), RecentPerKey)
	}
	d := got[len(got)-1]
	if d.Allowed || d.Route != "login" || d.Limit != "2/h" || d.Remaining != 0 || d.Source != "memory" || d.Cost != 1 || d.At.IsZero() {
		t.Errorf("last decision %+v", d)
	}
	if r := s.Recent("api", "user:2"); r != nil {
		t.Errorf("user:2 was never denied but has %+v", r)
	}
	top := s.Snapshot().Policies[0].TopLimited
	if len(top) != 1 || len(top[0].Recent) != RecentPerKey {
		t.Errorf("the page's top limited %+v", top)
	}
	// The window forgets user:1 after Buckets spans; so do the rings.
	s.Tick()
	s.Tick()
	if r := s.Recent("api", "user:1"); r != nil {
		t.Errorf("after the window: %d decisions kept", len(r))
	}
}

// TestStatusSourcesAndOverrides: a local-fallback decision is counted
// under its own name, and the page lists the policy's overrides.
func TestStatusSourcesAndOverrides(t *testing.T) {
	s := New(Options{})
	m := memstore.New(memstore.Options{})
	t.Cleanup(func() { m.Close() })
	pl, err := floodgate.New(m, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerHour(3)},
		Overrides: map[string][]floodgate.Limit{"user:batch": {floodgate.PerSecond(50)}}})
	if err != nil {
		t.Fatal(err)
	}
	lim := s.Limiter(fixedSource{pl, floodgate.SourceLocalFallback})
	floodgate.Allow(context.Background(), lim, "user:1")
	p := s.Snapshot().Policies[0]
	if p.Sources[string(floodgate.SourceLocalFallback)] != 1 || p.Sources["other"] != 0 {
		t.Errorf("sources %v", p.Sources)
	}
	if len(p.Overrides) != 1 || p.Overrides[0].Key != "user:batch" || p.Overrides[0].Limits[0] != "50/s" {
		t.Errorf("overrides %+v", p.Overrides)
	}
}

// fixedSource answers as its limiter, with the Source src.
type fixedSource struct {
	*floodgate.PolicyLimiter
	src floodgate.Source
}

func (f fixedSource) Unwrap() floodgate.Limiter { return f.PolicyLimiter }

func (f fixedSource) AllowN(ctx context.Context, key string, cost int64) (floodgate.Result, error) {
	res, err := f.PolicyLimiter.AllowN(ctx, key, cost)
	res.Source = f.src
	return res, err
}

// TestStatusAllocatesOnUse: a policy gets its record of keys on its first
// decision, not when it is wrapped; one that never decided shows with no
// history and no keys; a Window holds counters only for the shards and
// buckets that counted, and gives them back once its buckets are empty.
func TestStatusAllocatesOnUse(t *testing.T) {
	ctx := context.Background()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	w := NewWindow(DefaultPerShard, DefaultBuckets)
	runtime.ReadMemStats(&after)
	// The Window's own struct (16 padded shards); the counters of every
	// shard and bucket were about 50 KB more.
	if n := after.TotalAlloc - before.TotalAlloc; n > 8<<10 {
		t.Errorf("an empty Window allocated %d bytes", n)
	}
	w.Add("k", 1, 0)
	sh := &w.shards[maphash.String(seed, "k")%Shards]
	for i := range w.shards {
		if s := &w.shards[i]; (s.ring != nil) != (s == sh) {
			t.Fatalf("shard %d has counters: %v", i, s.ring != nil)
		}
	}
	for range DefaultBuckets - 1 {
		w.Rotate()
		if sh.ring == nil || len(w.Top(0)) != 1 {
			t.Fatal("the key left the window early")
		}
	}
	w.Rotate()
	if sh.ring != nil || len(w.Top(0)) != 0 || w.Totals().Events != 1 {
		t.Fatalf("after the window passed: counters kept %v, top %v, totals %+v", sh.ring != nil, w.Top(0), w.Totals())
	}

	s := New(Options{})
	used := s.Limiter(tinyLimiter(t, "used", floodgate.PerHour(1)))
	s.Limiter(tinyLimiter(t, "idle", floodgate.PerHour(1)))
	if s.policies["used"].w.Load() != nil || s.policies["idle"].w.Load() != nil {
		t.Fatal("a policy has a record before its first decision")
	}
	floodgate.Allow(ctx, used, "k")
	floodgate.Allow(ctx, used, "k")
	s.Tick()
	if s.policies["idle"].w.Load() != nil {
		t.Fatal("Tick made a record for a policy that never decided")
	}
	snap := s.Snapshot()
	if len(snap.Policies) != 2 {
		t.Fatalf("%d policies", len(snap.Policies))
	}
	idle, u := snap.Policies[0], snap.Policies[1]
	if idle.Name != "idle" || idle.Points == nil || len(idle.Points) != 0 || idle.Total != (Point{}) ||
		idle.TopLimited == nil || len(idle.TopLimited)+len(idle.TopConsuming) != 0 || idle.Limits[0] != "1/h" {
		t.Errorf("policy that never decided: %+v", idle)
	}
	if u.Name != "used" || len(u.Points) != 1 || u.Points[0] != (Point{Allowed: 1, Denied: 1}) || len(u.TopLimited) != 1 || len(u.TopConsuming) != 1 {
		t.Errorf("policy that decided: %+v", u)
	}
}
