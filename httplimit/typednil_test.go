package httplimit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/hybrid"
	"github.com/floodgate-go/floodgate/memstore"
)

// A store variable never assigned (a typed nil) is refused with an error
// by every constructor that takes a store, not a nil-pointer panic at
// start or at the first request. The one-liners' options have their own
// test in package quick.
func TestTypedNilStoreRefused(t *testing.T) {
	var guarded *failover.Store
	var mem *memstore.Store
	var guard *failover.Guard
	local := memstore.New(memstore.Options{})
	defer local.Close()
	policy := floodgate.Policy{Name: "p", Limits: []floodgate.Limit{{Rate: 1, Period: time.Second}}}
	for name, build := range map[string]func() error{
		"floodgate.New":           func() error { _, err := floodgate.New(guarded, policy); return err },
		"floodgate.New(memstore)": func() error { _, err := floodgate.New(mem, policy); return err },
		"failover.New":            func() error { _, err := failover.New(guarded, failover.Options{Mode: failover.FailOpen}); return err },
		"failover.New(Local)": func() error {
			_, err := failover.New(local, failover.Options{Mode: failover.LocalFallback, Local: mem})
			return err
		},
		"failover.NewGuard": func() error { _, err := failover.NewGuard(mem, failover.GuardOptions{}); return err },
		"hybrid.New(local)": func() error { _, err := hybrid.New(mem, local, hybrid.Options{}); return err },
		"hybrid.New(guard)": func() error { _, err := hybrid.New(local, guard, hybrid.Options{}); return err },
		"httplimit.New": func() error {
			var lim *floodgate.PolicyLimiter
			_, err := httplimit.New(httplimit.Config{Rules: []httplimit.Rule{{Limiter: lim}}})
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("panicked: %v", p)
				}
			}()
			if err := build(); err == nil || !strings.Contains(err.Error(), "nil") {
				t.Fatalf("error %v, want one naming the nil", err)
			}
		})
	}
}
