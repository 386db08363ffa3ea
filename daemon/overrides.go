package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/admin"
	"github.com/floodgate-go/floodgate/clock"
	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/override"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/status"
)

// runtimeOverrides is the daemon's table of overrides set through the
// admin API. With the redis and hybrid engines the entries live in Redis
// beside the limits, so every instance on it applies them within
// override.DefaultRefresh; with the memory engine they live in the
// process. Either way they outlive reloads: every generation's limiters
// read the one table.
type runtimeOverrides struct {
	table *override.Table
	stop  context.CancelFunc
	done  chan struct{}
}

func newRuntimeOverrides(e *engine, st config.Storage, clk clock.Clock, log *slog.Logger) (*runtimeOverrides, error) {
	store := override.NewMemory()
	if e.client != nil {
		var err error
		if store, err = redisstore.NewOverrides(e.client, st.Redis.KeyPrefix); err != nil {
			return nil, err
		}
	}
	return &runtimeOverrides{table: override.NewTable(store, override.Options{
		Clock: clk, Logger: log,
		// A read of the list is one call to Redis, bounded as the
		// engine's slow calls are.
		Timeout: st.Failure.SlowTimeout.D(),
	})}, nil
}

// start reads the entries once, so that the first requests already meet
// them, then keeps reading them in the background.
func (ro *runtimeOverrides) start() {
	ctx, cancel := context.WithCancel(context.Background())
	_ = ro.table.Refresh(ctx)
	ro.stop, ro.done = cancel, make(chan struct{})
	go func() {
		defer close(ro.done)
		ro.table.Run(ctx)
	}()
}

func (ro *runtimeOverrides) shutdown() {
	if ro.stop != nil {
		ro.stop()
		<-ro.done
		ro.stop = nil
	}
}

// byPolicy is the entries in force for the status page.
func (ro *runtimeOverrides) byPolicy() map[string][]status.RuntimeOverride {
	out := map[string][]status.RuntimeOverride{}
	for _, e := range ro.table.Entries() {
		v := admin.ViewOf(e)
		out[e.Policy] = append(out[e.Policy], status.RuntimeOverride{Key: v.Key, Tier: v.Tier, Limits: v.Limits,
			Multiplier: v.Multiplier, Expires: v.Expires, Created: v.Created, By: v.By, Reason: v.Reason})
	}
	return out
}

// overrideEntry builds the entry a PUT /v1/overrides asks for, against
// the configuration in service: the policy must be in service, a tier
// one of its tiers, and the limits (or the multiplied ones) must be
// decidable on its store.
func (d *Daemon) overrideEntry(ctx context.Context, id override.ID, body []byte) (override.Entry, error) {
	g := d.cur.Load()
	lim := g.limiters[id.Policy]
	if lim == nil {
		return override.Entry{}, admin.ErrUnknownPolicy
	}
	base, ok := floodgate.As[*floodgate.PolicyLimiter](lim)
	if !ok {
		return override.Entry{}, fmt.Errorf("policy %s cannot take runtime overrides", id.Policy)
	}
	key := id.Key
	if id.Tier != "" {
		// The routes put a request's tier in front of its key.
		key = "tier:" + id.Tier + "|"
		if base.LimitsFor(key).Variant() != "tier:"+id.Tier {
			return override.Entry{}, fmt.Errorf("policy %s has no tier %q; its tiers: %s", id.Policy, id.Tier, tiersOf(g.cfg, id.Policy))
		}
	}
	set := base.LimitsFor(key)
	replaced := make([]floodgate.Limit, set.Len())
	for i := range replaced {
		replaced[i] = set.Limit(i)
	}
	s, limits, err := config.ParseOverride(body, replaced)
	if err != nil {
		return override.Entry{}, err
	}
	now := time.Now()
	e := override.Entry{Policy: id.Policy, Key: id.Key, Tier: id.Tier, Limits: limits, Multiplier: s.Multiplier,
		Created: now, Expires: now.Add(s.TTL.D()), By: s.By, Reason: s.Reason}
	if err := d.overrides.table.Validate(ctx, base, e, key); err != nil {
		return override.Entry{}, err
	}
	return e, nil
}

func tiersOf(cfg *config.Config, policy string) string {
	spec, ok := cfg.Policies[policy]
	if !ok || len(spec.Tiers) == 0 {
		return "none"
	}
	return strings.Join(slices.Sorted(maps.Keys(spec.Tiers)), ", ")
}
