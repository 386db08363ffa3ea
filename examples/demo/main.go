// Command demo shows floodgate's limits at work on built-in defaults: three
// clients with different habits share one in-memory engine under one policy
// (10/s with bursts of 20, and 300/min), for three seconds of real time.
//
//	go run ./examples/demo
package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
)

type client struct {
	name    string
	every   time.Duration // one request per interval
	burst   int           // requests sent at once at the start
	allowed int
	denied  int
	last    floodgate.Result
}

func main() {
	ctx := context.Background()
	store := memstore.New(memstore.Options{})
	defer store.Close()

	policy := floodgate.Policy{
		Name:   "api",
		Limits: []floodgate.Limit{floodgate.PerSecond(10).WithBurst(20), floodgate.PerMinute(300)},
	}
	lim, err := floodgate.New(store, policy)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}

	clients := []*client{
		{name: "steady (8/s)", every: 125 * time.Millisecond},
		{name: "bursty (30 at once, then 2/s)", every: 500 * time.Millisecond, burst: 30},
		{name: "abusive (100/s)", every: 10 * time.Millisecond},
	}
	send := func(c *client) {
		res, err := lim.Allow(ctx, c.name)
		if err != nil {
			fmt.Fprintln(os.Stderr, "demo:", err)
			os.Exit(1)
		}
		c.last = res
		if res.Allowed {
			c.allowed++
		} else {
			c.denied++
		}
	}

	fmt.Printf("policy %q: %s and %s, in memory\n\n", policy.Name, policy.Limits[0], policy.Limits[1])
	for _, c := range clients {
		for i := 0; i < c.burst; i++ {
			send(c)
		}
	}
	start := time.Now()
	next := make([]time.Time, len(clients))
	for i := range next {
		next[i] = start
	}
	report := start.Add(time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for now := range tick.C {
		for i, c := range clients {
			for !next[i].After(now) {
				send(c)
				next[i] = next[i].Add(c.every)
			}
		}
		if now.Before(report) {
			continue
		}
		second := int(report.Sub(start) / time.Second)
		w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintf(w, "after %ds\tallowed\tdenied\tremaining\tretry after\n", second)
		for _, c := range clients {
			retry := "-"
			if !c.last.Allowed {
				retry = c.last.RetryAfter.Round(time.Millisecond).String()
			}
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%s\n", c.name, c.allowed, c.denied, c.last.Remaining, retry)
		}
		w.Flush()
		fmt.Println()
		if second == 3 {
			break
		}
		report = report.Add(time.Second)
	}
	fmt.Println("Each client is limited on its own key: the abusive one is held to 10/s after its burst, the others are not affected.")
}
