package failover_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/floodgatetest"
)

// With the remote store down, a reservation follows the store's mode:
// FailOpen grants the units at once, FailClosed refuses them (and a Wait
// whose deadline comes before the breaker's retry fails at once),
// LocalFallback books them on the local store, where a cancellation finds
// them; the breaker counts reservation failures as decisions.
func TestReserveFailureModes(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []failover.Mode{failover.FailOpen, failover.FailClosed, failover.LocalFallback} {
		t.Run(mode.String(), func(t *testing.T) {
			clock := floodgatetest.NewClock(floodgatetest.Start)
			remote := newFakeRemote(t, clock)
			remote.set(failing)
			o := failover.Options{Mode: mode, Guard: failover.GuardOptions{MinCalls: 1000}}
			if mode == failover.LocalFallback {
				o.Local = newMem(t, clock)
			}
			s, err := failover.New(remote, o)
			if err != nil {
				t.Fatal(err)
			}
			lim, err := floodgate.New(s, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerHour(1)}})
			if err != nil {
				t.Fatal(err)
			}
			dctx, cancel := context.WithTimeout(ctx, 10*time.Hour) // the clock stands still
			defer cancel()
			r1, err := lim.ReserveN(dctx, "k", 1)
			if err != nil {
				t.Fatal(err)
			}
			r2, err := lim.ReserveN(dctx, "k", 1)
			if err != nil {
				t.Fatal(err)
			}
			switch mode {
			case failover.FailOpen:
				if !r1.OK || !r2.OK || r2.Delay != 0 || r2.Result.Source != floodgate.SourceFailOpen {
					t.Fatalf("%+v; want the units at once, failed open", r2)
				}
			case failover.FailClosed:
				if r1.OK || r1.Result.Source != floodgate.SourceFailClosed {
					t.Fatalf("%+v; want a refusal, failed closed", r1)
				}
				short, cancel := context.WithTimeout(ctx, time.Millisecond)
				defer cancel()
				if _, err := floodgate.Wait(short, lim, "k"); !errors.Is(err, floodgate.ErrWaitDeadline) {
					t.Fatalf("Wait = %v, want ErrWaitDeadline", err)
				}
			case failover.LocalFallback:
				if !r1.OK || r1.Delay != 0 || !r2.OK || r2.Delay != time.Hour || r2.Result.Source != floodgate.SourceLocalFallback {
					t.Fatalf("%+v then %+v; want the local store's line", r1, r2)
				}
				if err := r2.Cancel(ctx); err != nil {
					t.Fatal(err)
				}
				r3, err := lim.ReserveN(dctx, "k", 1)
				if err != nil || !r3.OK || r3.Delay != time.Hour {
					t.Fatalf("after the cancel: %+v, %v; want the cancelled place again", r3, err)
				}
			}
			if st := s.Guard().Stats(); st.Failures.Decide == 0 {
				t.Errorf("the guard counted no failed reservation: %+v", st)
			}
		})
	}
}
