package override_test

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/override"
)

// BenchmarkAllow: what the override layer adds to a decision on the memory
// engine: the policy's limiter alone, wrapped over an empty table, with an
// entry for another key of the policy, and deciding the key of an entry.
func BenchmarkAllow(b *testing.B) {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	base, err := floodgate.New(store, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerSecond(1_000_000_000).WithBurst(1 << 40)}})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	entry := func(key string) override.Entry {
		return override.Entry{Policy: "api", Key: key, Multiplier: 2, Created: now, Expires: now.Add(time.Hour)}
	}
	empty := override.NewTable(override.NewMemory(), override.Options{})
	other := override.NewTable(override.NewMemory(), override.Options{})
	if err := other.Put(ctx, entry("someone-else")); err != nil {
		b.Fatal(err)
	}
	mine := override.NewTable(override.NewMemory(), override.Options{})
	if err := mine.Put(ctx, entry("user:42")); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		lim  floodgate.Limiter
	}{
		{"limiter", base},
		{"empty-table", empty.Limiter(base)},
		{"entry-for-another-key", other.Limiter(base)},
		{"entry-for-the-key", mine.Limiter(base)},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if res, err := c.lim.AllowN(ctx, "user:42", 1); err != nil || !res.Allowed {
					b.Fatal(res, err)
				}
			}
		})
	}
}
