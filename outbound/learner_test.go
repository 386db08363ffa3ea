package outbound

import (
	"testing"
	"time"
)

// The AIMD rule on a clock of its own: a refusal halves the lowest of the
// learned, advertised and measured rates; refusals of requests sent before
// the decrease, and refusals with no admission since it, lower nothing; a
// run of admissions raises the rate by a step, never above the advertised
// rate.
func TestLearnerRule(t *testing.T) {
	l := &learner{min: 1.0 / 600}
	t0 := time.Unix(1_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

	l.observe(at(0), at(1), false, true, 40)
	if l.learned() != 0 {
		t.Fatalf("learned %v before any refusal; want nothing", l.learned())
	}
	if slot, ok := l.reserve(at(1), time.Time{}, false); !ok || !slot.Equal(at(1)) {
		t.Fatalf("unlearned slot %v, %v; want now", slot, ok)
	}
	l.observe(at(2), at(3), true, false, 40)
	if l.learned() != 20 {
		t.Fatalf("learned %v after a refusal at an advertised 40/s; want 20", l.learned())
	}
	l.observe(at(2), at(4), true, false, 40) // sent before the decrease
	l.observe(at(5), at(6), true, false, 40) // nothing admitted since it
	if l.learned() != 20 {
		t.Fatalf("learned %v; want still 20", l.learned())
	}
	// Paced at 20/s: slots 50 ms apart, a slot past the deadline not taken.
	s1, _ := l.reserve(at(10), time.Time{}, false)
	s2, _ := l.reserve(at(10), time.Time{}, false)
	if d := s2.Sub(s1); d != 50*time.Millisecond {
		t.Fatalf("slots %s apart; want 50ms", d)
	}
	if _, ok := l.reserve(at(10), at(20), true); ok {
		t.Fatal("a slot after the deadline was taken")
	}
	l.cancel(s2)
	if s3, _ := l.reserve(at(10), time.Time{}, false); !s3.Equal(s2) {
		t.Fatalf("slot %v after cancel; want the given-back %v", s3, s2)
	}
	for i := range learnRun {
		l.observe(at(100+i), at(101+i), false, true, 40)
	}
	if want := 20 + 40.0/learnSteps; l.learned() != want {
		t.Fatalf("learned %v after a run of admissions; want %v", l.learned(), want)
	}
	for i := range 100 * learnRun {
		l.observe(at(200+i), at(201+i), false, true, 40)
	}
	if l.learned() != 40 {
		t.Fatalf("learned %v after many runs; want the advertised 40", l.learned())
	}
	l.observe(at(5000), at(5001), false, true, 10)
	if l.learned() != 10 {
		t.Fatalf("learned %v once 10/s is advertised; want 10", l.learned())
	}
}
