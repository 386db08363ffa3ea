package redisstore

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clock"
	"github.com/floodgate-go/floodgate/floodgatetest"
)

// conformance runs the floodgate conformance suite against client, each
// case under a prefix of its own so that they share one server.
func conformance(t *testing.T, client redis.UniversalClient) {
	var n atomic.Int64
	floodgatetest.Run(t, floodgatetest.Harness{
		NewStore: func(t *testing.T, clock clock.Clock) floodgate.Store {
			s, err := New(client, Options{Prefix: fmt.Sprintf("conf%d:", n.Add(1)), Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
		Source: Source,
	})
}

func TestConformance(t *testing.T) {
	conformance(t, standalone(t))
}
