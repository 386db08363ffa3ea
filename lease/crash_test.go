package lease_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/testkit"
)

var crashLimits = map[string]floodgate.Limit{
	"gcra":         {Rate: 1000, Period: time.Second, Burst: 200},
	"fixed_window": {Rate: 400, Period: 400 * time.Millisecond, Algorithm: floodgate.FixedWindow},
}

// TestCrashedInstanceBudgetComesBack SIGKILLs a process that holds leases
// and checks that the units it held come back as docs/leases.md states:
// a bucket is full again at most Capacity×Interval after the kill, a
// window's units at the end of the window (at most Period) — the same
// time the state of any crashed instance takes, leases or not.
func TestCrashedInstanceBudgetComesBack(t *testing.T) {
	if addr := os.Getenv("LEASE_CRASH_REDIS"); addr != "" {
		crashChild(t, addr, os.Getenv("LEASE_CRASH_ALGO"))
		return
	}
	srv := testkit.Redis(t)
	for name, l := range crashLimits {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestCrashedInstanceBudgetComesBack$", "-test.v")
			cmd.Env = append(os.Environ(), "LEASE_CRASH_REDIS="+srv.Addr, "LEASE_CRASH_ALGO="+name)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			held := int64(-1)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if n, ok := strings.CutPrefix(sc.Text(), "HELD "); ok {
					held, _ = strconv.ParseInt(n, 10, 64)
					break
				}
			}
			if held <= 0 {
				t.Fatalf("the child reported no lease (held %d)", held)
			}
			if err := cmd.Process.Kill(); err != nil { // SIGKILL: no Close, no refund
				t.Fatal(err)
			}
			_ = cmd.Wait()
			set := newSet(t, l)
			rs := newRedisStore(t, srv.Addr, "crash:"+name+":")
			v := peek(t, rs, set, "k")
			bound := l.Period
			if l.Algorithm == floodgate.GCRA {
				bound = time.Duration(l.Capacity()) * l.Interval()
			}
			t.Logf("killed holding %d units: remote remaining %d, full again in %s (bound %s)", held, v.Remaining, v.ResetAfter, bound)
			if v.ResetAfter > bound {
				t.Fatalf("the units of the crashed instance come back in %s, after the stated bound %s", v.ResetAfter, bound)
			}
			testkit.Eventually(t, 10*bound+time.Second, "the whole capacity back", func() bool {
				return peek(t, rs, set, "k").Remaining == l.Capacity()
			})
		})
	}
}

// crashChild takes leases on key k and reports them, then waits to be
// killed.
func crashChild(t *testing.T, addr, algoName string) {
	l, ok := crashLimits[algoName]
	if !ok {
		t.Fatalf("unknown algorithm %q", algoName)
	}
	set := newSet(t, l)
	rs := newRedisStore(t, addr, "crash:"+algoName+":")
	s, err := lease.New(rs, lease.Options{TTL: time.Minute, MaxLease: 100, MaxFraction: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for s.Held() < 20 {
		if _, err := s.Decide(ctx, set, "k", 1); err != nil {
			t.Fatal(err)
		}
	}
	fmt.Printf("HELD %d\n", s.Held())
	select {}
}
