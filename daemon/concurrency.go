package daemon

import (
	"fmt"
	"reflect"
	"sync"

	"github.com/floodgate-go/floodgate/checkapi"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/concurrency/adaptive"
	"github.com/floodgate-go/floodgate/concurrency/redislease"
	"github.com/floodgate-go/floodgate/concurrency/throttle"
	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/httplimit"
)

// concLimits holds the concurrency limits of the proxy's routes across
// reloads. The slots live in one store for the daemon's life (this
// process's, or leases in the engine's Redis), named by route, so a limit
// rebuilt by a reload counts the requests already in flight. A route whose
// concurrency section did not change keeps its Limiter (its wait queue)
// and an adaptive limit whose section did not change keeps its Controller
// (the limit it has learnt).
//
// A configuration's limits are built into pending and become the ones to
// reuse only when it goes into service (commit), so a reload that fails
// leaves the limits in service to be reused, and a route removed by a
// reload leaves nothing behind.
type concLimits struct {
	store   concurrency.Store
	mu      sync.Mutex
	named   map[string]*concLimit
	pending map[string]*concLimit
}

type concLimit struct {
	cfg config.RouteConcurrency
	lim *concurrency.Limiter
	ctl concurrency.Controller
}

// newConcLimits makes the store of the engine e: leases in Redis beside a
// remote engine, judged by its Guard (one breaker for one Redis) and
// decided on failure as the rate limits are; else slots of this process.
func newConcLimits(e *engine, st config.Storage) (*concLimits, error) {
	c := &concLimits{named: map[string]*concLimit{}, pending: map[string]*concLimit{}}
	if !e.remote || e.guard == nil {
		c.store = concurrency.NewLocal()
		return c, nil
	}
	mode := st.Failure.Mode
	if st.Engine == config.EngineHybrid {
		mode = failover.LocalFallback // as the hybrid engine's local filter
	}
	lease := max(redislease.DefaultLease, 3*st.Failure.Timeout.D())
	s, err := redislease.New(e.client, redislease.Options{Prefix: st.Redis.KeyPrefix, Mode: mode, Breaker: e.guard.Breaker(), Lease: lease})
	if err != nil {
		return nil, fmt.Errorf("concurrency limits in Redis: %w", err)
	}
	c.store = s
	return c, nil
}

// limiter returns the Limiter of route's concurrency section, reusing
// what a previous configuration built for the same route.
func (c *concLimits) limiter(route string, rc *config.RouteConcurrency) (*concurrency.Limiter, error) {
	return c.byName("route:"+route, rc)
}

// postgres returns the Limiter of the PostgreSQL proxy's concurrency
// section, kept across reloads like a route's.
func (c *concLimits) postgres(pc *config.PostgresConcurrency) (*concurrency.Limiter, error) {
	rc := config.RouteConcurrency{Limit: pc.PerUser, MaxWait: pc.MaxWait}
	if pc.MaxWait > 0 {
		rc.Queue = pc.Queue
		if rc.Queue == 0 {
			rc.Queue = config.DefaultPostgresConcurrencyQueue
		}
	}
	return c.byName("postgres:per_user", &rc)
}

// byName returns the Limiter of a concurrency section whose slots are
// named name, reusing what a previous configuration built under it.
func (c *concLimits) byName(name string, rc *config.RouteConcurrency) (*concurrency.Limiter, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.named[name]
	if old != nil && reflect.DeepEqual(old.cfg, *rc) {
		c.pending[name] = old
		return old.lim, nil
	}
	o := concurrency.Options{Name: name, Limit: rc.Limit, MaxWaiting: rc.Queue, MaxWait: rc.MaxWait.D()}
	var ctl concurrency.Controller
	if a := rc.Adaptive; a != nil {
		if old != nil && old.cfg.Adaptive != nil && reflect.DeepEqual(*old.cfg.Adaptive, *a) {
			ctl = old.ctl
		} else {
			var err error
			if ctl, err = newController(a); err != nil {
				return nil, fmt.Errorf("adaptive: %w", err)
			}
		}
		o.Controller = ctl
	}
	lim, err := concurrency.New(c.store, o)
	if err != nil {
		return nil, err
	}
	c.pending[name] = &concLimit{cfg: *rc, lim: lim, ctl: ctl}
	return lim, nil
}

// begin starts building a configuration's limits.
func (c *concLimits) begin() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending = map[string]*concLimit{}
}

// commit makes the limits built since begin the ones in service.
func (c *concLimits) commit() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.named, c.pending = c.pending, map[string]*concLimit{}
}

func newController(a *config.AdaptiveConcurrency) (concurrency.Controller, error) {
	if a.Algorithm == config.AdaptiveAIMD {
		return adaptive.NewAIMD(adaptive.AIMDOptions{Initial: a.InitialLimit, Min: a.MinLimit, Max: a.MaxLimit, Timeout: a.Timeout.D()})
	}
	return adaptive.NewGradient(adaptive.GradientOptions{Initial: a.InitialLimit, Min: a.MinLimit, Max: a.MaxLimit, Tolerance: a.Tolerance})
}

// throttler is the middleware of a route's concurrency section: keyed by
// key (nil shares the slots), refusing with the proxy's body format.
func (c *concLimits) throttler(route string, rc *config.RouteConcurrency, key httplimit.KeyFunc, body httplimit.Body) (*throttle.Throttler, error) {
	lim, err := c.limiter(route, rc)
	if err != nil {
		return nil, err
	}
	return throttle.New(throttle.Config{Limiter: lim, Key: key, Body: body})
}

// checkLimits builds the check API's concurrency limits in the store of
// the routes' limits, named apart from them ("check:NAME"), so that the
// check API's clients and the proxy share one store, its failure mode and
// its breaker. A reload cannot change them (check.concurrency is not
// Reloadable): a lease outlives a configuration.
func (c *concLimits) checkLimits(m map[string]config.CheckAPIConcurrency) (map[string]checkapi.ConcurrencyLimit, error) {
	out := make(map[string]checkapi.ConcurrencyLimit, len(m))
	for name, cc := range m {
		lim, err := concurrency.New(c.store, concurrency.Options{Name: "check:" + name, Limit: cc.Limit})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		lease := cc.Lease.D()
		if lease <= 0 {
			lease = config.DefaultCheckLease
		}
		out[name] = checkapi.ConcurrencyLimit{Limiter: lim, Lease: lease}
	}
	return out, nil
}
