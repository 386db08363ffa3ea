package failover_test

import (
	"context"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clock"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/redisstore"
)

// newFakeRemote stands in for Redis: a memstore that can be told to fail,
// hang or panic, and that counts the calls that reach it; its decisions
// carry redisstore's Source.
func newFakeRemote(t *testing.T, clock clock.Clock) *floodgatetest.FaultStore {
	t.Helper()
	m := memstore.New(memstore.Options{Clock: clock, SweepInterval: -1})
	f := floodgatetest.NewFaultStore(m)
	f.Source = redisstore.Source
	t.Cleanup(func() { f.Release(); m.Close() })
	return f
}

func newClock() *floodgatetest.Clock { return floodgatetest.NewClock(floodgatetest.Start) }

func newMem(t *testing.T, clock clock.Clock) *memstore.Store {
	t.Helper()
	m := memstore.New(memstore.Options{Clock: clock, SweepInterval: -1})
	t.Cleanup(func() { m.Close() })
	return m
}

func mustAllow(t *testing.T, lim floodgate.Limiter, key string) floodgate.Result {
	t.Helper()
	res, err := floodgate.Allow(context.Background(), lim, key)
	if err != nil {
		t.Fatalf("Allow(%q): %v", key, err)
	}
	return res
}
