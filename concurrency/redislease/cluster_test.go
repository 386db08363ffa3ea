package redislease_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/concurrency/redislease"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/testkit"
)

// TestCluster runs leases of many keys on a 3-master Redis Cluster: each
// script call touches one key, hashed by its tag, so no call crosses slots,
// and each key lives on the master its tag names.
func TestCluster(t *testing.T) {
	cl := testkit.RedisCluster(t, 3, 0)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs})
	t.Cleanup(func() { c.Close() })
	s := newStore(t, c, redislease.Options{Mode: failover.FailClosed})
	l := newLimiter(t, s, concurrency.Options{Name: "cl", Limit: 1})
	ctx := context.Background()
	masters := map[string]bool{}
	for _, key := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "user:1", "user:2", "x}y{z"} {
		res, p := l.Acquire(ctx, key)
		if !res.Allowed || res.Source != redislease.Source {
			t.Fatalf("%q: %+v", key, res)
		}
		if r, _ := l.Acquire(ctx, key); r.Allowed || r.Reason != concurrency.ReasonFull {
			t.Fatalf("%q held twice: %+v", key, r)
		}
		master := cl.MasterForKey(s.Key("cl", key))
		masters[master] = true
		node := redis.NewClient(&redis.Options{Addr: master})
		n, err := node.ZCard(ctx, s.Key("cl", key)).Result()
		node.Close()
		if err != nil || n != 1 {
			t.Fatalf("%q on its master %s: %d holders, %v", key, master, n, err)
		}
		p.Release()
	}
	if len(masters) < 2 {
		t.Fatalf("every key on one master: %v", masters)
	}
}
