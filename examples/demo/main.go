// Command demo shows what floodgate does, on loopback, in about twenty
// seconds: the rate-limit fields of real HTTP responses and a 429, a forged
// X-Forwarded-For that changes nothing, and, when redis-server is
// installed, a hybrid limiter whose Redis is killed and started again while
// requests keep coming.
//
//	go run ./examples/demo
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/examples/demo/tour"
)

// quiet drops go-redis's log lines: the tour shows the outage through the
// answers' Source and the circuit breaker, not one line per failed dial.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func main() {
	redis.SetLogger(quiet{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := tour.Run(ctx, os.Stdout, tour.Options{}); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}
