package daemon

import (
	"context"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/server"
)

// envoyDescriptors answers the Envoy rate limit service from an
// envoyproxy/ratelimit configuration: config's matcher picks the rule, the
// daemon's limiter of the rule's policy decides.
type envoyDescriptors struct {
	rules    *config.EnvoyRules
	limiters map[string]floodgate.Limiter
}

func (d *envoyDescriptors) Lookup(domain string, entries []server.Entry) ([]server.DescriptorLimit, bool) {
	des := make([]config.DescriptorEntry, len(entries))
	for i, e := range entries {
		des[i] = config.DescriptorEntry{Key: e.Key, Value: e.Value}
	}
	r := d.rules.Match(domain, des)
	if r == nil {
		return nil, false
	}
	// A rule's rate_limit name is how other rules replace it.
	name := r.Name
	if name == "" {
		name = r.MetricKey
	}
	if name == "" {
		name = r.Policy
	}
	switch {
	case r.Unlimited:
		return []server.DescriptorLimit{{Name: name, Unlimited: true}}, true
	case r.Blocked:
		return []server.DescriptorLimit{{Name: name, Limiter: blocked(r.Policy), Key: r.Key, Shadow: r.Shadow, Replaces: r.Replaces}}, true
	}
	lim := d.limiters[r.Policy]
	if lim == nil {
		return nil, false
	}
	return []server.DescriptorLimit{{Name: name, Limiter: lim, Key: r.Key, Shadow: r.Shadow, Replaces: r.Replaces}}, true
}

// blocked is the limiter of a rule with requests_per_unit 0: every request
// is denied, and can never pass.
type blocked string

func (b blocked) Name() string { return string(b) }

func (b blocked) Allow(ctx context.Context, key string) (floodgate.Result, error) {
	return b.AllowN(ctx, key, 1)
}

func (b blocked) AllowN(_ context.Context, _ string, cost int64) (floodgate.Result, error) {
	if cost == 0 {
		return floodgate.Result{Allowed: true, Source: floodgate.SourcePolicy, Policy: string(b)}, nil
	}
	return floodgate.Result{RetryAfter: floodgate.RetryNever, Source: floodgate.SourcePolicy, Policy: string(b)}, nil
}

func (blocked) RefundN(context.Context, string, int64) error { return nil }
func (blocked) Reset(context.Context, string) error          { return nil }
