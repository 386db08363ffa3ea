package hybrid_test

import (
	"context"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/hybrid"
	"github.com/floodgate-go/floodgate/memstore"
)

// BenchmarkDecide measures the two paths of a hybrid decision, with an
// in-memory store standing in for Redis: "local-deny" is a key over its
// local share (what an abusive client costs), "global" a key the filter
// passes (the filter plus a guarded call).
func BenchmarkDecide(b *testing.B) {
	for _, bc := range []struct {
		name  string
		limit floodgate.Limit
	}{
		{"local-deny", floodgate.PerHour(10)},
		{"global", floodgate.PerSecond(100_000_000)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			global := memstore.New(memstore.Options{})
			local := memstore.New(memstore.Options{})
			b.Cleanup(func() { global.Close(); local.Close() })
			s, err := hybrid.New(local, global, hybrid.Options{Fraction: 0.5})
			if err != nil {
				b.Fatal(err)
			}
			lim := newLimiter(b, s, bc.limit)
			ctx := context.Background()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					floodgate.Allow(ctx, lim, "k")
				}
			})
		})
	}
}
