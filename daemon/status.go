package daemon

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/admin"
	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/status"
)

// statusPage is the daemon's side of package status: it records every
// policy's decisions, watches the engine's health and the reloads, and
// gives the admin listener the status page and the key API.
type statusPage struct {
	d       *Daemon
	st      *status.Status
	engine  string
	failure string // the failure mode in force, "" for the memory engine

	mu          sync.Mutex
	pings       []ping    // the last pings, oldest first
	pingErr     string    // the last failed ping's error
	pingErrAt   time.Time // and when it was
	transitions []status.Transition
	lastState   failover.BreakerState
	lastOpened  uint64

	stop context.CancelFunc
	done sync.WaitGroup
}

// A ping is one PING's round trip.
type ping struct {
	rtt    time.Duration
	failed bool
}

// Bounds of what the health watch keeps.
const (
	pingEvery      = time.Second
	pingTimeout    = 500 * time.Millisecond
	keptPings      = 120
	keptTransition = 10
)

// newStatus builds the status of the daemon whose first configuration is
// cfg. It records nothing until build wraps the limiters with it.
func (d *Daemon) newStatus(cfg *config.Config) (*statusPage, error) {
	sp := &statusPage{d: d, engine: string(cfg.Storage.Engine)}
	if sp.engine == "" {
		sp.engine = string(config.EngineMemory)
	}
	if cfg.Storage.Remote() {
		m := cfg.Storage.Failure.Mode
		if m == 0 {
			// The hybrid engine's default and only mode.
			m = failover.LocalFallback
		}
		sp.failure = m.String()
	}
	sp.st = status.New(status.Options{RawKeys: rawKeys(cfg), Engine: sp.health, RuntimeOverrides: d.overrides.byPolicy})
	sp.st.ConfigLoaded(cfg.File, cfg.Digest, time.Now())
	return sp, nil
}

// wrap records l's decisions.
func (sp *statusPage) wrap(l floodgate.Limiter) floodgate.Limiter { return sp.st.Limiter(l) }

// routes adds the status page to the admin listener.
func (sp *statusPage) routes(a *admin.Config) {
	a.Handlers = map[string]http.Handler{"GET /v1/status": sp.st}
	page := status.Page()
	a.Open = map[string]http.Handler{"GET /{$}": page, "GET /assets/": page}
}

// reloaded records the outcome of Apply or of a load that failed (cfg nil).
func (sp *statusPage) reloaded(cfg *config.Config, err error) {
	if err != nil {
		sp.st.ReloadFailed(err, time.Now())
		return
	}
	sp.st.ConfigLoaded(cfg.File, cfg.Digest, time.Now())
	names := make([]string, 0)
	for name := range sp.d.cur.Load().limiters {
		names = append(names, name)
	}
	sp.st.Retain(names)
}

// start runs the chart's clock and the engine's health watch.
func (sp *statusPage) start() {
	ctx, cancel := context.WithCancel(context.Background())
	sp.stop = cancel
	sp.done.Add(1)
	go func() {
		defer sp.done.Done()
		sp.st.Run(ctx)
	}()
	if sp.d.engine.client == nil && sp.d.engine.guard == nil {
		return
	}
	sp.done.Add(1)
	go func() {
		defer sp.done.Done()
		t := time.NewTicker(pingEvery)
		defer t.Stop()
		for {
			sp.watch(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// shutdown stops what start started.
func (sp *statusPage) shutdown() {
	if sp.stop != nil {
		sp.stop()
		sp.done.Wait()
	}
}

// watch pings Redis once and looks at the breaker. A look every second
// sees every time the breaker opened (Stats counts them) but may miss a
// probe that closed it again within the second; the transitions metric
// counts every one.
func (sp *statusPage) watch(ctx context.Context) {
	e := sp.d.engine
	var rtt time.Duration
	var perr error
	if e.client != nil {
		pctx, cancel := context.WithTimeout(ctx, pingTimeout)
		start := time.Now()
		perr = e.client.Ping(pctx).Err()
		rtt = time.Since(start)
		cancel()
		if ctx.Err() != nil {
			return
		}
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if e.client != nil {
		sp.pings = append(sp.pings, ping{rtt: rtt, failed: perr != nil})
		if perr != nil {
			sp.pingErr, sp.pingErrAt = perr.Error(), time.Now()
		}
		if len(sp.pings) > keptPings {
			sp.pings = sp.pings[1:]
		}
	}
	if e.guard == nil {
		return
	}
	st := e.guard.Stats()
	opened := st.Opened - sp.lastOpened
	now := time.Now()
	switch {
	case st.State != sp.lastState:
		sp.transition(now, sp.lastState, st.State, 1)
	case opened > 0:
		// It opened and closed again between two looks.
		sp.transition(now, sp.lastState, failover.Open, opened)
		sp.transition(now, failover.Open, st.State, opened)
	}
	sp.lastState, sp.lastOpened = st.State, st.Opened
}

func (sp *statusPage) transition(at time.Time, from, to failover.BreakerState, n uint64) {
	sp.transitions = append(sp.transitions, status.Transition{At: at, From: from.String(), To: to.String(), Count: n})
	if len(sp.transitions) > keptTransition {
		sp.transitions = sp.transitions[1:]
	}
}

// health is the page's engine panel.
func (sp *statusPage) health() *status.Engine {
	e := sp.d.engine
	out := &status.Engine{Name: sp.engine, Failure: sp.failure}
	if e.guard != nil {
		out.Breaker = e.guard.State().String()
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	out.Transitions = slices.Clone(sp.transitions)
	if e.client != nil {
		lat := &status.Latency{Samples: len(sp.pings)}
		sorted := make([]time.Duration, 0, len(sp.pings))
		for _, p := range sp.pings {
			sorted = append(sorted, p.rtt)
			if p.failed {
				lat.Failed++
			}
		}
		if lat.Failed > 0 {
			// The error is the present only while the last ping failed;
			// after recovery it is history.
			at := sp.pingErrAt
			lat.LastError, lat.LastErrorAt = sp.pingErr, &at
			if sp.pings[len(sp.pings)-1].failed {
				lat.Error = sp.pingErr
			}
		}
		if n := len(sorted); n > 0 {
			slices.Sort(sorted)
			lat.P50Ms = ms(sorted[(n-1)*50/100])
			lat.P99Ms = ms(sorted[(n-1)*99/100])
		}
		out.RoundTrip = lat
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
