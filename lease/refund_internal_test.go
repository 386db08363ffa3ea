package lease

import (
	"math"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
)

// TestRefundableBucket: a bucket's refund leaves out what the bucket has
// refilled by itself since the charge, so it never gives back units that
// another instance's later charge now holds. A simulation on the
// transition checks the rule: after the refund, the bucket is never fuller
// than it would be had the unused units never been charged.
func TestRefundableBucket(t *testing.T) {
	l := floodgate.Limit{Rate: 1000, Period: time.Second, Burst: 20} // 1ms a unit
	tr, err := algo.New(l.Spec())
	if err != nil {
		t.Fatal(err)
	}
	set, err := algo.NewSet("p", "", []algo.Transition{tr})
	if err != nil {
		t.Fatal(err)
	}
	s := &Store{o: Options{RefundMargin: 0}}
	ms := int64(time.Millisecond)
	for size := int64(1); size <= 20; size++ {
		for used := int64(0); used <= size; used++ {
			for at := int64(0); at <= 30*ms; at += ms / 2 {
				for other := int64(0); other <= 5; other++ {
					b := block{size: size, left: size - used, charged: 0, refundBy: math.MaxInt64}
					u := s.refundable(set, b, at)
					// What the bucket holds: the block charged at 0, other
					// units charged by another instance at at.
					withBlock, _ := tr.Step(algo.State{}, 0, size)
					withBlock, d := tr.Step(withBlock, at, other)
					refunded := tr.Refund(withBlock, at, u)
					// Had only the used units been charged, and the other
					// units if they passed.
					exact, _ := tr.Step(algo.State{}, 0, used)
					if d.Allowed {
						exact, _ = tr.Step(exact, at, other)
					}
					if max(refunded.A, at) < max(exact.A, at) {
						t.Fatalf("size %d used %d other %d at %s: refund of %d leaves TAT %d below the exact %d",
							size, used, other, time.Duration(at), u, refunded.A, exact.A)
					}
				}
			}
		}
	}
}

func TestRefundableWindow(t *testing.T) {
	set := mustSet(t, floodgate.Limit{Rate: 100, Period: time.Second, Algorithm: floodgate.FixedWindow})
	s := &Store{o: Options{RefundMargin: 0}}
	b := block{size: 10, left: 4, refundBy: 100}
	if u := s.refundable(set, b, 50); u != 4 {
		t.Fatalf("refundable before the window ends = %d; want 4", u)
	}
	if u := s.refundable(set, b, 101); u != 0 {
		t.Fatalf("refundable after refundBy = %d; want 0", u)
	}
}

func mustSet(t *testing.T, l floodgate.Limit) *algo.Set {
	tr, err := algo.New(l.Spec())
	if err != nil {
		t.Fatal(err)
	}
	set, err := algo.NewSet("p", "", []algo.Transition{tr})
	if err != nil {
		t.Fatal(err)
	}
	return set
}
