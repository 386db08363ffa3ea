package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/config"
)

func TestParseOverride(t *testing.T) {
	replaced := []floodgate.Limit{floodgate.PerSecond(10).WithAlgorithm(floodgate.SlidingWindow)}
	s, limits, err := config.ParseOverride([]byte(`{"rate": "500/s", "ttl": "2h", "by": "alice", "reason": "INC-1"}`), replaced)
	if err != nil {
		t.Fatal(err)
	}
	want := floodgate.PerSecond(500).WithAlgorithm(floodgate.SlidingWindow) // the replaced limit's algorithm
	if len(limits) != 1 || limits[0] != want || s.TTL.D() != 2*time.Hour || s.By != "alice" || s.Reason != "INC-1" {
		t.Fatalf("ParseOverride = %+v %v", s, limits)
	}
	s, limits, err = config.ParseOverride([]byte("multiplier: 0.5\nttl: 30m\n"), nil)
	if err != nil || limits != nil || s.Multiplier != 0.5 {
		t.Fatalf("multiplier: %+v %v %v", s, limits, err)
	}
	_, limits, err = config.ParseOverride([]byte(`{"limits": [{"rate": "10/s"}, {"rate": "1000/h", "algorithm": "fixed_window"}], "ttl": "1h"}`), nil)
	if err != nil || len(limits) != 2 || limits[1] != floodgate.PerHour(1000).WithAlgorithm(floodgate.FixedWindow) {
		t.Fatalf("limits list: %v %v", limits, err)
	}
	for body, want := range map[string]string{
		``:                                "the body is empty",
		`{"ttl": "1h"}`:                   "no limit",
		`{"rate": "5/s"}`:                 "no ttl",
		`{"rate": "5/s", "ttl": "-1h"}`:   "must be positive",
		`{"rate": "5/s", "ttl": "2400h"}`: "longer than 90 days",
		`{"rate": "5/s", "multiplier": 2, "ttl": "1h"}`:      "not both",
		`{"multiplier": 0, "ttl": "1h"}`:                     "must be positive",
		`{"rat": "5/s", "ttl": "1h"}`:                        "rate",
		`{"rate": "5 per fortnight", "ttl": "1h"}`:           "fortnight",
		`{"rate": "5/s", "algorithm": "leaky", "ttl": "1h"}`: "algorithm",
		`[1, 2]`:                      "body",
		`{"rate": "5/s", "ttl": "1h"`: "invalid",
	} {
		if _, _, err := config.ParseOverride([]byte(body), nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseOverride(%q) = %v, want an error containing %q", body, err, want)
		}
	}
}

// FuzzParseOverride: any body gets limits or an error, never a panic, and
// what it accepts has a ttl within bounds.
func FuzzParseOverride(f *testing.F) {
	f.Add([]byte(`{"rate": "500/s", "burst": 10, "ttl": "2h"}`))
	f.Add([]byte(`{"multiplier": 3, "ttl": "1m", "by": "x"}`))
	f.Add([]byte("limits:\n  - rate: 1/s\n    align: UTC\nttl: 1h\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, limits, err := config.ParseOverride(data, nil)
		if err != nil {
			return
		}
		if d := s.TTL.D(); d <= 0 || d > 90*24*time.Hour {
			t.Fatalf("accepted ttl %s", d)
		}
		if (len(limits) == 0) == (s.Multiplier == 0) {
			t.Fatalf("accepted %d limits and multiplier %g", len(limits), s.Multiplier)
		}
		for _, l := range limits {
			if err := l.Validate(); err != nil {
				t.Fatalf("accepted an invalid limit %s: %v", l, err)
			}
		}
	})
}
