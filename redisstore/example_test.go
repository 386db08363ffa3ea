package redisstore_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
)

// Every instance of a service that shares this Redis enforces one limit
// together: 10 requests per second and 1000 per hour for each user.
func Example() {
	client := redis.NewClient(&redis.Options{
		Addr: "localhost:6379",
		// Let callers' deadlines cut short a round trip to a stalled Redis.
		ContextTimeoutEnabled: true,
	})
	defer client.Close()
	store, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	lim, err := floodgate.New(store, floodgate.Policy{
		Name:   "api",
		Limits: []floodgate.Limit{floodgate.PerSecond(10), floodgate.PerHour(1000)},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	res, err := lim.Allow(ctx, "user:42")
	if err != nil {
		log.Printf("rate limiter unavailable: %v", err) // decide here: fail open or closed
		return
	}
	fmt.Println(res.Allowed, res.Remaining)
}

// A Redis Cluster client works the same: each user's keys share one slot.
func ExampleNew_cluster() {
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: []string{"redis-1:6379", "redis-2:6379", "redis-3:6379"},
	})
	defer client.Close()
	store, err := redisstore.New(client, redisstore.Options{Prefix: "myapp:rl:"})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
}
