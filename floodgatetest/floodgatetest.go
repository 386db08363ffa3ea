// Package floodgatetest is the conformance suite every floodgate engine
// passes: a table of cases, each a policy and a sequence of steps on a pinned
// clock with the exact Result each step must give. The in-memory and Redis
// engines run it; so can an engine of yours:
//
//	func TestConformance(t *testing.T) {
//		floodgatetest.Run(t, floodgatetest.Harness{
//			NewStore: func(t *testing.T, c clock.Clock) floodgate.Store { return mystore.New(c) },
//			Source:   "mystore",
//		})
//	}
//
// Expected values are exact to the microsecond, the finest resolution an
// engine must keep (Redis's clock ticks in microseconds).
package floodgatetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
	"github.com/floodgate-go/floodgate/clock"
)

// A Harness tells Run how to make the engine under test.
type Harness struct {
	// NewStore returns a fresh, empty Store whose decisions read time from
	// clock. Run calls it once per case.
	NewStore func(t *testing.T, clock clock.Clock) floodgate.Store

	// Source is the Source the store reports for the decisions it makes;
	// empty skips the check (for stores whose source varies).
	Source floodgate.Source
}

// A Case is a sequence of steps against fresh state.
type Case struct {
	Name string

	// Policies are the policies the steps use; a step names one by index.
	// Two policies of the same name share state, which lets a case look at
	// one limit of a multi-limit policy on its own.
	Policies []floodgate.Policy

	Steps []Step
}

// An Action is the Limiter method a Step calls.
type Action int

// The actions of a step.
const (
	DoAllow   Action = iota // AllowN(Key, Cost)
	DoRefund                // RefundN(Key, Cost)
	DoReset                 // Reset(Key)
	DoReserve               // ReserveN(Key, Cost) with a deadline MaxWait away (none when 0)
	DoCancel                // Cancel the reservation of step Ref
)

// DefaultKey is the key of a step that names none.
const DefaultKey = "client"

// A Step moves the clock, then performs one operation and checks its
// outcome.
type Step struct {
	Advance time.Duration
	Policy  int    // index into Case.Policies
	Key     string // DefaultKey when empty
	Do      Action
	Cost    int64
	Want    Want

	// MaxWait is how far a DoReserve's deadline lies; 0 means none.
	MaxWait time.Duration
	// Ref is the step (from 1) whose reservation a DoCancel cancels.
	Ref int
}

// Want is the expected outcome of a DoAllow or DoReserve step. For a
// reservation, Allowed is its OK, RetryAfter its Delay, and the rest its
// Result's.
type Want struct {
	Allowed    bool
	Remaining  int64
	ResetAfter time.Duration
	RetryAfter time.Duration
	Limit      int              // index of the driving limit in the policy's Limits (or in its override or tier)
	Source     floodgate.Source // expected source when not the harness's; SourcePolicy for impossible costs
	Err        error            // when set, the step must fail with an error wrapping it
}

// Run runs every case of Cases against the harness's engine, one subtest
// each, and checks that invalid policies are rejected at construction.
func Run(t *testing.T, h Harness) {
	t.Helper()
	for _, c := range Cases() {
		t.Run(c.Name, func(t *testing.T) { RunCase(t, h, c) })
	}
	t.Run("InvalidPolicies", func(t *testing.T) {
		clock := NewClock(Start)
		store := h.NewStore(t, clock)
		for _, ip := range InvalidPolicies() {
			_, err := floodgate.New(store, ip.Policy)
			if !errors.Is(err, ip.Err) {
				t.Errorf("%s: New error = %v, want one wrapping %v", ip.Name, err, ip.Err)
			}
		}
	})
}

