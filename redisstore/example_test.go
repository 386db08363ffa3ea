package redisstore_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/testkit"
)

// Every instance of a service that shares this Redis enforces one limit
// together: 10 requests per second and 1000 per hour for each user.
func Example() {
	client := redis.NewClient(&redis.Options{
		Addr: os.Getenv("REDIS_ADDR"), // your Redis, e.g. "localhost:6379"
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
	// A deadline per decision (a busy service would use ~100ms; the first
	// call also loads the script).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	res, err := floodgate.Allow(ctx, lim, "user:42")
	if err != nil {
		log.Printf("rate limiter unavailable: %v", err) // decide here: fail open or closed
		return
	}
	fmt.Println(res.Allowed, res.Remaining, res.Limit, res.Source)
	// Output: true 9 10/s redis
}

// Where a client's state lives: every limit of one decision under one hash
// tag, so a Redis Cluster keeps them in one slot and one script call
// decides them all. A redis.ClusterClient works as a redis.Client does.
func ExampleKey() {
	lim, err := floodgate.New(exampleStore(), floodgate.Policy{
		Name:   "api",
		Limits: []floodgate.Limit{floodgate.PerSecond(10), floodgate.PerHour(1000).WithAlgorithm(floodgate.SlidingWindow)},
	})
	if err != nil {
		log.Fatal(err)
	}
	set := lim.LimitsFor("user:42").Compiled()
	fmt.Println(redisstore.Key(redisstore.DefaultPrefix, set, "user:42", 0))
	fmt.Println(redisstore.Key(redisstore.DefaultPrefix, set, "user:42", 1))
	// Output:
	// floodgate:{api::user:42}:0g
	// floodgate:{api::user:42}:1s
}

// exampleRedis is the redis-server the Examples talk to, started by
// TestMain; REDIS_ADDR names it, as it would name yours.
var exampleRedis struct {
	srv   *testkit.RedisServer
	store *redisstore.Store
}

// exampleStore is a Store on the Examples' Redis.
func exampleStore() *redisstore.Store {
	if exampleRedis.store == nil {
		s, err := redisstore.New(redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")}), redisstore.Options{})
		if err != nil {
			panic(err)
		}
		exampleRedis.store = s
	}
	return exampleRedis.store
}

func TestMain(m *testing.M) {
	srv, err := testkit.StartRedis()
	if err != nil {
		fmt.Fprintln(os.Stderr, err) // a missing redis-server fails the package, as it fails every Redis test
		os.Exit(1)
	}
	exampleRedis.srv = srv
	os.Setenv("REDIS_ADDR", srv.Addr)
	code := m.Run()
	if exampleRedis.store != nil {
		exampleRedis.store.Close()
	}
	srv.Close()
	os.Exit(code)
}
