package floodgatetest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
)

// ErrDown is what a FaultStore returns while it is Failing or Hanging: a
// connection refused, as from a dead Redis.
var ErrDown = errors.New("floodgatetest: fault store: connection refused")

// A Fault is what a FaultStore does with the calls it gets.
type Fault int32

const (
	// Healthy passes every call to the store underneath.
	Healthy Fault = iota
	// Failing returns ErrDown at once.
	Failing
	// Hanging blocks every call until Release, ignoring its context, then
	// returns ErrDown: a store that does not honour deadlines.
	Hanging
	// Stalling blocks every call until its context ends, then returns the
	// context's error: a store that never answers but honours deadlines.
	Stalling
	// Panicking panics in every call.
	Panicking
	// Refusing returns the error given to Refuse at once: the store
	// answered, and its answer is an error (closed, corrupt state).
	Refusing
)

// A FaultStore stands for a remote engine that can be told to fail: it
// wraps a working Store (a memstore, usually) and, by its Fault, passes
// each call on or fails it. It counts the calls that reach it. Tests of
// failure modes, breakers and front ends under an outage share it.
type FaultStore struct {
	store floodgate.Store
	// Source, when set, replaces the Source of every Verdict the store
	// underneath gives, so that a memstore can stand for a Redis store
	// (redisstore.Source).
	Source string

	fault   atomic.Int32
	calls   atomic.Int64
	mu      sync.Mutex
	refusal error
	unblock chan struct{}
}

// NewFaultStore returns a Healthy FaultStore over s.
func NewFaultStore(s floodgate.Store) *FaultStore {
	return &FaultStore{store: s, unblock: make(chan struct{})}
}

// Down returns a FaultStore over s that fails every call (Failing): an
// engine whose server is unreachable.
func Down(s floodgate.Store) *FaultStore {
	f := NewFaultStore(s)
	f.Set(Failing)
	return f
}

// Set makes every call from now on do what fault says.
func (f *FaultStore) Set(fault Fault) { f.fault.Store(int32(fault)) }

// Refuse makes every call from now on return err.
func (f *FaultStore) Refuse(err error) {
	f.mu.Lock()
	f.refusal = err
	f.mu.Unlock()
	f.Set(Refusing)
}

// Release lets every call hanging now return (ErrDown).
func (f *FaultStore) Release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.unblock)
	f.unblock = make(chan struct{})
}

// Calls is the number of calls that reached the store, failed or not.
func (f *FaultStore) Calls() int64 { return f.calls.Load() }

func (f *FaultStore) enter(ctx context.Context) error {
	f.calls.Add(1)
	switch Fault(f.fault.Load()) {
	case Failing:
		return ErrDown
	case Hanging:
		f.mu.Lock()
		ch := f.unblock
		f.mu.Unlock()
		<-ch
		return ErrDown
	case Stalling:
		<-ctx.Done()
		return ctx.Err()
	case Panicking:
		panic("floodgatetest: fault store: panic")
	case Refusing:
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.refusal
	}
	return nil
}

func (f *FaultStore) verdict(v algo.Verdict) algo.Verdict {
	if f.Source != "" {
		v.Source = f.Source
	}
	return v
}

// Decide implements floodgate.Store.
func (f *FaultStore) Decide(ctx context.Context, set *algo.Set, key string, cost int64) (algo.Verdict, error) {
	if err := f.enter(ctx); err != nil {
		return algo.Verdict{}, err
	}
	v, err := f.store.Decide(ctx, set, key, cost)
	return f.verdict(v), err
}

// Refund implements floodgate.Store.
func (f *FaultStore) Refund(ctx context.Context, set *algo.Set, key string, cost int64) error {
	if err := f.enter(ctx); err != nil {
		return err
	}
	return f.store.Refund(ctx, set, key, cost)
}

// Reset implements floodgate.Store.
func (f *FaultStore) Reset(ctx context.Context, set *algo.Set, key string) error {
	if err := f.enter(ctx); err != nil {
		return err
	}
	return f.store.Reset(ctx, set, key)
}

// Reserve implements floodgate.Store.
func (f *FaultStore) Reserve(ctx context.Context, set *algo.Set, key string, cost int64, maxWait time.Duration) (algo.Verdict, algo.Ticket, error) {
	if err := f.enter(ctx); err != nil {
		return algo.Verdict{}, algo.Ticket{}, err
	}
	v, t, err := f.store.Reserve(ctx, set, key, cost, maxWait)
	return f.verdict(v), t, err
}

// Cancel implements floodgate.Store.
func (f *FaultStore) Cancel(ctx context.Context, set *algo.Set, key string, cost int64, t algo.Ticket) error {
	if err := f.enter(ctx); err != nil {
		return err
	}
	return f.store.Cancel(ctx, set, key, cost, t)
}

// ValidateLimit implements floodgate.Store: the store underneath decides,
// whatever the fault (it is asked at construction, not on a request).
func (f *FaultStore) ValidateLimit(l floodgate.Limit) error { return f.store.ValidateLimit(l) }
