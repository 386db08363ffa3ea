package admin

import "testing"

func TestShapeMatches(t *testing.T) {
	for _, c := range []struct {
		shape, key string
		want       bool
	}{
		{"{address}", "203.0.113.7", true},
		{"{address}", "2001:db8::/64", true},
		{"{address}", "unknown", true},
		{"{address}", "ip:203.0.113.7", false},
		{"{address}", "203.0.113", false},
		{"ip:{address}", "ip:203.0.113.7", true},
		{"ip:{address}", "203.0.113.7", false},
		{"x-api-key:{value}", "x-api-key:abc", true},
		{"x-api-key:{value}", "x-api-key:", false},
		{"x-api-key:{value}|route:a", `x-api-key:a\|b|route:a`, true},
		{"x-api-key:{value}|route:a", `x-api-key:a|b|route:a`, false},
		{"x-api-key:{value}", "x-api-key:a|b", true},
		{"one_per_minute={value}", "one_per_minute=a", true},
		{"one_per_minute={value}", "one_per_minute", false},
		{"k=v.1|x={value}", "k=v.1|x=9", true},
		{"k=v.1|x={value}", "k=vx1|x=9", false},
		{"{any}", "", true},
		{"global", "global", true},
		{"a{b", "a{b", true},
	} {
		if got := ShapeMatches(c.shape, c.key); got != c.want {
			t.Errorf("ShapeMatches(%q, %q) = %v, want %v", c.shape, c.key, got, c.want)
		}
	}
}

func FuzzShapeMatches(f *testing.F) {
	f.Add("ip:{address}", "ip:1.2.3.4")
	f.Add("{value}|{address}", `a\|b|::1`)
	f.Add("{", "{")
	f.Fuzz(func(t *testing.T, shape, key string) {
		ShapeMatches(shape, key) // never panics
	})
}
