package grpclimit

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/httplimit/httplimittest"
)

// Every field an Answer writes has its metadata key in lowerName's table
// (so it costs no allocation), and the table agrees with strings.ToLower.
func TestLowerName(t *testing.T) {
	lim, _ := httplimittest.Limiters(t, floodgate.PerHour(1), floodgate.PerHour(1))
	d, err := httplimit.NewEvaluator(httplimit.EvaluatorConfig{Headers: httplimit.Headers{Source: true}})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for range 2 { // allowed, then denied with Retry-After
		var v httplimit.Answer
		d.Evaluate(context.Background(), &v, httplimit.Charge{Limiter: lim, Key: "k", Cost: 1})
		v.Headers(func(name, _ string) { seen[name] = true })
	}
	if len(seen) != 7 {
		t.Errorf("fields %v, want 7", seen)
	}
	for name := range seen {
		if name != http.CanonicalHeaderKey(name) || lowerName(name) != strings.ToLower(name) {
			t.Errorf("%s: lowerName %q", name, lowerName(name))
		}
		var key string
		if n := testing.AllocsPerRun(10, func() { key = lowerName(name) }); n != 0 || key == "" {
			t.Errorf("%s is not in lowerName's table", name)
		}
	}
}
