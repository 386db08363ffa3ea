package floodgate_test

import (
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
)

// TestResultFromFailureModeAndHasState: exactly fail-open, fail-closed and
// local-fallback are failure modes' decisions, and of those only
// local-fallback has state; a Result with no Set has none whatever its
// Source.
func TestResultFromFailureModeAndHasState(t *testing.T) {
	m := memstore.New(memstore.Options{})
	t.Cleanup(func() { m.Close() })
	lim, err := floodgate.New(m, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerSecond(5)}})
	if err != nil {
		t.Fatal(err)
	}
	set := lim.LimitsFor("k")
	for _, c := range []struct {
		src               floodgate.Source
		failure, hasState bool
	}{
		{floodgate.SourceFailOpen, true, false},
		{floodgate.SourceFailClosed, true, false},
		{floodgate.SourceLocalFallback, true, true},
		{floodgate.SourcePolicy, false, true},
		{"memory", false, true},
		{"redis", false, true},
		{"hybrid:local", false, true},
		{"hybrid:global", false, true},
		{"", false, true},
	} {
		res := floodgate.Result{Source: c.src, Set: set}
		if got := res.FromFailureMode(); got != c.failure {
			t.Errorf("Source %q: FromFailureMode %v, want %v", c.src, got, c.failure)
		}
		if got := res.HasState(); got != c.hasState {
			t.Errorf("Source %q: HasState %v, want %v", c.src, got, c.hasState)
		}
		res.Set = nil
		if res.HasState() {
			t.Errorf("Source %q without a Set: HasState true", c.src)
		}
	}
}
