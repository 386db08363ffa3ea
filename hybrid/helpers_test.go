package hybrid_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
	"github.com/floodgate-go/floodgate/clock"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/memstore"
)

// countingStore counts the calls that reach the store it wraps: wrapped
// around the global store, it counts what reaches Redis. It can be told to
// fail, or to hang until released.
type countingStore struct {
	floodgate.Store
	decides, refunds, resets atomic.Int64

	fail atomic.Bool
	hang atomic.Bool
	mu   sync.Mutex
	gate chan struct{}
}

var errDown = errors.New("global store down")

func counting(s floodgate.Store) *countingStore {
	return &countingStore{Store: s, gate: make(chan struct{})}
}

func (c *countingStore) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.gate)
	c.gate = make(chan struct{})
}

func (c *countingStore) enter() error {
	if c.hang.Load() {
		c.mu.Lock()
		g := c.gate
		c.mu.Unlock()
		<-g
	}
	if c.fail.Load() {
		return errDown
	}
	return nil
}

func (c *countingStore) Decide(ctx context.Context, set *algo.Set, key string, cost int64) (algo.Verdict, error) {
	c.decides.Add(1)
	if err := c.enter(); err != nil {
		return algo.Verdict{}, err
	}
	return c.Store.Decide(ctx, set, key, cost)
}

func (c *countingStore) Reserve(ctx context.Context, set *algo.Set, key string, cost int64, maxWait time.Duration) (algo.Verdict, algo.Ticket, error) {
	c.decides.Add(1)
	if err := c.enter(); err != nil {
		return algo.Verdict{}, algo.Ticket{}, err
	}
	return c.Store.Reserve(ctx, set, key, cost, maxWait)
}

func (c *countingStore) Refund(ctx context.Context, set *algo.Set, key string, cost int64) error {
	c.refunds.Add(1)
	if err := c.enter(); err != nil {
		return err
	}
	return c.Store.Refund(ctx, set, key, cost)
}

func (c *countingStore) Reset(ctx context.Context, set *algo.Set, key string) error {
	c.resets.Add(1)
	if err := c.enter(); err != nil {
		return err
	}
	return c.Store.Reset(ctx, set, key)
}

func newClock() *floodgatetest.Clock { return floodgatetest.NewClock(floodgatetest.Start) }

func newMem(t testing.TB, clock clock.Clock) *memstore.Store {
	t.Helper()
	m := memstore.New(memstore.Options{Clock: clock, SweepInterval: -1})
	t.Cleanup(func() { m.Close() })
	return m
}

func newLimiter(t testing.TB, store floodgate.Store, limits ...floodgate.Limit) *floodgate.PolicyLimiter {
	t.Helper()
	lim, err := floodgate.New(store, floodgate.Policy{Name: "api", Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

func mustAllow(t testing.TB, lim floodgate.Limiter, key string) floodgate.Result {
	t.Helper()
	res, err := floodgate.Allow(context.Background(), lim, key)
	if err != nil {
		t.Fatalf("Allow(%q): %v", key, err)
	}
	return res
}
