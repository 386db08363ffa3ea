package examples_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/examples/demo/tour"
)

// The demo's tour shows real response fields, a 429 with its problem
// detail, a forged X-Forwarded-For that changes nothing, and a hybrid
// limiter going from Redis to its local fallback and back. Redis is
// required: a missing redis-server fails the test.
func TestDemoTour(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out strings.Builder
	if err := tour.Run(ctx, &out, tour.Options{Pause: 50 * time.Millisecond, RequireRedis: true}); err != nil {
		t.Fatalf("%v\noutput so far:\n%s", err, out.String())
	}
	got := out.String()
	t.Log(got)
	for _, want := range []string{
		"GET / #1 → 200 OK",
		"GET / #4 → 429 Too Many Requests",
		"Content-Type: application/problem+json",
		"X-Ratelimit-Limit: 3",
		"X-Ratelimit-Remaining: 0",
		"X-Ratelimit-Source: memory",
		`Ratelimit-Policy: "api/1";q=3;w=60, "api/2";q=100;w=3600`,
		`"violated-policies":["api/1"]`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	for _, re := range []string{
		`Ratelimit: "api/1";r=2;t=\d+`,
		`Retry-After: \d+`,
		`"status":429`,
	} {
		if !regexp.MustCompile(re).MatchString(got) {
			t.Errorf("output lacks a match for %s", re)
		}
	}
	// Every forged X-Forwarded-For is still limited as 127.0.0.1.
	if n := len(regexp.MustCompile(`X-Forwarded-For: \S+ +→ 429 `).FindAllString(got, -1)); n != 3 {
		t.Errorf("%d of 3 requests with a forged X-Forwarded-For were denied, want all", n)
	}
	// Sources in order: Redis, then the local fallback while it is dead,
	// then Redis again. The filter may deny (hybrid:local) once its share
	// is used up, if Redis is slow to come back; that is no change of phase.
	var sources []string
	for _, m := range regexp.MustCompile(`X-Ratelimit-Source: (hybrid:\S+|local-fallback)`).FindAllStringSubmatch(got, -1) {
		if m[1] == "hybrid:local" {
			continue
		}
		if len(sources) == 0 || sources[len(sources)-1] != m[1] {
			sources = append(sources, m[1])
		}
	}
	if want := []string{"hybrid:global", "local-fallback", "hybrid:global"}; strings.Join(sources, " ") != strings.Join(want, " ") {
		t.Errorf("sources went %v, want %v", sources, want)
	}
	if !strings.Contains(got, "circuit breaker: closed → open") || !strings.Contains(got, "half_open → closed") {
		t.Errorf("output does not show the breaker opening and closing again")
	}
}
