package examples

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/examples/course/experiments"
)

// TestCourseExperiments runs the course module's five experiments and
// checks each finding.
func TestCourseExperiments(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out strings.Builder
	f, err := experiments.Run(ctx, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if !f.HeadersShown || !f.Got429 {
		t.Errorf("1: headers shown %v, 429 with Retry-After %v", f.HeadersShown, f.Got429)
	}
	// Two local instances: twice the burst, plus what each refilled while
	// the requests ran (on a slow machine they run longer).
	if f.LocalAdmitted < 2*f.Limit || f.LocalAdmitted > f.LocalBound {
		t.Errorf("2: two local instances admitted %d, want %d to %d", f.LocalAdmitted, 2*f.Limit, f.LocalBound)
	}
	// The course's own pair on two instances: what two local limits of 10/s
	// burst 20 admit, far below the global burst of 100.
	if f.CourseAdmitted < 40 || f.CourseAdmitted > f.CourseBound || f.CourseAdmitted >= f.Limit {
		t.Errorf("3: two instances with local 10/s burst 20 admitted %d, want 40 to %d (below the global %d)", f.CourseAdmitted, f.CourseBound, f.Limit)
	}
	// Hybrid sized for two: the global burst, plus what refilled while the
	// 400 requests ran.
	if f.HybridAdmitted < f.Limit || f.HybridAdmitted > f.HybridBound {
		t.Errorf("3: two hybrid instances admitted %d, want the one global limit: %d to %d", f.HybridAdmitted, f.Limit, f.HybridBound)
	}
	if !strings.Contains(strings.Join(f.SourcesSeen, " "), "hybrid:") {
		t.Errorf("3: sources %v name no hybrid level", f.SourcesSeen)
	}
	if f.FlowedDown == 0 || !f.FallbackSeen || f.RedisErrors < 1 {
		t.Errorf("4: %d answered with Redis down, fallback seen %v, Redis errors %g", f.FlowedDown, f.FallbackSeen, f.RedisErrors)
	}
	if f.NaiveAdmitted != 200 {
		t.Errorf("5: with the clients' address trusted as a proxy %d of 200 spoofed requests passed, want all", f.NaiveAdmitted)
	}
	if f.SpoofAdmitted > f.SpoofBound || f.SpoofAdmitted >= 200 {
		t.Errorf("5: %d spoofed requests passed, over one client's %d", f.SpoofAdmitted, f.SpoofBound)
	}
}
