package redisstore

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/testkit"
)

// standalone starts a redis-server for t and returns a client of it.
func standalone(t testing.TB) *redis.Client {
	t.Helper()
	srv := testkit.Redis(t)
	return newClient(t, srv.Addr)
}

func newClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return c
}

// scriptCounter is a go-redis hook that counts the script calls a client
// sends, and the EVAL calls among them (the reloads after NOSCRIPT).
type scriptCounter struct {
	calls, evals, decisions atomic.Int64
}

func countScripts(c redis.UniversalClient) *scriptCounter {
	h := &scriptCounter{}
	c.AddHook(h)
	return h
}

func (h *scriptCounter) count(cmd redis.Cmder) {
	switch cmd.Name() {
	case "evalsha":
	case "eval":
		h.evals.Add(1)
	default:
		return
	}
	args := cmd.Args()
	if src, _ := args[1].(string); src == plainRefundSrc {
		return // not the batch script
	}
	h.calls.Add(1)
	nkeys, _ := args[2].(int)
	argv := len(args) - 3 - nkeys
	nsets, _ := args[3+nkeys+1].(int)
	setArgs := 0
	for i := 0; i < nsets; i++ {
		n, _ := args[3+nkeys+2+setArgs].(int)
		setArgs += 1 + 4*n
	}
	h.decisions.Add(int64((argv - 2 - setArgs) / 3))
}

func (h *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return next(ctx, cmds)
	}
}

// generous bounds a decision in tests that are not about timeouts: far
// above any scheduling delay of a starved machine, so that a slow decision
// there is not an error.
const generous = 30 * time.Second

// newStore returns a Store over client that t closes. A zero o.Timeout
// becomes generous instead of DefaultTimeout (1 s), which a loaded machine
// can take for one decision; tests of the default use New.
func newStore(t testing.TB, client redis.UniversalClient, o Options) *Store {
	t.Helper()
	if o.Timeout == 0 {
		o.Timeout = generous
	}
	s, err := New(client, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// limKey is the Redis key of limit i of lim's limits for key.
func limKey(prefix string, lim *floodgate.PolicyLimiter, key string, i int) string {
	return Key(prefix, lim.LimitsFor(key).Compiled(), key, i)
}
