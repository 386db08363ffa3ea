package hybrid_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/hybrid"
)

// The course's numbers, "local 10/s burst 20, global 50/s burst 100", as
// two numbers per limit (Policy.Local), against the share-based form, on a
// frozen clock so that exactly the bursts pass: n instances behind a
// round-robin balancer, 400 requests from one client.
func TestPolicyLocalLimits(t *testing.T) {
	global := floodgate.PerSecond(50).WithBurst(100)
	local := floodgate.PerSecond(10).WithBurst(20)
	run := func(instances int, o hybrid.Options, p floodgate.Policy) (admitted int) {
		clock := newClock()
		guard, err := failover.NewGuard(newMem(t, clock), failover.GuardOptions{Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		lims := make([]*floodgate.PolicyLimiter, instances)
		for i := range lims {
			s, err := hybrid.New(newMem(t, clock), guard, o)
			if err != nil {
				t.Fatal(err)
			}
			if lims[i], err = floodgate.New(s, p); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 400 {
			if mustAllow(t, lims[i%instances], "client").Allowed {
				admitted++
			}
		}
		return admitted
	}
	course := floodgate.Policy{Name: "api", Limits: []floodgate.Limit{global}, Local: []floodgate.Limit{local}}
	// Two instances: the local bursts add up to 40 of the global 100.
	if got := run(2, hybrid.Options{}, course); got != 40 {
		t.Errorf("two instances with local 10/s burst 20 admitted %d, want 2 × 20", got)
	}
	// The pair assumes five replicas: their bursts add up to the global one.
	if got := run(5, hybrid.Options{}, course); got != 100 {
		t.Errorf("five instances with local 10/s burst 20 admitted %d, want the global 100", got)
	}
	// Sized for two instances (shares of 0.6 add up to more than the
	// limit), Redis decides: the global burst passes, no more.
	shared := floodgate.Policy{Name: "api", Limits: []floodgate.Limit{global}}
	if got := run(2, hybrid.Options{Fraction: hybrid.FractionFor(2, 1.2)}, shared); got != 100 {
		t.Errorf("two instances sized for two admitted %d, want the global 100", got)
	}
	// Local limits win over the store's fraction.
	if got := run(2, hybrid.Options{Fraction: 1}, course); got != 40 {
		t.Errorf("local limits beside a fraction of 1 admitted %d, want 2 × 20", got)
	}
}

func TestPolicyLocalLimitsRefused(t *testing.T) {
	mem := newMem(t, nil)
	s, err := hybrid.New(newMem(t, nil), mem, hybrid.Options{})
	if err != nil {
		t.Fatal(err)
	}
	g := floodgate.PerSecond(50).WithBurst(100)
	for _, tc := range []struct {
		name  string
		local []floodgate.Limit
		want  string
	}{
		{"faster", []floodgate.Limit{floodgate.PerSecond(60).WithBurst(20)}, "larger than its limit"},
		{"bigger burst", []floodgate.Limit{floodgate.PerSecond(10).WithBurst(200)}, "larger than its limit"},
		{"same rate over a shorter period", []floodgate.Limit{floodgate.PerMinute(50)}, ""},
		{"one too many", []floodgate.Limit{floodgate.PerSecond(10), floodgate.PerSecond(5)}, "one local limit for each limit"},
		{"invalid", []floodgate.Limit{{Rate: -1, Period: 1}}, "local limits"},
	} {
		_, err := floodgate.New(s, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{g}, Local: tc.local})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want it accepted", tc.name, err)
		case tc.want != "" && (!errors.Is(err, floodgate.ErrInvalidPolicy) && !errors.Is(err, floodgate.ErrInvalidLimit) || !strings.Contains(fmtErr(err), tc.want)):
			t.Errorf("%s: err %v, want one saying %q", tc.name, err, tc.want)
		}
	}
	// Without a fraction, limits that give no local ones are an error to
	// decide on, never a pass and never a filter of everything.
	lim, err := floodgate.New(s, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{g}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := floodgate.Allow(context.Background(), lim, "k"); err == nil || !strings.Contains(err.Error(), "no local limits") {
		t.Errorf("a policy without local limits on a store without a fraction: %v, want an error naming it", err)
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
