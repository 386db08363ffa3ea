package redisstore

import (
	"bufio"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/deadline"
	"github.com/floodgate-go/floodgate/testkit"
)

// TestRedisDownDefaultClient: a client with go-redis's defaults (three
// retries after a failed attempt) and a caller without a deadline get the
// error of the first failed attempt: the Store's script calls are not
// retried.
func TestRedisDownDefaultClient(t *testing.T) {
	addr := testkit.RefusingAddr(t) // bound, never listening: refused
	// How many dials one attempt makes (go-redis's pool retries a dial).
	once := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer once.Close()
	perAttempt := countDials(once)
	if once.Ping(context.Background()).Err() == nil {
		t.Fatal("something answers on a closed port")
	}

	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	dials := countDials(client)
	lim := newLimiter(t, newStore(t, client, Options{}), "down", floodgate.PerSecond(10))
	start := time.Now()
	_, err := floodgate.Allow(context.Background(), lim, "k")
	var ne net.Error
	if !errors.As(err, &ne) {
		t.Fatalf("error %v: want a network error", err)
	}
	if got, want := dials.Load(), perAttempt.Load(); got != want {
		t.Errorf("%d dials for one decision, want %d (one attempt): the script call was retried", got, want)
	}
	t.Logf("failed after %s: %v", time.Since(start), err)
}

// TestStalledRedisDefaultTimeout: a caller without a deadline, on a client
// whose reads wait up to ReadTimeout and then retry, gets an error after
// Options.Timeout when Redis holds every command.
func TestStalledRedisDefaultTimeout(t *testing.T) {
	srv := testkit.Redis(t)
	client := newClient(t, srv.Addr)
	s, err := New(client, Options{}) // not newStore: the default Timeout is under test
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	lim := newLimiter(t, s, "stall", floodgate.PerSecond(10))
	if _, err := floodgate.Allow(context.Background(), lim, "warm"); err != nil {
		t.Fatal(err)
	}
	srv.Pause(30 * time.Second)
	t.Cleanup(func() { srv.Do("CLIENT", "UNPAUSE") })
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := floodgate.Allow(context.Background(), lim, "k")
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error %v, want one wrapping context.DeadlineExceeded", err)
		}
		t.Logf("failed after %s: %v", time.Since(start), err)
	case <-time.After(10 * DefaultTimeout):
		t.Fatalf("no answer within %s, ten times DefaultTimeout", 10*DefaultTimeout)
	}
}

// TestNoRetryAfterTimeout: a script call that timed out on the client may
// still run on Redis; go-redis's retries (three by default) must not run it
// again, or one decision is charged several times.
func TestNoRetryAfterTimeout(t *testing.T) {
	srv := testkit.Redis(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { client.Close() })
	// Connections ready in the pool, as a busy service's client has them:
	// a retry takes one at once and sends the script again.
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client.Do(context.Background(), "blpop", "no-such-list", "0.05")
		}()
	}
	wg.Wait()
	lim := newLimiter(t, newStore(t, client, Options{Timeout: 5 * time.Second}), "retry", floodgate.PerHour(10))
	if _, err := lim.AllowN(context.Background(), "warm", 0); err != nil {
		t.Fatal(err)
	}
	slept := srv.DebugSleep(time.Second)
	waitAsleep(t, srv.Addr)
	start := time.Now()
	_, err := floodgate.Allow(context.Background(), lim, "k")
	if err == nil {
		t.Fatal("decided while redis slept")
	}
	t.Logf("failed after %s: %v", time.Since(start), err)
	if err := <-slept; err != nil {
		t.Fatal(err)
	}
	// Redis ran the request it read once it woke (or, had it seen the
	// connection close first, none): never more than once.
	res, err := lim.AllowN(context.Background(), "k", 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.Remaining < 9 {
		t.Errorf("%d remaining after one decision, want 9 or 10: the script ran %d times", res.Remaining, 10-res.Remaining)
	}
}

// waitAsleep returns once the server at addr leaves a PING unanswered for
// 50ms: the DEBUG SLEEP sent before has begun.
func waitAsleep(t *testing.T, addr string) {
	t.Helper()
	eventually(t, 2*time.Second, "redis asleep", func() bool {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return false
		}
		defer c.Close()
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			return false
		}
		_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		_, err = bufio.NewReader(c).ReadString('\n')
		var ne net.Error
		return errors.As(err, &ne) && ne.Timeout()
	})
}

// countDials counts the connections a client dials.
func countDials(c *redis.Client) *atomic.Int64 {
	n := &atomic.Int64{}
	c.AddHook(dialHook{n})
	return n
}

type dialHook struct{ n *atomic.Int64 }

func (h dialHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		h.n.Add(1)
		return next(ctx, network, addr)
	}
}
func (h dialHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h dialHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestStalledRedisDeadlineWithoutDone: a caller whose context carries a
// deadline but no channel closing at it (internal/deadline, as the
// failover Guard and the Envoy service hand out) gets an error wrapping
// context.DeadlineExceeded at the deadline when Redis holds every command,
// not after the Store's far later Options.Timeout.
func TestStalledRedisDeadlineWithoutDone(t *testing.T) {
	srv := testkit.Redis(t)
	client := newClient(t, srv.Addr)
	lim := newLimiter(t, newStore(t, client, Options{Timeout: time.Hour}), "stall", floodgate.PerSecond(10))
	if _, err := lim.AllowN(context.Background(), "warm", 1); err != nil {
		t.Fatal(err)
	}
	srv.Pause(30 * time.Second)
	t.Cleanup(func() { srv.Do("CLIENT", "UNPAUSE") })
	done := make(chan error, 1)
	const bound = 200 * time.Millisecond
	go func() {
		_, err := lim.AllowN(deadline.With(context.Background(), time.Now().Add(bound)), "k", 1)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error %v, want one wrapping context.DeadlineExceeded", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no answer within 20s of a %s deadline: the Store waited for a Done that never closes", bound)
	}
}
