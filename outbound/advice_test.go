package outbound

import (
	"math"
	"net/http"
	"testing"
	"time"
)

var adviceNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestParseRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"1", time.Second, true},
		{" 120 ", 2 * time.Minute, true},
		{"Sun, 01 Mar 2026 12:00:30 GMT", 30 * time.Second, true},
		{"Sunday, 01-Mar-26 12:00:30 GMT", 30 * time.Second, true}, // RFC 850
		{"Sun Mar  1 12:00:30 2026", 30 * time.Second, true},       // asctime
		{"Sun, 01 Mar 2026 11:00:00 GMT", 0, true},                 // in the past
		{"99999999999999999999999", maxAdviceSeconds * time.Second, true},
		{"", 0, false},
		{"-5", 0, false},
		{"+5", 0, false},
		{"1.5", 0, false},
		{"1e3", 0, false},
		{"soon", 0, false},
		{"5 s", 0, false},
		{"Sun, 01 Mar 2026 12:00:30", 0, false},
	} {
		got, ok := ParseRetryAfter(tc.in, adviceNow)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseRetryAfter(%q) = %s, %v; want %s, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestParseAdvice(t *testing.T) {
	type h = map[string]string
	for _, tc := range []struct {
		name   string
		header h
		want   Advice
	}{
		{"nothing", h{}, Advice{}},
		{"floodgate 429", h{"Retry-After": "1", "Ratelimit": `"api";r=0;t=1`, "Ratelimit-Policy": `"api";q=100;w=60`,
			"X-Ratelimit-Remaining": "0", "X-Ratelimit-Reset": "60"},
			Advice{RetryAfter: time.Second, RetryAfterKnown: true, RemainingKnown: true, Reset: time.Second, ResetKnown: true, Rate: 100.0 / 60}},
		{"fewest remaining wins", h{"Ratelimit": `"api/1";r=7;t=1, "api/2";r=3;t=3600`},
			Advice{Remaining: 3, RemainingKnown: true, Reset: time.Hour, ResetKnown: true}},
		{"exhausted: the latest reset", h{"Ratelimit": `"a";r=0;t=5, "b";r=0;t=50, "c";r=9;t=1`},
			Advice{RemainingKnown: true, Reset: 50 * time.Second, ResetKnown: true}},
		{"comma in a name", h{"Ratelimit": `"a,b";r=2;t=4`},
			Advice{Remaining: 2, RemainingKnown: true, Reset: 4 * time.Second, ResetKnown: true}},
		{"dictionary of older drafts", h{"Ratelimit": `limit=100, remaining=0, reset=30`},
			Advice{RemainingKnown: true, Reset: 30 * time.Second, ResetKnown: true, Limit: 100, LimitKnown: true}},
		{"RateLimit wins over X-RateLimit", h{"Ratelimit": `"a";r=4;t=2`, "X-Ratelimit-Remaining": "0", "X-Ratelimit-Reset": "99"},
			Advice{Remaining: 4, RemainingKnown: true, Reset: 2 * time.Second, ResetKnown: true}},
		{"X-RateLimit seconds", h{"X-Ratelimit-Remaining": "0", "X-Ratelimit-Reset": "12"},
			Advice{RemainingKnown: true, Reset: 12 * time.Second, ResetKnown: true}},
		{"X-RateLimit Unix time", h{"X-Ratelimit-Remaining": "0", "X-Ratelimit-Reset": "1772366430"},
			Advice{RemainingKnown: true, Reset: 30 * time.Second, ResetKnown: true}},
		{"X-RateLimit Unix time past", h{"X-Ratelimit-Reset": "1772366000"}, Advice{ResetKnown: true}},
		{"garbage", h{"Retry-After": "later", "Ratelimit": `;;r=;t=-1,,"`, "X-Ratelimit-Remaining": "-1", "X-Ratelimit-Reset": "x"}, Advice{}},
		{"negative parameters", h{"Ratelimit": `"a";r=-1;t=-5`}, Advice{}},
		{"item without r", h{"Ratelimit": `"a";t=5`, "X-Ratelimit-Remaining": "3"},
			Advice{Remaining: 3, RemainingKnown: true}},
		{"X-RateLimit-Reset Unix milliseconds", h{"X-Ratelimit-Remaining": "0", "X-Ratelimit-Reset": "1772366430000"},
			Advice{RemainingKnown: true, Reset: 30 * time.Second, ResetKnown: true}},
		{"X-RateLimit-Reset Unix milliseconds with a fraction", h{"X-Ratelimit-Reset": "1772366430250.5"},
			Advice{Reset: 30*time.Second + 250*time.Millisecond + 500*time.Microsecond, ResetKnown: true}},
		{"X-RateLimit-Reset Unix seconds with a fraction (Discord)", h{"X-Ratelimit-Reset": "1772366430.25"},
			Advice{Reset: 30*time.Second + 250*time.Millisecond, ResetKnown: true}},
		{"X-RateLimit-Reset-After (Discord)", h{"X-Ratelimit-Limit": "5", "X-Ratelimit-Remaining": "0",
			"X-Ratelimit-Reset": "1772366499.5", "X-Ratelimit-Reset-After": "1.25"},
			Advice{RemainingKnown: true, Reset: 1250 * time.Millisecond, ResetKnown: true, Limit: 5, LimitKnown: true}},
		{"separate RateLimit fields, Unix reset (GitLab)", h{"Ratelimit-Limit": "60", "Ratelimit-Remaining": "0",
			"Ratelimit-Reset": "1772366445", "X-Ratelimit-Remaining": "9", "X-Ratelimit-Reset": "99"},
			Advice{RemainingKnown: true, Reset: 45 * time.Second, ResetKnown: true, Limit: 60, LimitKnown: true}},
		{"separate RateLimit fields, delta reset and policies", h{"Ratelimit-Limit": "10, 10;w=1, 1000;w=3600",
			"Ratelimit-Remaining": "4", "Ratelimit-Reset": "1"},
			Advice{Remaining: 4, RemainingKnown: true, Reset: time.Second, ResetKnown: true, Limit: 10, LimitKnown: true, Rate: 1000.0 / 3600}},
		{"RateLimit-Policy: the lowest rate", h{"Ratelimit-Policy": `"burst";q=100;w=1, "day";q=86400;w=86400, "bad";q=5, "zero";q=0;w=1`},
			Advice{Rate: 1}},
		{"RateLimit-Policy wins over RateLimit-Limit", h{"Ratelimit-Policy": `"a";q=10;w=1`, "Ratelimit-Limit": "5, 5;w=1"},
			Advice{Limit: 5, LimitKnown: true, Rate: 10}},
		{"fractional t", h{"Ratelimit": `"a";r=0;t=1.5`}, Advice{RemainingKnown: true, Reset: 1500 * time.Millisecond, ResetKnown: true}},
		{"garbage resets", h{"X-Ratelimit-Reset-After": "-1.5", "X-Ratelimit-Reset": "1e12", "Ratelimit-Reset": "1."}, Advice{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hd := http.Header{}
			for k, v := range tc.header {
				hd.Set(k, v)
			}
			if got := ParseAdvice(hd, adviceNow); got != tc.want {
				t.Errorf("ParseAdvice = %+v; want %+v", got, tc.want)
			}
		})
	}
}

func TestParseReset(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"30", 30 * time.Second, true},
		{"0.25", 250 * time.Millisecond, true},
		{"999999999", 999999999 * time.Second, true}, // delta: just under 10^9
		{"1000000000", 0, true},                      // 2001 as Unix seconds: past
		{"1772366430", 30 * time.Second, true},       // Unix seconds
		{"1772366430.5", 30*time.Second + 500*time.Millisecond, true},
		{"999999999999", time.Unix(999999999999, 0).Sub(adviceNow), true},                   // Unix seconds: the year 33658
		{"1772366430000", 30 * time.Second, true},                                           // Unix milliseconds
		{"1772366399000", 0, true},                                                          // Unix milliseconds, past
		{"99999999999999999999999999", time.UnixMilli(maxResetNumber).Sub(adviceNow), true}, // saturated: Unix milliseconds, far off
		{"", 0, false},
		{"-1", 0, false},
		{"+1", 0, false},
		{"1e3", 0, false},
		{".5", 0, false},
		{"5.", 0, false},
		{"1.2.3", 0, false},
		{"soon", 0, false},
	} {
		got, ok := ParseReset(tc.in, adviceNow)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseReset(%q) = %s, %v; want %s, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// FuzzParseAdvice: no field value makes ParseAdvice panic or return a
// negative duration, count or rate, and no answer pauses its upstream
// beyond MaxPause or for a negative time.
func FuzzParseAdvice(f *testing.F) {
	for _, s := range [][5]string{
		{"1", `"api";r=0;t=1`, "0", `"api";q=10;w=1`, "1.5"},
		{"Sun, 01 Mar 2026 12:00:30 GMT", `limit=100, remaining=0, reset=30`, "1772366430", "10, 10;w=1", ""},
		{"-1", `"a\",b";r=99999999999999999999;t=1`, "-3", `"x";q=1;w=0`, "-0.5"},
		{"", `,,;;==""`, "", ";;q=;w=", "."},
		{"", `"a";r=0;t=1772366430000`, "1772366430000", "", "1e9"},
		{"", "", "99999999999999999999999999.999999999999", "", "999999999.999999999"},
	} {
		f.Add(s[0], s[1], s[2], s[3], s[4])
	}
	tr, err := New(Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, retry, ratelimit, reset, policy, after string) {
		h := http.Header{"Retry-After": {retry}, "Ratelimit": {ratelimit}, "Ratelimit-Policy": {policy},
			"X-Ratelimit-Reset": {reset}, "X-Ratelimit-Remaining": {reset}, "X-Ratelimit-Reset-After": {after},
			"Ratelimit-Limit": {policy}, "Ratelimit-Reset": {after}, "Ratelimit-Remaining": {after}}
		for _, hd := range []http.Header{h, {"X-Ratelimit-Reset": {reset}, "X-Ratelimit-Remaining": {"0"}}} {
			a := ParseAdvice(hd, adviceNow)
			if a.RetryAfter < 0 || a.Reset < 0 || a.Remaining < 0 || a.Limit < 0 || a.Rate < 0 || math.IsNaN(a.Rate) || math.IsInf(a.Rate, 0) {
				t.Fatalf("negative advice %+v", a)
			}
			if (!a.RetryAfterKnown && a.RetryAfter != 0) || (!a.ResetKnown && a.Reset != 0) || (!a.RemainingKnown && a.Remaining != 0) || (!a.LimitKnown && a.Limit != 0) {
				t.Fatalf("a value without its Known: %+v", a)
			}
			for _, code := range []int{200, 429, 503} {
				if d := tr.pauseFor(a, code, 0); d < 0 || d > DefaultMaxPause {
					t.Fatalf("answer %d with %+v pauses %s; want within [0, %s]", code, a, d, DefaultMaxPause)
				}
			}
		}
	})
}

// The pause of a refusal that names its reset in Unix milliseconds is
// that reset, not MaxPause.
func TestPauseForMillisecondReset(t *testing.T) {
	tr, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"1772366402000"}}
	for _, code := range []int{200, 429} {
		if d := tr.pauseFor(ParseAdvice(h, adviceNow), code, 0); d != 2*time.Second {
			t.Errorf("answer %d pauses %s; want the 2s until the reset", code, d)
		}
	}
}

// FuzzParseRetryAfter: a value is read as delta-seconds, as an HTTP-date,
// or not at all; never as a negative wait.
func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "120", "-5", "1.5", "Sun, 01 Mar 2026 12:00:30 GMT", "Sunday, 01-Mar-26 12:00:30 GMT", "garbage"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := ParseRetryAfter(v, adviceNow)
		if d < 0 || (!ok && d != 0) {
			t.Fatalf("ParseRetryAfter(%q) = %s, %v", v, d, ok)
		}
	})
}
