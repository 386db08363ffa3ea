package status

import (
	"context"
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
		lim.Allow(ctx, "user:1")
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
	if len(p.TopLimited) != 1 || p.TopLimited[0] != (KeyCount{Key: r1, Count: 2}) {
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
	lim2.Allow(ctx, "user:3")
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
	lim.Allow(context.Background(), "user:1")
	lim.Allow(context.Background(), "user:1")
	if top := s.Snapshot().Policies[0].TopLimited; len(top) != 1 || top[0].Key != "user:1" {
		t.Fatalf("top limited %+v", top)
	}
}
