package failover_test

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
	"github.com/floodgate-go/floodgate/redisstore"
)

// errRefusal is what a refusing fake remote returns; tests set it to a
// closed store's or a corrupt key's error.
var errRefusal error

// errDown is what a failing fake remote returns.
var errDown = errors.New("fake remote: connection refused")

// Modes of a fakeRemote.
const (
	healthy  int32 = iota // answers from its memstore
	failing               // returns errDown at once
	hanging               // blocks until unblocked, ignoring its context
	stalling              // blocks until its context ends, then returns its error
	panicky               // panics
	refusing              // returns errRefusal at once: the store answered "no"
)

// fakeRemote stands in for Redis: a memstore that can be told to fail,
// hang or panic, and that counts the calls that reach it.
type fakeRemote struct {
	mem   *memstore.Store
	mode  atomic.Int32
	calls atomic.Int64

	mu      sync.Mutex
	unblock chan struct{}
}

func newFakeRemote(t *testing.T, clock clock.Clock) *fakeRemote {
	t.Helper()
	m := memstore.New(memstore.Options{Clock: clock, SweepInterval: -1})
	f := &fakeRemote{mem: m, unblock: make(chan struct{})}
	t.Cleanup(func() { f.release(); m.Close() })
	return f
}

func (f *fakeRemote) set(mode int32) { f.mode.Store(mode) }

// release lets every hanging call return.
func (f *fakeRemote) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.unblock)
	f.unblock = make(chan struct{})
}

func (f *fakeRemote) enter(ctx context.Context) error {
	f.calls.Add(1)
	switch f.mode.Load() {
	case failing:
		return errDown
	case hanging:
		f.mu.Lock()
		ch := f.unblock
		f.mu.Unlock()
		<-ch
		return errDown
	case stalling:
		<-ctx.Done()
		return ctx.Err()
	case panicky:
		panic("fake remote: boom")
	case refusing:
		return errRefusal
	}
	return nil
}

func (f *fakeRemote) Decide(ctx context.Context, set *algo.Set, key string, cost int64) (algo.Verdict, error) {
	if err := f.enter(ctx); err != nil {
		return algo.Verdict{}, err
	}
	res, err := f.mem.Decide(ctx, set, key, cost)
	res.Source = redisstore.Source
	return res, err
}

func (f *fakeRemote) Refund(ctx context.Context, set *algo.Set, key string, cost int64) error {
	if err := f.enter(ctx); err != nil {
		return err
	}
	return f.mem.Refund(ctx, set, key, cost)
}

func (f *fakeRemote) ValidateLimit(l floodgate.Limit) error { return f.mem.ValidateLimit(l) }

func (f *fakeRemote) Reset(ctx context.Context, set *algo.Set, key string) error {
	if err := f.enter(ctx); err != nil {
		return err
	}
	return f.mem.Reset(ctx, set, key)
}

func newClock() *floodgatetest.Clock { return floodgatetest.NewClock(floodgatetest.Start) }

func newMem(t *testing.T, clock clock.Clock) *memstore.Store {
	t.Helper()
	m := memstore.New(memstore.Options{Clock: clock, SweepInterval: -1})
	t.Cleanup(func() { m.Close() })
	return m
}

func newLimiter(t *testing.T, store floodgate.Store, limits ...floodgate.Limit) *floodgate.PolicyLimiter {
	t.Helper()
	lim, err := floodgate.New(store, floodgate.Policy{Name: "api", Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

func mustAllow(t *testing.T, lim floodgate.Limiter, key string) floodgate.Result {
	t.Helper()
	res, err := floodgate.Allow(context.Background(), lim, key)
	if err != nil {
		t.Fatalf("Allow(%q): %v", key, err)
	}
	return res
}

func (f *fakeRemote) Reserve(ctx context.Context, set *algo.Set, key string, cost int64, maxWait time.Duration) (algo.Verdict, algo.Ticket, error) {
	if err := f.enter(ctx); err != nil {
		return algo.Verdict{}, algo.Ticket{}, err
	}
	v, t, err := f.mem.Reserve(ctx, set, key, cost, maxWait)
	v.Source = redisstore.Source
	return v, t, err
}

func (f *fakeRemote) Cancel(ctx context.Context, set *algo.Set, key string, cost int64, t algo.Ticket) error {
	if err := f.enter(ctx); err != nil {
		return err
	}
	return f.mem.Cancel(ctx, set, key, cost, t)
}
