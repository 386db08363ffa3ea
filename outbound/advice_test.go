package outbound

import (
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
			Advice{RetryAfter: time.Second, RetryAfterKnown: true, RemainingKnown: true, Reset: time.Second, ResetKnown: true}},
		{"fewest remaining wins", h{"Ratelimit": `"api/1";r=7;t=1, "api/2";r=3;t=3600`},
			Advice{Remaining: 3, RemainingKnown: true, Reset: time.Hour, ResetKnown: true}},
		{"exhausted: the latest reset", h{"Ratelimit": `"a";r=0;t=5, "b";r=0;t=50, "c";r=9;t=1`},
			Advice{RemainingKnown: true, Reset: 50 * time.Second, ResetKnown: true}},
		{"comma in a name", h{"Ratelimit": `"a,b";r=2;t=4`},
			Advice{Remaining: 2, RemainingKnown: true, Reset: 4 * time.Second, ResetKnown: true}},
		{"dictionary of older drafts", h{"Ratelimit": `limit=100, remaining=0, reset=30`},
			Advice{RemainingKnown: true, Reset: 30 * time.Second, ResetKnown: true}},
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

// FuzzParseAdvice: no field value makes ParseAdvice panic or return a
// negative duration or count.
func FuzzParseAdvice(f *testing.F) {
	for _, s := range [][3]string{
		{"1", `"api";r=0;t=1`, "0"},
		{"Sun, 01 Mar 2026 12:00:30 GMT", `limit=100, remaining=0, reset=30`, "1772366430"},
		{"-1", `"a\",b";r=99999999999999999999;t=1`, "-3"},
		{"", `,,;;==""`, ""},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, retry, ratelimit, reset string) {
		h := http.Header{"Retry-After": {retry}, "Ratelimit": {ratelimit}, "X-Ratelimit-Reset": {reset}, "X-Ratelimit-Remaining": {reset}}
		a := ParseAdvice(h, adviceNow)
		if a.RetryAfter < 0 || a.Reset < 0 || a.Remaining < 0 {
			t.Fatalf("negative advice %+v", a)
		}
		if (!a.RetryAfterKnown && a.RetryAfter != 0) || (!a.ResetKnown && a.Reset != 0) || (!a.RemainingKnown && a.Remaining != 0) {
			t.Fatalf("a value without its Known: %+v", a)
		}
	})
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
