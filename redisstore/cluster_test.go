package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/testkit"
)

// TestCluster runs the engine's checks against a Redis Cluster of three
// masters with a replica each, started once for all of them.
func TestCluster(t *testing.T) {
	cl := testkit.RedisCluster(t, 3, 1)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs})
	t.Cleanup(func() { client.Close() })

	t.Run("Conformance", func(t *testing.T) { conformance(t, client) })
	t.Run("Atomic", func(t *testing.T) { concurrentDecisionsAreAtomic(t, client) })
	t.Run("ScriptFlushUnderLoad", func(t *testing.T) { scriptFlushUnderLoad(t, client) })
	t.Run("ManyKeys", func(t *testing.T) { clusterManyKeys(t, client) })
	t.Run("Reservations", func(t *testing.T) {
		lims := raceInstances(t, client, "race:", floodgate.PerSecond(100).WithBurst(10))
		floodgatetest.RaceReservations(t, 10, 10*time.Millisecond, 4, 40, lims...)
	})
	// Last: it kills a master.
	t.Run("Failover", func(t *testing.T) { clusterFailover(t, cl, client) })
}

// clusterManyKeys decides for keys spread over every master, each with a
// multi-limit policy, from concurrent callers: every batch is split by slot
// and every key of a decision lands in its slot.
func clusterManyKeys(t *testing.T, client *redis.ClusterClient) {
	ctx := context.Background()
	calls := countScripts(client)
	s := newStore(t, client, Options{Prefix: "many:"})
	lim := newLimiter(t, s, "many", floodgate.PerMinute(3), floodgate.PerHour(5).WithAlgorithm(floodgate.SlidingLog),
		floodgate.PerHour(4).WithAlgorithm(floodgate.FixedWindow), floodgate.PerHour(4).WithAlgorithm(floodgate.SlidingWindow))
	const keys = 200
	var wg sync.WaitGroup
	var allowed atomic.Int64
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 4 * keys / 16 {
				res, err := floodgate.Allow(ctx, lim, fmt.Sprintf("user:%d", (w*keys/16+i)%keys))
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if allowed.Load() != 3*keys {
		t.Errorf("admitted %d, want %d (3 per key)", allowed.Load(), 3*keys)
	}
	set := lim.LimitsFor("user:0").Compiled()
	for k := range keys {
		key := fmt.Sprintf("user:%d", k)
		slot := testkit.KeySlot(Key("many:", set, key, 0))
		for i := range set.Len() {
			rk := Key("many:", set, key, i)
			if got := testkit.KeySlot(rk); got != slot {
				t.Fatalf("%s in slot %d, %s in %d", rk, got, Key("many:", set, key, 0), slot)
			}
			if n := client.Exists(ctx, rk).Val(); n != 1 {
				t.Fatalf("%s does not exist", rk)
			}
		}
	}
	t.Logf("%d decisions in %d script calls", calls.decisions.Load(), calls.calls.Load())
}

// clusterFailover kills the master that holds a key under load; its
// replica takes over without the script, and decisions resume on it.
func clusterFailover(t *testing.T, cl *testkit.Cluster, client *redis.ClusterClient) {
	ctx := context.Background()
	calls := countScripts(client)
	s := newStore(t, client, Options{Prefix: "failover:"})
	lim := newLimiter(t, s, "failover", floodgate.PerSecond(100000))
	if _, err := floodgate.Allow(ctx, lim, "k"); err != nil {
		t.Fatal(err)
	}
	master := cl.MasterForKey(Key("failover:", lim.LimitsFor("k").Compiled(), "k", 0))
	evals := calls.evals.Load()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				if _, err := floodgate.Allow(ctx, lim, "k"); err != nil {
					failed.Add(1)
				}
				cancel()
			}
		}()
	}
	cl.KillNode(master)
	promoted := cl.WaitFailover(master)
	var last error
	eventually(t, 10*time.Second, "decisions on the promoted replica", func() bool {
		_, last = floodgate.Allow(ctx, lim, "k")
		if last != nil {
			t.Logf("%v", last)
		}
		return last == nil
	})
	close(stop)
	wg.Wait()
	if calls.evals.Load() == evals {
		t.Error("the promoted replica ran the script without a reload")
	}
	t.Logf("master %s failed over to %s; %d calls failed meanwhile", master, promoted, failed.Load())
}
