package lease_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/testkit"
)

func newSet(t testing.TB, limits ...floodgate.Limit) *algo.Set {
	t.Helper()
	set, err := floodgatetest.NewSet("p", "", limits...)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func newLease(t testing.TB, remote floodgate.Store, o lease.Options) *lease.Store {
	t.Helper()
	s, err := lease.New(remote, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newMem(t testing.TB) *memstore.Store {
	m := memstore.New(memstore.Options{})
	t.Cleanup(func() { m.Close() })
	return m
}

// perHour is a fixed window long enough that no test crosses it by
// chance... unless it runs at the end of an hour: tests that need the
// window to hold call waitWindow first.
var perHour = floodgate.Limit{Rate: 1000, Period: time.Hour, Algorithm: floodgate.FixedWindow}

// waitWindow returns once at least 20s of the current window are left.
func waitWindow(t testing.TB) {
	if left := perHour.Period - time.Duration(time.Now().UnixNano()%int64(perHour.Period)); left < 20*time.Second {
		t.Logf("waiting %s for the next window", left)
		time.Sleep(left)
	}
}

// hot decides key until a decision comes from a lease, and returns how
// many units were admitted on the way.
func hot(t testing.TB, s *lease.Store, set *algo.Set, key string) (admitted int64) {
	t.Helper()
	ctx := context.Background()
	testkit.Eventually(t, 5*time.Second, "a decision from a lease", func() bool {
		v, err := s.Decide(ctx, set, key, 1)
		if err != nil {
			t.Fatal(err)
		}
		if v.Allowed {
			admitted++
		}
		return v.Source == lease.Source
	})
	return admitted
}

func peek(t testing.TB, st floodgate.Store, set *algo.Set, key string) algo.Verdict {
	t.Helper()
	v, err := st.Decide(context.Background(), set, key, 0)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestKeySeenOnceIsExact(t *testing.T) {
	mem := newMem(t)
	s := newLease(t, mem, lease.Options{})
	set := newSet(t, perHour)
	v, err := s.Decide(context.Background(), set, "once", 1)
	if err != nil || !v.Allowed || v.Source != memstore.Source {
		t.Fatalf("first decision = %+v, %v; want allowed by the remote store", v, err)
	}
	if h := s.Held(); h != 0 {
		t.Fatalf("a key seen once holds %d units; want none", h)
	}
}

func TestHotKeyLeasesAndRefundsOnClose(t *testing.T) {
	waitWindow(t)
	mem := newMem(t)
	s, err := lease.New(mem, lease.Options{TTL: time.Minute, MaxLease: 50})
	if err != nil {
		t.Fatal(err)
	}
	set := newSet(t, perHour)
	admitted := hot(t, s, set, "k")
	held := s.Held()
	if held <= 0 || held > 50 {
		t.Fatalf("held %d units; want 1..50 (MaxLease)", held)
	}
	// What the remote store saw: every admission and the held units.
	if got, want := peek(t, mem, set, "k").Remaining, perHour.Rate-admitted-held; got != want {
		t.Fatalf("remote remaining %d; want %d (rate − %d admitted − %d held)", got, want, admitted, held)
	}
	// A decision from the block reports the shared state as last seen
	// less local use: never below what the remote store has left now,
	// never above what this instance has not used.
	v, _ := s.Decide(context.Background(), set, "k", 1)
	if v.Allowed {
		admitted++
	}
	if remote := peek(t, mem, set, "k").Remaining; v.Source == lease.Source && (v.Remaining < remote || v.Remaining > perHour.Rate-admitted) {
		t.Fatalf("leased decision reports remaining %d; want %d..%d", v.Remaining, remote, perHour.Rate-admitted)
	}
	s.Close()
	if h := s.Held(); h != 0 {
		t.Fatalf("held %d after Close", h)
	}
	if got, want := peek(t, mem, set, "k").Remaining, perHour.Rate-admitted; got != want {
		t.Fatalf("after Close the remote has %d remaining; want %d: every unused unit refunded", got, want)
	}
}

func TestCostAboveBlockGoesRemote(t *testing.T) {
	waitWindow(t)
	mem := newMem(t)
	s := newLease(t, mem, lease.Options{TTL: time.Minute, MaxLease: 4})
	set := newSet(t, perHour)
	hot(t, s, set, "k")
	before := peek(t, mem, set, "k").Remaining
	v, err := s.Decide(context.Background(), set, "k", 10)
	if err != nil || !v.Allowed || v.Source != memstore.Source {
		t.Fatalf("cost 10 over a block of at most 4: %+v, %v; want decided by the remote store", v, err)
	}
	if after := peek(t, mem, set, "k").Remaining; after > before-10 {
		t.Fatalf("remote remaining %d after a remote charge of 10 from %d", after, before)
	}
}

func TestResetDropsBlocks(t *testing.T) {
	mem := newMem(t)
	s := newLease(t, mem, lease.Options{TTL: time.Minute})
	set := newSet(t, floodgate.Limit{Rate: 100, Period: time.Minute})
	hot(t, s, set, "k")
	if err := s.Reset(context.Background(), set, "k"); err != nil {
		t.Fatal(err)
	}
	if h := s.Held(); h != 0 {
		t.Fatalf("held %d after Reset", h)
	}
	v, err := s.Decide(context.Background(), set, "k", 1)
	if err != nil || v.Source == lease.Source {
		t.Fatalf("first decision after Reset = %+v, %v; want the remote store's", v, err)
	}
	if v.Remaining != 99 {
		t.Fatalf("remaining %d after Reset and one request; want 99", v.Remaining)
	}
	// A reset key is as a key seen for the first time: its first request
	// takes no block beside it (one was taken in the background, racing
	// the request to the remote store, when the key's demand outlived
	// the reset).
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := peek(t, mem, set, "k").Remaining; got != 99 {
		t.Fatalf("remote remaining %d once the store closed; want 99: a block was leased after the reset", got)
	}
}

func TestSlidingLogNeverLeased(t *testing.T) {
	mem := newMem(t)
	s := newLease(t, mem, lease.Options{})
	set := newSet(t, floodgate.Limit{Rate: 1000, Period: time.Minute, Algorithm: floodgate.SlidingLog})
	for range 500 {
		v, err := s.Decide(context.Background(), set, "k", 1)
		if err != nil || v.Source != memstore.Source {
			t.Fatalf("sliding_log decision %+v, %v; want the remote store's", v, err)
		}
	}
	if s.Held() != 0 {
		t.Fatal("a sliding_log set holds a lease")
	}
}

// TestMinLease: a key with fewer than MinLease units of demand in a
// Horizon takes no block (it would cost Redis a lease and a refund for a
// unit or two); at MinLease it does. A key's first decision only marks it
// seen: its demand is counted from the second.
func TestMinLease(t *testing.T) {
	waitWindow(t)
	mem := newMem(t)
	s := newLease(t, mem, lease.Options{Horizon: 10 * time.Second, TTL: time.Hour})
	set := newSet(t, perHour)
	for i := range lease.DefaultMinLease {
		if v, _ := s.Decide(context.Background(), set, "k", 1); v.Source != memstore.Source {
			t.Fatalf("decision %d of a key was answered by %q", i+1, v.Source)
		}
	}
	if got := peek(t, mem, set, "k").Remaining; s.Held() != 0 || got != perHour.Rate-lease.DefaultMinLease {
		t.Fatalf("after %d decisions: %d units held, %d left remotely; want no block", lease.DefaultMinLease, s.Held(), got)
	}
	if _, err := s.Decide(context.Background(), set, "k", 1); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "a block at MinLease units of demand", func() bool { return s.Held() > 0 })
}

// TestColdKeysKeepNoEntries: keys decided once each (10k keys under
// random load) get no entry: no map insertion, no demand count, nothing
// for the janitor to sweep every Horizon.
func TestColdKeysKeepNoEntries(t *testing.T) {
	mem := newMem(t)
	s := newLease(t, mem, lease.Options{Horizon: time.Hour})
	set := newSet(t, floodgate.Limit{Rate: 1_000_000, Period: time.Hour, Algorithm: floodgate.GCRA})
	for i := range 5000 {
		if _, err := s.Decide(context.Background(), set, "k"+strconv.Itoa(i), 1); err != nil {
			t.Fatal(err)
		}
	}
	// A slot shared with an earlier key makes an entry a decision early:
	// 5000 keys in 16384 slots share a few hundred.
	if n := s.Keys(); n > 1000 {
		t.Fatalf("%d entries for 5000 keys decided once each", n)
	}
	for range 2 {
		if _, err := s.Decide(context.Background(), set, "again", 1); err != nil {
			t.Fatal(err)
		}
	}
	if s.Keys() == 0 {
		t.Fatal("a key decided twice within a Horizon has no entry")
	}
}

func TestCapOffPolicy(t *testing.T) {
	mem := newMem(t)
	s := newLease(t, mem, lease.Options{Cap: func(p string) int64 { return -1 }})
	set := newSet(t, perHour)
	for range 300 {
		if v, _ := s.Decide(context.Background(), set, "k", 1); v.Source != memstore.Source {
			t.Fatalf("a policy whose cap is off was answered by %q", v.Source)
		}
	}
}

// TestDemandDropRefunds: a key that stops being asked about gives its
// units back without Close.
func TestDemandDropRefunds(t *testing.T) {
	waitWindow(t)
	mem := newMem(t)
	s := newLease(t, mem, lease.Options{TTL: time.Minute, Horizon: 10 * time.Millisecond, MinLease: 2})
	set := newSet(t, perHour)
	admitted := hot(t, s, set, "k")
	testkit.Eventually(t, 5*time.Second, "units back once demand stopped", func() bool {
		return s.Held() == 0 && peek(t, mem, set, "k").Remaining == perHour.Rate-admitted
	})
}

func TestTTLExpiryRefunds(t *testing.T) {
	waitWindow(t)
	mem := newMem(t)
	s := newLease(t, mem, lease.Options{TTL: 30 * time.Millisecond, Horizon: time.Second})
	set := newSet(t, perHour)
	admitted := hot(t, s, set, "k")
	testkit.Eventually(t, 5*time.Second, "units back at TTL", func() bool {
		return s.Held() == 0 && peek(t, mem, set, "k").Remaining == perHour.Rate-admitted
	})
}

// TestMaxKeys: keys beyond MaxKeys are decided remotely and the Store's
// memory stays bounded.
func TestMaxKeys(t *testing.T) {
	mem := newMem(t)
	s := newLease(t, mem, lease.Options{MaxKeys: 640})
	set := newSet(t, perHour)
	for i := range 20_000 {
		if _, err := s.Decide(context.Background(), set, fmt.Sprintf("key-%d", i), 1); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Keys(); n > 640 {
		t.Fatalf("tracks %d keys; MaxKeys is 640", n)
	}
	s.Close()
	if n := s.Keys(); n != 0 {
		t.Fatalf("tracks %d keys after Close", n)
	}
}

func TestRefusesBadOptions(t *testing.T) {
	if _, err := lease.New(nil, lease.Options{}); err == nil {
		t.Fatal("lease.New accepted a nil store")
	}
	if _, err := lease.New(newMem(t), lease.Options{MaxFraction: 2}); err == nil {
		t.Fatal("lease.New accepted MaxFraction 2")
	}
}

// TestRedisDownWhileLeaseValid: the units of a valid block are answered
// while Redis is down (they were charged while it was up); once the block
// is used up the failure mode of the failover.Store decides, as without
// leases, and no block is made of its verdicts.
func TestRedisDownWhileLeaseValid(t *testing.T) {
	srv := testkit.Redis(t)
	rs := newRedisStore(t, srv.Addr, "down:")
	fs, err := failover.New(rs, failover.Options{Mode: failover.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	s := newLease(t, fs, lease.Options{TTL: time.Minute, MaxLease: 100, MaxFraction: 1})
	set := newSet(t, floodgate.Limit{Rate: 100_000, Period: time.Hour})
	hot(t, s, set, "k")
	srv.Kill()
	ctx := context.Background()
	var fromLease, failed int
	for range 5000 {
		v, err := s.Decide(ctx, set, "k", 1)
		switch {
		case err != nil:
			t.Fatal(err)
		case v.Source == lease.Source && v.Allowed:
			fromLease++
		case v.Source == string(floodgate.SourceFailClosed):
			failed++
		}
		if failed > 3 {
			break
		}
	}
	if fromLease == 0 || failed == 0 {
		t.Fatalf("with Redis down: %d decisions from the lease, %d fail-closed; want the block used, then the failure mode", fromLease, failed)
	}
}

// TestFailOpenMakesNoBlock: a fail-open verdict charged nothing in Redis,
// so it is never leased.
func TestFailOpenMakesNoBlock(t *testing.T) {
	srv := testkit.Redis(t)
	rs := newRedisStore(t, srv.Addr, "open:")
	fs, err := failover.New(rs, failover.Options{Mode: failover.FailOpen})
	if err != nil {
		t.Fatal(err)
	}
	s := newLease(t, fs, lease.Options{})
	set := newSet(t, floodgate.Limit{Rate: 100_000, Period: time.Hour})
	srv.Kill()
	for range 500 {
		v, err := s.Decide(context.Background(), set, "k", 1)
		if err != nil || v.Source != string(floodgate.SourceFailOpen) {
			t.Fatalf("decision with Redis down: %+v, %v; want fail-open", v, err)
		}
	}
	if h := s.Held(); h != 0 {
		t.Fatalf("holds %d units made of fail-open verdicts", h)
	}
}
