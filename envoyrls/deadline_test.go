package envoyrls

import (
	"context"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
	"github.com/floodgate-go/floodgate/envoyrules"
	"github.com/floodgate-go/floodgate/internal/chargedenied"
	"github.com/floodgate-go/floodgate/memstore"
)

// ctxStore is the memory engine, recording the context of each decision.
type ctxStore struct {
	*memstore.Store
	ctx context.Context
}

func (s *ctxStore) Decide(ctx context.Context, set *algo.Set, key string, cost int64) (algo.Verdict, error) {
	s.ctx = ctx
	return s.Store.Decide(ctx, set, key, cost)
}

// Under DeadlineBound the engine gets the call's timeout as its context's
// deadline, with the caller's Done (no derived context); without it a
// derived one. Under independent descriptors with charge_denied, and only
// then, the decision is marked as counted the way envoyproxy/ratelimit
// counts (internal/chargedenied), for an engine that charges a denied
// request in the same step.
func TestEngineContext(t *testing.T) {
	rules, err := envoyrules.Parse("rl.yaml", []byte("domain: d\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 10}}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	mem := memstore.New(memstore.Options{})
	t.Cleanup(func() { mem.Close() })
	st := &ctxStore{Store: mem}
	lims := map[string]floodgate.Limiter{}
	for name, p := range rules.Policies() {
		if lims[name], err = floodgate.New(st, p); err != nil {
			t.Fatal(err)
		}
	}
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc(nil, "k", "v")}}
	for _, tc := range []struct {
		bound          bool
		mode           Mode
		marked, direct bool
	}{
		{bound: true, mode: Mode{Independent: true, ChargeDenied: true}, marked: true, direct: true},
		{bound: false, mode: Mode{Independent: true, ChargeDenied: true}, marked: true},
		{bound: true, mode: Mode{Independent: true}, direct: true},
		{bound: true, mode: Mode{ChargeDenied: true}, direct: true},
	} {
		s, err := New(Config{Rules: rules, Limiters: lims, DeadlineBound: tc.bound, Mode: tc.mode, Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		parent, cancel := context.WithCancel(context.Background())
		before := time.Now()
		if _, err := s.ShouldRateLimit(parent, req); err != nil {
			t.Fatal(err)
		}
		cancel()
		d, ok := st.ctx.Deadline()
		if !ok || d.Before(before.Add(time.Minute)) || d.After(time.Now().Add(time.Minute)) {
			t.Errorf("%+v: the engine's deadline %v (%v), want the call's timeout", tc, d, ok)
		}
		if direct := st.ctx.Done() == parent.Done(); direct != tc.direct {
			t.Errorf("%+v: the engine got the caller's Done: %v, want %v", tc, direct, tc.direct)
		}
		if m := chargedenied.On(st.ctx); m != tc.marked {
			t.Errorf("%+v: marked %v, want %v", tc, m, tc.marked)
		}
	}
}
