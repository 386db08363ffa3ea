package override

import (
	"context"
	"hash/fnv"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/clock"
)

// DefaultRefresh is how often a Table asks its Store whether the entries
// changed, and so the longest an instance takes to apply an entry another
// instance put (plus one round trip to the store).
const DefaultRefresh = time.Second

// Options configure a Table.
type Options struct {
	// Refresh is how often the Store is asked for changes. 0 means
	// DefaultRefresh.
	Refresh time.Duration

	// Timeout bounds each call to the Store. 0 means Refresh.
	Timeout time.Duration

	// Clock tells when entries expire. Nil means clock.System.
	Clock clock.Clock

	// Logger receives failures to read the Store (once per outage) and
	// entries that cannot apply. Nil means slog.Default().
	Logger *slog.Logger
}

// A Table is one instance's view of a Store: the entries in force, read
// again whenever the Store's Version changes. Decisions read it without a
// lock. While the Store cannot be read, the Table keeps the entries it read
// last (each still ends at its expiry).
type Table struct {
	store Store
	o     Options
	cur   atomic.Pointer[snapshot]

	mu      sync.Mutex // serialises reading the store
	version uint64
	loaded  bool
	failing bool // the last read failed; logged once
}

// snapshot is the entries read at one Version, indexed for decisions.
type snapshot struct {
	list     []Entry // sorted (Sort), for listings
	byPolicy map[string]*policyEntries
	stamps   map[*Entry]string // what each entry is: its version and content
	byStamp  map[string]*Entry
}

type policyEntries struct {
	keys  map[string]*Entry
	tiers map[string]*Entry
}

// NewTable returns a Table over store. It holds no entries until Refresh
// (or Run) reads the store.
func NewTable(store Store, o Options) *Table {
	if o.Refresh <= 0 {
		o.Refresh = DefaultRefresh
	}
	if o.Timeout <= 0 {
		o.Timeout = o.Refresh
	}
	if o.Clock == nil {
		o.Clock = clock.System
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	t := &Table{store: store, o: o}
	t.cur.Store(newSnapshot(nil, 0))
	return t
}

func (t *Table) now() int64 { return t.o.Clock.UnixNano() }

// newSnapshot indexes the entries of es that have not expired at now.
func newSnapshot(es []Entry, now int64) *snapshot {
	s := &snapshot{byPolicy: map[string]*policyEntries{}, stamps: map[*Entry]string{}, byStamp: map[string]*Entry{}}
	for _, e := range es {
		if e.Expires.UnixNano() <= now {
			continue
		}
		s.list = append(s.list, e)
	}
	Sort(s.list)
	for i := range s.list {
		e := &s.list[i]
		pe := s.byPolicy[e.Policy]
		if pe == nil {
			pe = &policyEntries{keys: map[string]*Entry{}, tiers: map[string]*Entry{}}
			s.byPolicy[e.Policy] = pe
		}
		st := stamp(e)
		s.stamps[e], s.byStamp[st] = st, e
		if e.Tier != "" {
			pe.tiers[e.Tier] = e
		} else {
			pe.keys[e.Key] = e
		}
	}
	return s
}

// stamp names e's setting and content: two entries of one stamp apply
// the same limits under the same state, so a limiter built for one serves
// the other.
func stamp(e *Entry) string {
	b, _ := Marshal(*e)
	h := fnv.New64a()
	h.Write(b)
	return e.version() + "/" + strconv.FormatUint(h.Sum64(), 36)
}

// Refresh reads the store if its Version changed since the last read, and
// drops expired entries from the view.
func (t *Table) Refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, t.o.Timeout)
	defer cancel()
	t.mu.Lock()
	defer t.mu.Unlock()
	err := t.refresh(ctx)
	switch {
	case err != nil && !t.failing:
		t.failing = true
		t.o.Logger.Warn("runtime overrides: cannot read the store; applying the entries read last until it answers", "error", err)
	case err == nil && t.failing:
		t.failing = false
		t.o.Logger.Info("runtime overrides: the store answers again")
	}
	return err
}

func (t *Table) refresh(ctx context.Context) error {
	v, err := t.store.Version(ctx)
	if err != nil {
		return err
	}
	now := t.now()
	if t.loaded && v == t.version {
		if cur := t.cur.Load(); cur.expired(now) {
			t.cur.Store(newSnapshot(cur.list, now))
		}
		return nil
	}
	es, err := t.store.List(ctx)
	if err != nil {
		return err
	}
	t.cur.Store(newSnapshot(es, now))
	t.version, t.loaded = v, true
	return nil
}

func (s *snapshot) expired(now int64) bool {
	for i := range s.list {
		if s.list[i].Expires.UnixNano() <= now {
			return true
		}
	}
	return false
}

// Run refreshes the table every Options.Refresh until ctx ends.
func (t *Table) Run(ctx context.Context) {
	tick := time.NewTicker(t.o.Refresh)
	defer tick.Stop()
	for {
		_ = t.Refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Put stores e and applies it on this instance at once (unless the store
// cannot be read back right now: then at the next refresh); the others
// apply it at their next refresh. The error is the store's refusal only.
func (t *Table) Put(ctx context.Context, e Entry) error {
	if err := e.Validate(); err != nil {
		return err
	}
	if err := t.store.Put(ctx, e); err != nil {
		return err
	}
	t.refreshAfterChange(ctx)
	return nil
}

// refreshAfterChange reads the store after this instance changed it, so
// that the change applies here at once. The change is stored whatever the
// read says: a failed read only delays it to the next refresh, and is
// logged by Refresh, not returned.
func (t *Table) refreshAfterChange(ctx context.Context) { _ = t.Refresh(ctx) }

// Delete removes the entry of id, on this instance at once; the others
// drop it at their next refresh. It reports whether there was one.
func (t *Table) Delete(ctx context.Context, id ID) (bool, error) {
	ok, err := t.store.Delete(ctx, id)
	if err != nil {
		return false, err
	}
	t.refreshAfterChange(ctx)
	return ok, nil
}

// Entries returns the entries in force, sorted (Sort).
func (t *Table) Entries() []Entry {
	now := t.now()
	var out []Entry
	for _, e := range t.cur.Load().list {
		if e.Expires.UnixNano() > now {
			out = append(out, e)
		}
	}
	return out
}

// Get returns the entry of id in force, if there is one.
func (t *Table) Get(id ID) (Entry, bool) {
	pe := t.cur.Load().byPolicy[id.Policy]
	if pe == nil {
		return Entry{}, false
	}
	e := pe.keys[id.Key]
	if id.Tier != "" {
		e = pe.tiers[id.Tier]
	}
	if e == nil || e.Expires.UnixNano() <= t.now() {
		return Entry{}, false
	}
	return *e, true
}
