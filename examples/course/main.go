// Command course runs the five experiments of the course module on
// incoming requests with floodgate daemons configured by YAML, on loopback,
// and prints what it found. It needs redis-server (make test installs it).
//
//	go run ./examples/course     (or: make course)
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/examples/course/experiments"
)

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func main() {
	redis.SetLogger(quiet{}) // the outage of experiment 4 is on purpose
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := experiments.Run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "course:", err)
		os.Exit(1)
	}
}
