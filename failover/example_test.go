package failover_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/memstore"
)

// downStore stands in for a Redis engine whose server is unreachable.
type downStore struct{}

var errRefused = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

func (downStore) Decide(context.Context, *algo.Set, string, int64) (algo.Verdict, error) {
	return algo.Verdict{}, errRefused
}
func (downStore) Reserve(context.Context, *algo.Set, string, int64, time.Duration) (algo.Verdict, algo.Ticket, error) {
	return algo.Verdict{}, algo.Ticket{}, errRefused
}
func (downStore) Cancel(context.Context, *algo.Set, string, int64, algo.Ticket) error {
	return errRefused
}
func (downStore) Refund(context.Context, *algo.Set, string, int64) error { return errRefused }
func (downStore) Reset(context.Context, *algo.Set, string) error         { return errRefused }
func (downStore) ValidateLimit(floodgate.Limit) error                    { return nil }

// FailOpen keeps the service up when Redis is down: requests pass, and the
// Result says why. In production the remote store is a redisstore.Store.
func ExampleNew() {
	store, err := failover.New(downStore{}, failover.Options{Mode: failover.FailOpen})
	if err != nil {
		panic(err)
	}
	lim, err := floodgate.New(store, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerSecond(10)}})
	if err != nil {
		panic(err)
	}
	res, err := floodgate.Allow(context.Background(), lim, "user:42")
	fmt.Println(res.Allowed, res.Source, err)
	// Output: true fail-open <nil>
}

// FailClosed protects what the limit guards even when Redis is down. The
// denial is the limiter's failure, not the client's excess, so an HTTP
// front end answers 503 rather than 429, with RetryAfter as Retry-After.
func ExampleNew_failClosed() {
	store, err := failover.New(downStore{}, failover.Options{Mode: failover.FailClosed})
	if err != nil {
		panic(err)
	}
	lim, err := floodgate.New(store, floodgate.Policy{Name: "payouts", Limits: []floodgate.Limit{floodgate.PerMinute(5)}})
	if err != nil {
		panic(err)
	}
	res, _ := floodgate.Allow(context.Background(), lim, "account:7")
	status := http.StatusOK
	switch {
	case res.Allowed:
	case res.Source == floodgate.SourceFailClosed:
		status = http.StatusServiceUnavailable
	default:
		status = http.StatusTooManyRequests
	}
	fmt.Println(res.Allowed, res.Source, status, res.RetryAfter)
	// Output: false fail-closed 503 200ms
}

// LocalFallback decides on a store in this process while Redis is down:
// the limit holds per instance instead of across instances.
func ExampleNew_fallbackLocal() {
	local := memstore.New(memstore.Options{})
	defer local.Close()
	store, err := failover.New(downStore{}, failover.Options{Mode: failover.LocalFallback, Local: local})
	if err != nil {
		panic(err)
	}
	lim, err := floodgate.New(store, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerMinute(2)}})
	if err != nil {
		panic(err)
	}
	for range 3 {
		res, err := floodgate.Allow(context.Background(), lim, "user:42")
		fmt.Println(res.Allowed, res.Remaining, res.Source, err)
	}
	// Output:
	// true 1 local-fallback <nil>
	// true 0 local-fallback <nil>
	// false 0 local-fallback <nil>
}

// Several policies over one Redis share one Guard, hence one breaker, so an
// outage is detected once. Its hooks and Stats feed metrics.
func ExampleGuard() {
	guard, err := failover.NewGuard(downStore{}, failover.GuardOptions{
		Timeout:     50 * time.Millisecond,
		FailureRate: 0.5, // open when half the calls of the window fail...
		MinCalls:    3,   // ...and it holds at least 3
		OnError: func(e *failover.Error) {
			// e.g. errorsTotal.WithLabelValues(e.Policy, string(e.Op)).Inc()
		},
		OnStateChange: func(from, to failover.BreakerState) {
			fmt.Println("breaker:", from, "->", to)
		},
	})
	if err != nil {
		panic(err)
	}
	open, _ := failover.New(guard, failover.Options{Mode: failover.FailOpen})
	closed, _ := failover.New(guard, failover.Options{Mode: failover.FailClosed})
	search, _ := floodgate.New(open, floodgate.Policy{Name: "search", Limits: []floodgate.Limit{floodgate.PerSecond(50)}})
	login, _ := floodgate.New(closed, floodgate.Policy{Name: "login", Limits: []floodgate.Limit{floodgate.PerMinute(5)}})

	ctx := context.Background()
	for range 2 {
		floodgate.Allow(ctx, search, "203.0.113.7")
		floodgate.Allow(ctx, login, "203.0.113.7")
	}
	st := guard.Stats()
	fmt.Printf("state %s, opened %d, calls %d, skipped %d, decide failures %d\n",
		st.State, st.Opened, st.Calls, st.Skipped, st.Failures.Decide)
	// Output:
	// breaker: closed -> open
	// state open, opened 1, calls 3, skipped 1, decide failures 3
}
