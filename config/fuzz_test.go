package config

import (
	"os"
	"path/filepath"
	"testing"
)

func addSeeds(f *testing.F, pattern string) {
	files, _ := filepath.Glob(pattern)
	if len(files) == 0 {
		f.Fatalf("no seeds match %s", pattern)
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// FuzzParse: no input panics or hangs the parser, and whatever it accepts
// builds library policies and renders as YAML that it accepts again.
func FuzzParse(f *testing.F) {
	addSeeds(f, "../examples/config/*.yaml")
	f.Add(DefaultYAML())
	f.Add([]byte("a: &a [*a, *a]\n"))
	f.Add([]byte("policies: {x: &a {<<: *a}}\n"))
	f.Add([]byte("policies: &a {x: &b {limits: [*b, *b, *b]}}\n"))
	f.Add([]byte("policies: {x: {<<: {rate: 1/s}, burst: 2}}\nproxy: {upstream: demo}\n"))
	f.Add([]byte("proxy: {upstream: demo, routes: [{limits: [{policy: p, key: [ip, header:X]}]}]}\npolicies: {p: {rate: 9/1d}}\n"))
	f.Add([]byte("proxy: {upstream: demo, routes: [{limits: [{policy: p, count: failed}]}]}\npolicies: {p: {rate: 5/15m, penalty: 15m}}\n"))
	f.Add([]byte("proxy: {upstream: demo, routes: [{limits: [{policy: p}]}]}\npolicies: {p: {rate: 5/min, penalty: -1ns}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.yaml", data)
		if err != nil {
			if c != nil {
				t.Fatal("a config with an error")
			}
			if err.Error() == "" {
				t.Fatal("an empty error")
			}
			return
		}
		if _, err := c.FloodgatePolicies(); err != nil {
			t.Fatalf("accepted, but its policies fail: %v", err)
		}
		out, err := MarshalRedacted(c)
		if err != nil {
			t.Fatalf("accepted, but does not render: %v", err)
		}
		if c.Envoy == nil { // its files are relative to the examples
			if _, err := Parse("fuzz.yaml", out); err != nil {
				t.Fatalf("the rendered config is rejected: %v\n%s", err, out)
			}
		}
	})
}
