package quick_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/httplimit/quick"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/redis/go-redis/v9"
)

// A store or client variable never assigned (a typed nil) is refused with
// an error naming the nil, not a nil-pointer panic at start or at the
// first request.
func TestTypedNilRefused(t *testing.T) {
	var shared *quick.SharedStore
	var mem *memstore.Store
	var client *redis.Client
	policy := floodgate.Policy{Name: "p", Limits: []floodgate.Limit{{Rate: 1, Period: time.Second}}}
	for name, build := range map[string]func() error{
		"ByIP(OnStore(SharedStore))": func() error { _, err := quick.ByIP(1, time.Second, quick.OnStore(shared)); return err },
		"ByIP(OnStore(memstore))":    func() error { _, err := quick.ByIP(1, time.Second, quick.OnStore(mem)); return err },
		"ByHeader(Redis)":            func() error { _, err := quick.ByHeader("X-Key", 1, time.Second, quick.Redis(client)); return err },
		"RedisStore":                 func() error { _, err := quick.RedisStore(client); return err },
		"floodgate.New(SharedStore)": func() error { _, err := floodgate.New(shared, policy); return err },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("panicked: %v", p)
				}
			}()
			err := build()
			if err == nil || !strings.Contains(err.Error(), "nil") {
				t.Fatalf("error %v, want one naming the nil", err)
			}
			if strings.HasPrefix(name, "floodgate.") {
				return
			}
			if !errors.Is(err, httplimit.ErrInvalidConfig) {
				t.Errorf("error %v is not httplimit.ErrInvalidConfig", err)
			}
		})
	}
}
