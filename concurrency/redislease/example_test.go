package redislease_test

import (
	"context"
	"fmt"
	"log"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/concurrency/redislease"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/testkit"
)

// Every instance of a service sharing this Redis runs at most three
// exports per tenant at once, together. An instance that dies frees its
// slots within one lease (redislease.DefaultLease); while Redis is down,
// exports are refused rather than run unbounded.
func Example() {
	client := redis.NewClient(&redis.Options{Addr: exampleAddr()}) // your Redis
	defer client.Close()
	store, err := redislease.New(client, redislease.Options{Mode: failover.FailClosed})
	if err != nil {
		log.Fatal(err)
	}
	lim, err := concurrency.New(store, concurrency.Options{Name: "export", Limit: 3})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	var permits []*concurrency.Permit
	for range 4 {
		res, p := lim.Acquire(ctx, "tenant:42")
		fmt.Println(res.Allowed, res.InFlight, res.Reason, res.Source)
		permits = append(permits, p)
	}
	for _, p := range permits {
		p.Release() // a refused request's nil Permit does nothing
	}
	// Output:
	// true 1  redis
	// true 2  redis
	// true 3  redis
	// false 3 full redis
}

var exampleRedis struct {
	once sync.Once
	srv  *testkit.RedisServer
	err  error
}

// exampleAddr returns the address of a redis-server started for the
// Examples on a free loopback port.
func exampleAddr() string {
	exampleRedis.once.Do(func() { exampleRedis.srv, exampleRedis.err = testkit.StartRedis() })
	if exampleRedis.err != nil {
		panic(exampleRedis.err)
	}
	return exampleRedis.srv.Addr
}
