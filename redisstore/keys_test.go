package redisstore

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
	"github.com/floodgate-go/floodgate/testkit"
)

var (
	keyTestLimits = []floodgate.Limit{floodgate.PerSecond(10), floodgate.PerMinute(100).WithAlgorithm(floodgate.SlidingLog)}
	keyTestTags   = []byte{'g', 'l'}
)

// keyTestSet compiles keyTestLimits into the set a Store receives.
func keyTestSet(policy, name string) (*algo.Set, error) {
	return newSet(policy, name, keyTestLimits)
}

// TestKeysStartingWithBraceSpread: keys a client chooses spread over the
// Cluster's slots whatever they start with, so no client can pile its
// load onto one node by sending keys that end the hash tag early.
func TestKeysStartingWithBraceSpread(t *testing.T) {
	set, err := keyTestSet("api", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, start := range []string{"", "}", "}}", "%", "{", "}{"} {
		slots := map[int]bool{}
		const n = 1000
		for i := range n {
			slots[testkit.KeySlot(Key(DefaultPrefix, set, start+strconv.Itoa(i), 0))] = true
		}
		// 1000 keys over 16384 slots: about 970 distinct when hashed
		// evenly; a tag cut short puts them all in one.
		if len(slots) < 900 {
			t.Errorf("1000 keys starting with %q lie in %d slots", start, len(slots))
		}
	}
	if empty, brace := testkit.KeySlot(Key(DefaultPrefix, set, "", 0)), testkit.KeySlot(Key(DefaultPrefix, set, "}", 0)); empty == brace {
		t.Errorf("the empty key and %q share slot %d", "}", empty)
	}
}

// TestNewRejectsBracedPrefix: a brace in the prefix would become, or cut,
// the hash tag.
func TestNewRejectsBracedPrefix(t *testing.T) {
	client := standalone(t)
	for _, p := range []string{"app{1}:", "a{", "b}"} {
		if s, err := New(client, Options{Prefix: p}); err == nil {
			s.Close()
			t.Errorf("New accepted Prefix %q", p)
		}
	}
}

// parseKey inverts Key: it splits a Redis key into its policy, set, key,
// limit index and tag, or fails. That it always recovers Key's arguments
// proves that distinct arguments give distinct keys.
func parseKey(prefix, k string) (policy, set, key string, i int, tag byte, err error) {
	rest, ok := strings.CutPrefix(k, prefix+"{")
	if !ok {
		return "", "", "", 0, 0, fmt.Errorf("no %q", prefix+"{")
	}
	inner, suffix, ok := strings.Cut(rest, "}")
	if !ok || !strings.HasPrefix(suffix, ":") || len(suffix) < 3 {
		return "", "", "", 0, 0, fmt.Errorf("bad suffix %q", suffix)
	}
	i, err = strconv.Atoi(suffix[1 : len(suffix)-1])
	if err != nil {
		return "", "", "", 0, 0, err
	}
	tag = suffix[len(suffix)-1]
	parts := strings.SplitN(inner, ":", 3)
	if len(parts) != 3 {
		return "", "", "", 0, 0, fmt.Errorf("hash tag %q has no two colons", inner)
	}
	var out [3]string
	for j, p := range parts {
		if j < 2 && strings.ContainsAny(p, "{}") || j == 2 && strings.Contains(p, "}") {
			return "", "", "", 0, 0, fmt.Errorf("unescaped brace in %q", p)
		}
		if out[j], err = unescape(p); err != nil {
			return "", "", "", 0, 0, err
		}
	}
	return out[0], out[1], out[2], i, tag, nil
}

func unescape(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("truncated escape in %q", s)
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil || strings.ToUpper(s[i+1:i+3]) != s[i+1:i+3] {
			return "", fmt.Errorf("bad escape in %q", s)
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), nil
}

// FuzzKey checks that Key is injective (parseKey recovers its arguments)
// and that its hash tag always covers the policy, the set and the whole
// client key.
func FuzzKey(f *testing.F) {
	for _, s := range [][3]string{
		{"api", "", "user:42"}, {"api", "tier:pro", "}"}, {"a:b{c}%", "override:x}y", ""},
		{"p", "", "%7D"}, {"p", "", "}:0g"}, {"p", "s", "{x}"}, {"%", "%", "%%"},
	} {
		f.Add(s[0], s[1], s[2], uint8(1))
	}
	f.Fuzz(func(t *testing.T, policy, name, key string, i uint8) {
		set, err := keyTestSet(policy, name)
		if err != nil {
			t.Skip()
		}
		idx := int(i) % len(keyTestLimits)
		k := Key(DefaultPrefix, set, key, idx)
		p, n, kk, j, tag, err := parseKey(DefaultPrefix, k)
		if err != nil {
			t.Fatalf("Key(%q, %q, %q, %d) = %q: %v", policy, name, key, idx, k, err)
		}
		if p != policy || n != name || kk != key || j != idx || tag != keyTestTags[idx] {
			t.Fatalf("Key(%q, %q, %q, %d) = %q parses as (%q, %q, %q, %d)", policy, name, key, idx, k, p, n, kk, j)
		}
		inner := k[len(DefaultPrefix)+1 : strings.LastIndexByte(k, '}')]
		if got := string(hashTag([]byte(k))); got != inner {
			t.Fatalf("Key %q: hash tag %q, want %q", k, got, inner)
		}
	})
}
