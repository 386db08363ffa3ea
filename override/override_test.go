package override_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clock"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/override"
)

var ctx = context.Background()

// fakeTime is a settable clock for both the engine and the table.
type fakeTime struct{ ns atomic.Int64 }

func (f *fakeTime) UnixNano() int64     { return f.ns.Load() }
func (f *fakeTime) add(d time.Duration) { f.ns.Add(int64(d)) }
func (f *fakeTime) time() time.Time     { return time.Unix(0, f.ns.Load()) }
func newFakeTime() *fakeTime {
	f := &fakeTime{}
	f.ns.Store(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC).UnixNano())
	return f
}
func (f *fakeTime) entry(e override.Entry) override.Entry {
	e.Created = f.time()
	if e.Expires.IsZero() {
		e.Expires = e.Created.Add(time.Hour)
	}
	return e
}

// admitted counts how many of n requests of key pass.
func admitted(t *testing.T, l floodgate.Limiter, key string, n int) int {
	t.Helper()
	got := 0
	for range n {
		res, err := floodgate.Allow(ctx, l, key)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed {
			got++
		}
	}
	return got
}

type fixture struct {
	clk   *fakeTime
	table *override.Table
	lim   floodgate.Limiter
}

// newFixture builds policy "api": 3/min for every key, a file override of
// 10/min for "free:vip", and tier "free" (keys "free:...") at 1/min.
func newFixture(t *testing.T) *fixture {
	clk := newFakeTime()
	store := memstore.New(memstore.Options{Clock: clock.Clock(clk)})
	t.Cleanup(func() { store.Close() })
	base, err := floodgate.New(store, floodgate.Policy{
		Name:      "api",
		Limits:    []floodgate.Limit{floodgate.PerMinute(3)},
		Overrides: map[string][]floodgate.Limit{"free:vip": {floodgate.PerMinute(10)}},
		Tiers:     map[string][]floodgate.Limit{"free": {floodgate.PerMinute(1)}},
		TierOf: func(key string) string {
			if strings.HasPrefix(key, "free:") {
				return "free"
			}
			return ""
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	table := override.NewTable(override.NewMemory(), override.Options{Clock: clk})
	return &fixture{clk: clk, table: table, lim: table.Limiter(base)}
}

func (f *fixture) put(t *testing.T, e override.Entry) {
	t.Helper()
	if err := f.table.Put(ctx, f.clk.entry(e)); err != nil {
		t.Fatal(err)
	}
}

func TestKeyEntryGivesItsLimitsAndLeavesTheOldState(t *testing.T) {
	f := newFixture(t)
	if got := admitted(t, f.lim, "u1", 5); got != 3 {
		t.Fatalf("before the entry: %d of 5 passed, want 3", got)
	}
	f.put(t, override.Entry{Policy: "api", Key: "u1", Limits: []floodgate.Limit{floodgate.PerMinute(7)}, By: "alice", Reason: "INC-1"})
	// A raised limit starts full: its state is its own.
	if got := admitted(t, f.lim, "u1", 10); got != 7 {
		t.Fatalf("under the entry: %d of 10 passed, want 7", got)
	}
	if got := admitted(t, f.lim, "u2", 5); got != 3 {
		t.Fatalf("another key: %d of 5 passed, want 3", got)
	}
	d, ok := floodgate.As[floodgate.Describer](f.lim)
	if !ok {
		t.Fatal("the limiter is no Describer")
	}
	set := d.LimitsFor("u1")
	if id, ok := override.IDOf(set); !ok || id != (override.ID{Policy: "api", Key: "u1"}) || set.Limit(0) != floodgate.PerMinute(7) {
		t.Fatalf("LimitsFor(u1) = %s %v, want the runtime set of 7/min", set.Variant(), set.Limit(0))
	}
	if ok, err := f.table.Delete(ctx, override.ID{Policy: "api", Key: "u1"}); err != nil || !ok {
		t.Fatalf("Delete = %v, %v", ok, err)
	}
	// Back under the file's limits, the key meets the state it left.
	if got := admitted(t, f.lim, "u1", 1); got != 0 {
		t.Fatalf("after the delete: %d of 1 passed, want 0 (the file's 3/min were spent)", got)
	}
	f.clk.add(time.Minute)
	if got := admitted(t, f.lim, "u1", 5); got != 3 {
		t.Fatalf("a minute later: %d of 5 passed, want 3", got)
	}
}

func TestOrderAndMultipliers(t *testing.T) {
	f := newFixture(t)
	// A runtime tier entry multiplies the tier.
	f.put(t, override.Entry{Policy: "api", Tier: "free", Multiplier: 4})
	if got := admitted(t, f.lim, "free:a", 6); got != 4 {
		t.Fatalf("tier free ×4: %d of 6 passed, want 4", got)
	}
	// The file's override of a key wins over a runtime tier entry.
	if got := admitted(t, f.lim, "free:vip", 12); got != 10 {
		t.Fatalf("file override under a runtime tier entry: %d of 12 passed, want 10", got)
	}
	// A runtime key entry wins over both, and multiplies the file's
	// override of the key.
	f.put(t, override.Entry{Policy: "api", Key: "free:vip", Multiplier: 0.5})
	if got := admitted(t, f.lim, "free:vip", 8); got != 5 {
		t.Fatalf("file override ×0.5: %d of 8 passed, want 5", got)
	}
	// A key without tier is untouched by the tier entry.
	if got := admitted(t, f.lim, "plain", 5); got != 3 {
		t.Fatalf("default key: %d of 5 passed, want 3", got)
	}
	// An entry of another policy changes nothing here.
	f.put(t, override.Entry{Policy: "other", Key: "plain", Multiplier: 10})
	f.clk.add(time.Minute)
	if got := admitted(t, f.lim, "plain", 5); got != 3 {
		t.Fatalf("entry of another policy: %d of 5 passed, want 3", got)
	}
}

func TestExpiry(t *testing.T) {
	f := newFixture(t)
	f.put(t, override.Entry{Policy: "api", Key: "u", Multiplier: 2, Expires: f.clk.time().Add(10 * time.Minute)})
	if got := admitted(t, f.lim, "u", 8); got != 6 {
		t.Fatalf("under the entry: %d of 8 passed, want 6", got)
	}
	if n := len(f.table.Entries()); n != 1 {
		t.Fatalf("%d entries in force, want 1", n)
	}
	f.clk.add(10 * time.Minute)
	// Expired: the file's limits apply at once, before any refresh.
	if got := admitted(t, f.lim, "u", 5); got != 3 {
		t.Fatalf("after the expiry: %d of 5 passed, want 3", got)
	}
	if es := f.table.Entries(); len(es) != 0 {
		t.Fatalf("entries in force after the expiry: %v", es)
	}
	if _, ok := f.table.Get(override.ID{Policy: "api", Key: "u"}); ok {
		t.Fatal("Get finds an expired entry")
	}
}

func TestResetReachesBothStates(t *testing.T) {
	f := newFixture(t)
	admitted(t, f.lim, "u", 3)
	f.put(t, override.Entry{Policy: "api", Key: "u", Limits: []floodgate.Limit{floodgate.PerMinute(2)}})
	admitted(t, f.lim, "u", 2)
	if err := f.lim.Reset(ctx, "u"); err != nil {
		t.Fatal(err)
	}
	if got := admitted(t, f.lim, "u", 3); got != 2 {
		t.Fatalf("after a reset under the entry: %d of 3 passed, want 2", got)
	}
	f.table.Delete(ctx, override.ID{Policy: "api", Key: "u"})
	if got := admitted(t, f.lim, "u", 4); got != 3 {
		t.Fatalf("after the delete, the file's state was reset too: %d of 4 passed, want 3", got)
	}
}

func TestEntryValidation(t *testing.T) {
	now := time.Now()
	ok := override.Entry{Policy: "api", Key: "k", Multiplier: 2, Created: now, Expires: now.Add(time.Hour)}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid entry: %v", err)
	}
	for name, mut := range map[string]func(e *override.Entry){
		"no policy":       func(e *override.Entry) { e.Policy = "" },
		"key and tier":    func(e *override.Entry) { e.Tier = "free" },
		"neither":         func(e *override.Entry) { e.Key = "" },
		"both kinds":      func(e *override.Entry) { e.Limits = []floodgate.Limit{floodgate.PerSecond(1)} },
		"no kind":         func(e *override.Entry) { e.Multiplier = 0 },
		"negative mult":   func(e *override.Entry) { e.Multiplier = -1 },
		"huge mult":       func(e *override.Entry) { e.Multiplier = 1e9 },
		"expired at once": func(e *override.Entry) { e.Expires = now },
		"too long":        func(e *override.Entry) { e.Expires = now.Add(override.MaxTTL + time.Hour) },
		"long key":        func(e *override.Entry) { e.Key = strings.Repeat("k", override.MaxTargetLen+1) },
		"bad utf8":        func(e *override.Entry) { e.Reason = "\xff" },
		"bad limit": func(e *override.Entry) {
			e.Multiplier, e.Limits = 0, []floodgate.Limit{{Rate: 0, Period: time.Second}}
		},
	} {
		e := ok
		mut(&e)
		if err := e.Validate(); !errors.Is(err, override.ErrInvalid) {
			t.Errorf("%s: Validate = %v, want ErrInvalid", name, err)
		}
		if err := override.NewMemory().Put(ctx, e); !errors.Is(err, override.ErrInvalid) {
			t.Errorf("%s: Put = %v, want ErrInvalid", name, err)
		}
	}
}

func TestScale(t *testing.T) {
	in := []floodgate.Limit{
		floodgate.PerMinute(100).WithBurst(50),
		floodgate.PerHour(10).WithAlgorithm(floodgate.FixedWindow).WithBurst(10),
		floodgate.PerSecond(3),
	}
	got := override.Scale(in, 0.1)
	want := []floodgate.Limit{
		floodgate.PerMinute(10).WithBurst(5),
		floodgate.PerHour(1).WithAlgorithm(floodgate.FixedWindow).WithBurst(1),
		floodgate.PerSecond(1), // 0.3 rounds down to 0, and one unit is the least
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("Scale(%s, 0.1) = %s, want %s", in[i], got[i], want[i])
		}
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, time.Now().UnixNano())
	e := override.Entry{Policy: "api", Tier: "free", Limits: []floodgate.Limit{
		floodgate.PerSecond(5).WithBurst(9), floodgate.PerDay(1000).AlignedTo(berlin)},
		Created: now, Expires: now.Add(time.Hour), By: "bob", Reason: "trial"}
	b, err := override.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	back, err := override.Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.Policy != e.Policy || back.Tier != e.Tier || !back.Created.Equal(e.Created) || !back.Expires.Equal(e.Expires) ||
		back.By != e.By || back.Reason != e.Reason || len(back.Limits) != 2 ||
		back.Limits[0] != e.Limits[0] || back.Limits[1].String() != e.Limits[1].String() {
		t.Fatalf("round trip: %+v, want %+v", back, e)
	}
}

func FuzzUnmarshal(f *testing.F) {
	now := time.Now()
	b, _ := override.Marshal(override.Entry{Policy: "api", Key: "k", Limits: []floodgate.Limit{floodgate.PerMinute(5)}, Created: now, Expires: now.Add(time.Hour)})
	f.Add(b)
	f.Add([]byte(`{"policy":"p","key":"k","multiplier":2,"created":1,"expires":2}`))
	f.Add([]byte(`{"policy":"p","tier":"t","limits":[{"rate":1,"period":-5,"algorithm":"gcra"}],"created":1,"expires":2}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := override.Unmarshal(data)
		if err != nil {
			return
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("Unmarshal returned an entry that does not validate: %v", err)
		}
		again, err := override.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := override.Unmarshal(again); err != nil {
			t.Fatalf("a decoded entry does not decode again: %v", err)
		}
	})
}

// failingStore fails every call while down is set.
type failingStore struct {
	override.Store
	down atomic.Bool
}

var errDown = errors.New("store down")

func (s *failingStore) Version(ctx context.Context) (uint64, error) {
	if s.down.Load() {
		return 0, errDown
	}
	return s.Store.Version(ctx)
}

func TestTableKeepsEntriesWhileTheStoreFails(t *testing.T) {
	clk := newFakeTime()
	fs := &failingStore{Store: override.NewMemory()}
	table := override.NewTable(fs, override.Options{Clock: clk})
	e := clk.entry(override.Entry{Policy: "api", Key: "k", Multiplier: 2})
	if err := table.Put(ctx, e); err != nil {
		t.Fatal(err)
	}
	fs.down.Store(true)
	if err := table.Refresh(ctx); !errors.Is(err, errDown) {
		t.Fatalf("Refresh with the store down = %v", err)
	}
	if _, ok := table.Get(e.ID()); !ok {
		t.Fatal("the entry read last was dropped while the store fails")
	}
	clk.add(time.Hour)
	if _, ok := table.Get(e.ID()); ok {
		t.Fatal("an entry outlived its expiry while the store fails")
	}
}

func TestMemoryStoreBound(t *testing.T) {
	s := override.NewMemory()
	now := time.Now()
	for i := range override.MaxEntries {
		e := override.Entry{Policy: "p", Key: "k" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + time.Duration(i).String(), Multiplier: 2, Created: now, Expires: now.Add(time.Hour)}
		if err := s.Put(ctx, e); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
	}
	if err := s.Put(ctx, override.Entry{Policy: "p", Key: "one-more", Multiplier: 2, Created: now, Expires: now.Add(time.Hour)}); !errors.Is(err, override.ErrFull) {
		t.Fatalf("Put beyond MaxEntries = %v, want ErrFull", err)
	}
}

// TestEverySettingStartsFull: a second raise of a key, and an override put
// again after one was used up, start with state of their own.
func TestEverySettingStartsFull(t *testing.T) {
	f := newFixture(t)
	f.put(t, override.Entry{Policy: "api", Key: "u", Limits: []floodgate.Limit{floodgate.PerMinute(1)}})
	if got := admitted(t, f.lim, "u", 2); got != 1 {
		t.Fatalf("first setting: %d of 2 passed, want 1", got)
	}
	f.clk.add(time.Millisecond) // a later setting
	f.put(t, override.Entry{Policy: "api", Key: "u", Limits: []floodgate.Limit{floodgate.PerMinute(100)}})
	if got := admitted(t, f.lim, "u", 101); got != 100 {
		t.Fatalf("the raise after it: %d of 101 passed, want 100", got)
	}
}

// TestKeyMultiplierOverRuntimeTier: a key's multiplier multiplies what its
// tier's runtime entry gives it, as the order says.
func TestKeyMultiplierOverRuntimeTier(t *testing.T) {
	f := newFixture(t)
	f.put(t, override.Entry{Policy: "api", Tier: "free", Multiplier: 4}) // 1/min → 4/min
	f.put(t, override.Entry{Policy: "api", Key: "free:a", Multiplier: 2})
	if got := admitted(t, f.lim, "free:a", 10); got != 8 {
		t.Fatalf("free:a ×2 over tier free ×4: %d of 10 passed, want 8", got)
	}
	f.put(t, override.Entry{Policy: "api", Tier: "free", Limits: []floodgate.Limit{floodgate.PerMinute(3)}})
	if got := admitted(t, f.lim, "free:b", 5); got != 3 {
		t.Fatalf("free:b under tier free's 3/min: %d of 5 passed, want 3", got)
	}
	f.clk.add(time.Minute)
	if got := admitted(t, f.lim, "free:a", 10); got != 6 {
		t.Fatalf("free:a ×2 over tier free's 3/min: %d of 10 passed, want 6", got)
	}
}

// TestLongKeyByDigest: an override of the digest the engines and the
// status page show for a key longer than MaxKeyLen applies to that key.
func TestLongKeyByDigest(t *testing.T) {
	f := newFixture(t)
	long := strings.Repeat("k", floodgate.MaxKeyLen+1)
	f.put(t, override.Entry{Policy: "api", Key: floodgate.NormalizeKey(long), Multiplier: 2})
	if got := admitted(t, f.lim, long, 8); got != 6 {
		t.Fatalf("the long key under its digest's override: %d of 8 passed, want 6", got)
	}
}

// TestPutStoredWhenTheReadBackFails: a change the store took is not
// reported as failed because reading it back failed.
func TestPutStoredWhenTheReadBackFails(t *testing.T) {
	clk := newFakeTime()
	fs := &failingStore{Store: override.NewMemory()}
	table := override.NewTable(fs, override.Options{Clock: clk})
	fs.down.Store(true)
	e := clk.entry(override.Entry{Policy: "api", Key: "k", Multiplier: 2})
	if err := table.Put(ctx, e); err != nil {
		t.Fatalf("Put = %v, want nil: the store holds the entry", err)
	}
	if ok, err := table.Delete(ctx, e.ID()); err != nil || !ok {
		t.Fatalf("Delete = %v, %v, want true, nil", ok, err)
	}
}
