package memstore_test

import (
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clock"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/memstore"
)

func TestConformance(t *testing.T) {
	floodgatetest.Run(t, floodgatetest.Harness{
		NewStore: func(t *testing.T, clock clock.Clock) floodgate.Store {
			s := memstore.New(memstore.Options{Clock: clock, SweepInterval: -1})
			t.Cleanup(func() { s.Close() })
			return s
		},
		Source: memstore.Source,
	})
}

// Random reservations, decisions and cancellations never over-admit.
func TestRandomReservations(t *testing.T) {
	floodgatetest.RandomReservations(t, floodgatetest.Harness{
		NewStore: func(t *testing.T, clock clock.Clock) floodgate.Store {
			s := memstore.New(memstore.Options{Clock: clock, SweepInterval: -1})
			t.Cleanup(func() { s.Close() })
			return s
		},
	}, 300, 60)
}
