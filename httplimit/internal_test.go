package httplimit

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/floodgate-go/floodgate"
)

func TestQuota(t *testing.T) {
	tests := []struct {
		limit floodgate.Limit
		q, w  int64
	}{
		{floodgate.PerSecond(10), 10, 1},
		{floodgate.PerMinute(100), 100, 60},
		{floodgate.PerDay(5), 5, 86400},
		{floodgate.Limit{Rate: 10, Period: 100 * time.Millisecond}, 100, 1},
		{floodgate.Limit{Rate: 3, Period: 1500 * time.Millisecond}, 4, 2},
		{floodgate.Limit{Rate: 1, Period: 2500 * time.Millisecond}, 1, 3},
		{floodgate.Limit{Rate: 1_000_000_000, Period: time.Nanosecond}, maxSFInt, 1},
		{floodgate.Limit{}, 0, 1},
	}
	for _, tt := range tests {
		if q, w := Quota(tt.limit); q != tt.q || w != tt.w {
			t.Errorf("Quota(%s) = q=%d w=%d, want q=%d w=%d", tt.limit, q, w, tt.q, tt.w)
		}
	}
}

func TestCeil(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want int64
	}{{0, 0}, {-time.Second, 0}, {1, 1}, {time.Second, 1}, {time.Second + 1, 2}, {59*time.Second + 999*time.Millisecond, 60}} {
		if got := ceilSeconds(tt.d); got != tt.want {
			t.Errorf("ceilSeconds(%v) = %d, want %d", tt.d, got, tt.want)
		}
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		now  time.Time
		d    time.Duration
		want int64
	}{
		{now, 0, now.Unix()},
		{now, 1, now.Unix() + 1},
		{now.Add(250 * time.Millisecond), 6 * time.Second, now.Unix() + 7},
		{now.Add(time.Second), floodgate.RetryNever, math.MaxInt64/int64(time.Second) + 1},
	} {
		if got := ceilUnixSeconds(tt.now.UnixNano(), tt.d); got != tt.want {
			t.Errorf("ceilUnixSeconds(%v, %v) = %d, want %d", tt.now, tt.d, got, tt.want)
		}
	}
}

func TestSFString(t *testing.T) {
	for in, want := range map[string]string{
		"api":       `"api"`,
		"":          `""`,
		`a"b`:       `"a\"b"`,
		`a\b`:       `"a\\b"`,
		"tab\there": `"tab?here"`,
		"é":         `"??"`,
	} {
		if got := string(appendSFString(nil, in)); got != want {
			t.Errorf("appendSFString(%q) = %s, want %s", in, got, want)
		}
	}
}

func FuzzSFString(f *testing.F) {
	for _, s := range []string{"api", `a"b\c`, "\x00\x7f\xff", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := string(appendSFString(nil, s))
		// Decode per RFC 9651 and compare with s, printable ASCII kept.
		if len(out) < 2 || out[0] != '"' || out[len(out)-1] != '"' {
			t.Fatalf("%q: not quoted: %s", s, out)
		}
		var dec []byte
		for i := 1; i < len(out)-1; i++ {
			c := out[i]
			if c < 0x20 || c > 0x7e {
				t.Fatalf("%q: byte %#x in %s", s, c, out)
			}
			if c == '\\' {
				i++
				if i == len(out)-1 || (out[i] != '"' && out[i] != '\\') {
					t.Fatalf("%q: bad escape in %s", s, out)
				}
				c = out[i]
			} else if c == '"' {
				t.Fatalf("%q: unescaped quote in %s", s, out)
			}
			dec = append(dec, c)
		}
		want := []byte(s)
		for i, c := range want {
			if c < 0x20 || c > 0x7e {
				want[i] = '?'
			}
		}
		if string(dec) != string(want) {
			t.Fatalf("%q decodes to %q, want %q", s, dec, want)
		}
	})
}

func FuzzJSONString(f *testing.F) {
	for _, s := range []string{"api", `a"b\c`, "\x00\x1f\x7f", "é\xff", "\u2028"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := appendJSONString(nil, s)
		var got string
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%q: %s is not a JSON string: %v", s, out, err)
		}
		if want := strings.ToValidUTF8(s, "\uFFFD"); utf8.ValidString(s) && got != want {
			t.Fatalf("%q round-trips to %q", s, got)
		}
	})
}
