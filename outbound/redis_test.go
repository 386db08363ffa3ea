package outbound_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/outbound"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/testkit"
)

// instance is what one process of a service builds: its own Redis client,
// a budget in redisstore and pauses in RedisPauses, both on the shared
// Redis.
func instance(t *testing.T, addr string, o outbound.Options) (*outbound.Transport, floodgate.Limiter, *outbound.RedisPauses) {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	store, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	lim, err := floodgate.New(store, floodgate.Policy{Name: "partner-api", Limits: []floodgate.Limit{floodgate.PerHour(3)}})
	if err != nil {
		t.Fatal(err)
	}
	pauses, err := outbound.NewRedisPauses(client, outbound.RedisPausesOptions{})
	if err != nil {
		t.Fatal(err)
	}
	o.Limiter, o.Pauses = lim, pauses
	return newTransport(t, o), lim, pauses
}

// Two instances calling one API share one budget: together they send the
// budget's three requests, and the fourth, from either, waits (here: fails
// at once, its deadline being shorter than the hour it would wait).
func TestRedisSharedBudget(t *testing.T) {
	srv := testkit.Redis(t)
	up := newUpstream(t, func(int, http.ResponseWriter, *http.Request) {})
	a, _, _ := instance(t, srv.Addr, outbound.Options{})
	b, _, _ := instance(t, srv.Addr, outbound.Options{})
	ctx := within(t, 30*time.Second)
	for _, tr := range []*outbound.Transport{a, b, a} {
		if code, _ := do(t, tr.Client(), get(t, ctx, up.URL)); code != 200 {
			t.Fatalf("got %d; want 200", code)
		}
	}
	for name, tr := range map[string]*outbound.Transport{"a": a, "b": b} {
		if _, err := tr.Client().Do(get(t, within(t, 10*time.Second), up.URL)); !errors.Is(err, outbound.ErrDeadline) {
			t.Errorf("instance %s: err = %v; want ErrDeadline, the shared budget being spent", name, err)
		}
	}
	if n := len(up.seen()); n != 3 {
		t.Errorf("upstream saw %d; want the budget's 3", n)
	}
}

// One instance's 429 pauses the other: b never sends while the pause a
// was given holds, and its request fails at once when its deadline is
// shorter than the pause.
func TestRedisSharedPause(t *testing.T) {
	srv := testkit.Redis(t)
	up := newUpstream(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "60")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	a, _, _ := instance(t, srv.Addr, outbound.Options{MaxRetries: -1})
	b, _, _ := instance(t, srv.Addr, outbound.Options{})
	if code, _ := do(t, a.Client(), get(t, within(t, 30*time.Second), up.URL)); code != 429 {
		t.Fatalf("got %d; want 429", code)
	}
	_, err := b.Client().Do(get(t, within(t, 10*time.Second), up.URL))
	if !errors.Is(err, outbound.ErrDeadline) || !strings.Contains(err.Error(), "paused") {
		t.Fatalf("err = %v; want ErrDeadline for a pause", err)
	}
	if n := len(up.seen()); n != 1 {
		t.Errorf("upstream saw %d; want 1: b was paused by a's 429", n)
	}
	// The pause is one key whose TTL ends it.
	ttl, err := srv.Do("PTTL", outbound.DefaultPausePrefix+strings.TrimPrefix(up.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if ms, _ := ttl.(int64); ms <= 0 || ms > 60_000 {
		t.Errorf("pause key PTTL %v; want within (0, 60000]", ttl)
	}
}

// A pause only ever lengthens: a shorter one written later leaves the
// longer in place.
func TestRedisPauseOnlyLengthens(t *testing.T) {
	srv := testkit.Redis(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer client.Close()
	p, err := outbound.NewRedisPauses(client, outbound.RedisPausesOptions{Prefix: "t:"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p.Pause(ctx, "api", time.Now().Add(time.Minute))
	other, _ := outbound.NewRedisPauses(client, outbound.RedisPausesOptions{Prefix: "t:"})
	other.Pause(ctx, "api", time.Now().Add(time.Second))
	if d := time.Until(other.PausedUntil(ctx, "api")); d < 50*time.Second {
		t.Errorf("pause ends in %s; want the minute set first", d)
	}
}

// With Redis down, pauses are kept per instance: the instance that got
// the 429 still obeys it, no request fails for Redis' sake, and the
// failures are counted by the Guard. The Redis is an address that refuses
// every connection, so no server of another test can take its port.
func TestRedisDownFallsBackToLocal(t *testing.T) {
	var refused time.Time
	up := newUpstream(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 0 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			refused = time.Now()
			return
		}
		io.WriteString(w, "ok")
	})
	client := redis.NewClient(&redis.Options{Addr: testkit.RefusingAddr(t), MaxRetries: -1})
	defer client.Close()
	pauses, err := outbound.NewRedisPauses(client, outbound.RedisPausesOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := newTransport(t, outbound.Options{Pauses: pauses}).Client()
	code, _ := do(t, c, get(t, within(t, 30*time.Second), up.URL))
	if code != 200 {
		t.Fatalf("got %d; want the retry's 200", code)
	}
	if seen := up.seen(); len(seen) != 2 || seen[1].at.Sub(refused) < time.Second {
		t.Errorf("upstream saw %d requests; the retry must come a second after the 429", len(seen))
	}
	if s := pauses.Stats(); s.Failures.Decide == 0 {
		t.Errorf("Guard stats %+v; want the refused connections counted", s)
	}
}

// A Redis killed while in use: the same fallback.
func TestRedisKilled(t *testing.T) {
	srv := testkit.Redis(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer client.Close()
	pauses, err := outbound.NewRedisPauses(client, outbound.RedisPausesOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if !pauses.PausedUntil(ctx, "api").IsZero() {
		t.Fatal("paused before any pause")
	}
	srv.Kill()
	until := time.Now().Add(time.Minute)
	pauses.Pause(ctx, "api", until)
	if got := pauses.PausedUntil(ctx, "api"); !got.Equal(until) {
		t.Errorf("PausedUntil = %v with Redis killed; want the local pause %v", got, until)
	}
	if !pauses.PausedUntil(ctx, "other").IsZero() {
		t.Error("an upstream never paused reads as paused with Redis killed")
	}
}
