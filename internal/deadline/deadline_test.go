package deadline

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestWith(t *testing.T) {
	past := time.Now().Add(-time.Millisecond)
	ctx := With(context.Background(), past)
	if d, ok := ctx.Deadline(); !ok || !d.Equal(past) {
		t.Fatalf("Deadline() = %v, %v; want %v, true", d, ok, past)
	}
	if err := ctx.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Err() past the deadline = %v, want context.DeadlineExceeded", err)
	}
	future := With(context.Background(), time.Now().Add(time.Hour))
	if err := future.Err(); err != nil {
		t.Fatalf("Err() before the deadline = %v", err)
	}
	parent, cancel := context.WithCancel(context.Background())
	c := With(parent, time.Now().Add(time.Hour))
	if c.Done() != parent.Done() {
		t.Fatal("Done is not the parent's")
	}
	cancel()
	if err := c.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Err() after the parent's cancel = %v", err)
	}
	// An earlier deadline of the parent wins: the parent is returned.
	early, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(time.Minute))
	defer cancel2()
	if got := With(early, time.Now().Add(time.Hour)); got != early {
		t.Fatal("a later deadline replaced the parent's earlier one")
	}
}

// TestWithAllocs: one small allocation, no timer, no channel.
func TestWithAllocs(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	at := time.Now().Add(time.Hour)
	if n := testing.AllocsPerRun(100, func() { _ = With(parent, at).Err() }); n > 1 {
		t.Fatalf("With allocates %v times, want at most 1", n)
	}
}