// RunCase runs one case against a fresh store from h.
func RunCase(t *testing.T, h Harness, c Case) {
	t.Helper()
	ctx := context.Background()
	clock := NewClock(Start)
	store := h.NewStore(t, clock)
	lims := make([]*floodgate.PolicyLimiter, len(c.Policies))
	for i, p := range c.Policies {
		l, err := floodgate.New(store, p)
		if err != nil {
			t.Fatalf("policy %d: %v", i, err)
		}
		lims[i] = l
	}
	reservations := make(map[int]*floodgate.Reservation)
	for i, s := range c.Steps {
		clock.Advance(s.Advance)
		key := s.Key
		if key == "" {
			key = DefaultKey
		}
		lim := lims[s.Policy]
		where := fmt.Sprintf("step %d (t=+%s, %s key %.20q cost %d)", i+1, clock.Now().Sub(Start), actionName(s.Do), key, s.Cost)
		switch s.Do {
		case DoRefund:
			if err := lim.RefundN(ctx, key, s.Cost); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			continue
		case DoReset:
			if err := lim.Reset(ctx, key); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			continue
		case DoCancel:
			r := reservations[s.Ref]
			if r == nil {
				t.Fatalf("%s: step %d made no reservation", where, s.Ref)
			}
			if err := r.Cancel(ctx); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			continue
		case DoReserve:
			rctx, cancel := ctx, context.CancelFunc(func() {})
			if s.MaxWait > 0 {
				rctx, cancel = context.WithTimeout(ctx, s.MaxWait)
			}
			r, err := lim.ReserveN(rctx, key, s.Cost)
			cancel()
			if s.Want.Err != nil {
				if !errors.Is(err, s.Want.Err) {
					t.Fatalf("%s: error = %v, want one wrapping %v", where, err, s.Want.Err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			reservations[i+1] = r
			if r.OK != r.Result.Allowed || r.Delay != r.Result.RetryAfter {
				t.Fatalf("%s: OK %v and Delay %s disagree with the Result's %v and %s", where, r.OK, r.Delay, r.Result.Allowed, r.Result.RetryAfter)
			}
			checkResult(t, where, h, c.Policies[s.Policy], key, r.Result, s.Want)
			continue
		}
		got, err := lim.AllowN(ctx, key, s.Cost)
		if s.Want.Err != nil {
			if !errors.Is(err, s.Want.Err) {
				t.Fatalf("%s: error = %v, want one wrapping %v", where, err, s.Want.Err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		checkResult(t, where, h, c.Policies[s.Policy], key, got, s.Want)
	}
}

func actionName(a Action) string {
	switch a {
	case DoRefund:
		return "refund"
	case DoReset:
		return "reset"
	case DoReserve:
		return "reserve"
	case DoCancel:
		return "cancel"
	}
	return "allow"
}

func checkResult(t *testing.T, where string, h Harness, p floodgate.Policy, key string, got floodgate.Result, want Want) {
	t.Helper()
	limits, setName := p.Limits, ""
	if o, ok := p.Overrides[key]; ok {
		limits, setName = o, "override:"+key
	} else if p.TierOf != nil {
		tier := p.TierOf(key)
		if tl, ok := p.Tiers[tier]; ok {
			limits, setName = tl, "tier:"+tier
		}
	}
	wantSource := want.Source
	if wantSource == "" {
		wantSource = h.Source
	}
	var errs []string
	if got.Allowed != want.Allowed {
		errs = append(errs, fmt.Sprintf("Allowed = %v, want %v", got.Allowed, want.Allowed))
	}
	if got.Remaining != want.Remaining {
		errs = append(errs, fmt.Sprintf("Remaining = %d, want %d", got.Remaining, want.Remaining))
	}
	if got.ResetAfter != want.ResetAfter {
		errs = append(errs, fmt.Sprintf("ResetAfter = %s, want %s", got.ResetAfter, want.ResetAfter))
	}
	if got.RetryAfter != want.RetryAfter {
		errs = append(errs, fmt.Sprintf("RetryAfter = %s, want %s", fmtRetry(got.RetryAfter), fmtRetry(want.RetryAfter)))
	}
	if want.Limit < len(limits) && got.Limit != limits[want.Limit] {
		errs = append(errs, fmt.Sprintf("Limit = %s, want %s", got.Limit, limits[want.Limit]))
	}
	if got.Index != want.Limit {
		errs = append(errs, fmt.Sprintf("Index = %d, want %d", got.Index, want.Limit))
	}
	// Every field describes one limit: the set's limit at Index.
	switch {
	case got.Set == nil:
		errs = append(errs, "Set = nil, want the limit set that applied")
	case got.Set.Variant() != setName || got.Set.Policy() != p.Name:
		errs = append(errs, fmt.Sprintf("Set = %q of %q, want %q of %q", got.Set.Variant(), got.Set.Policy(), setName, p.Name))
	case got.Index < 0 || got.Index >= got.Set.Len() || got.Set.Limit(got.Index) != got.Limit:
		errs = append(errs, fmt.Sprintf("Set.Limit(%d) is not Limit %s", got.Index, got.Limit))
	}
	if wantSource != "" && got.Source != wantSource {
		errs = append(errs, fmt.Sprintf("Source = %q, want %q", got.Source, wantSource))
	}
	if got.Policy != p.Name {
		errs = append(errs, fmt.Sprintf("Policy = %q, want %q", got.Policy, p.Name))
	}
	for _, e := range errs {
		t.Errorf("%s: %s", where, e)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
}

func fmtRetry(d time.Duration) string {
	if d == floodgate.RetryNever {
		return "never"
	}
	return d.String()
}

// An InvalidPolicy is a policy New must reject with an error wrapping Err.
type InvalidPolicy struct {
	Name   string
	Policy floodgate.Policy
	Err    error
}

// InvalidPolicies lists policies that cannot work.
func InvalidPolicies() []InvalidPolicy {
	lim := func(l floodgate.Limit) floodgate.Policy {
		return floodgate.Policy{Name: "bad", Limits: []floodgate.Limit{l}}
	}
	nine := make([]floodgate.Limit, floodgate.MaxLimits+1)
	for i := range nine {
		nine[i] = floodgate.PerSecond(int64(i + 1))
	}
	return []InvalidPolicy{
		{"zero rate", lim(floodgate.PerSecond(0)), floodgate.ErrInvalidLimit},
		{"negative rate", lim(floodgate.PerSecond(-1)), floodgate.ErrInvalidLimit},
		{"zero period", lim(floodgate.Limit{Rate: 1}), floodgate.ErrInvalidLimit},
		{"negative period", lim(floodgate.Every(-time.Second)), floodgate.ErrInvalidLimit},
		{"negative burst", lim(floodgate.PerSecond(1).WithBurst(-1)), floodgate.ErrInvalidLimit},
		{"rate above one per nanosecond", lim(floodgate.Limit{Rate: 2, Period: time.Nanosecond}), floodgate.ErrInvalidLimit},
		{"interval rounded by more than 1%", lim(floodgate.PerSecond(600_000_000)), floodgate.ErrInvalidLimit},
		{"window with a burst", lim(floodgate.PerMinute(10).WithBurst(20).WithAlgorithm(floodgate.FixedWindow)), floodgate.ErrInvalidLimit},
		{"location on gcra", lim(floodgate.Limit{Rate: 1, Period: time.Hour, Location: time.UTC}), floodgate.ErrInvalidLimit},
		{"unknown algorithm", lim(floodgate.PerSecond(1).WithAlgorithm(99)), floodgate.ErrInvalidLimit},
		{"sliding log too large", lim(floodgate.PerSecond(algo.MaxSlidingLogRate + 1).WithAlgorithm(floodgate.SlidingLog)), floodgate.ErrInvalidLimit},
		{"bucket span too long", lim(floodgate.PerDay(1).WithBurst(1_000_000)), floodgate.ErrInvalidLimit},
		{"no name", floodgate.Policy{Limits: []floodgate.Limit{floodgate.PerSecond(1)}}, floodgate.ErrInvalidPolicy},
		{"no limits", floodgate.Policy{Name: "empty"}, floodgate.ErrInvalidPolicy},
		{"too many limits", floodgate.Policy{Name: "many", Limits: nine}, floodgate.ErrInvalidPolicy},
		{"empty override", floodgate.Policy{Name: "o", Limits: []floodgate.Limit{floodgate.PerSecond(1)}, Overrides: map[string][]floodgate.Limit{"vip": nil}}, floodgate.ErrInvalidPolicy},
		{"bad override", floodgate.Policy{Name: "o", Limits: []floodgate.Limit{floodgate.PerSecond(1)}, Overrides: map[string][]floodgate.Limit{"vip": {floodgate.PerSecond(0)}}}, floodgate.ErrInvalidLimit},
		{"tiers without TierOf", floodgate.Policy{Name: "t", Limits: []floodgate.Limit{floodgate.PerSecond(1)}, Tiers: map[string][]floodgate.Limit{"pro": {floodgate.PerSecond(5)}}}, floodgate.ErrInvalidPolicy},
	}
}
