package isnil

import "testing"

type store struct{}

func (*store) Close() error { return nil }

func TestValue(t *testing.T) {
	var p *store
	var c interface{ Close() error } = p
	var m map[string]int
	var f func()
	for _, v := range []any{nil, p, c, m, f} {
		if !Value(v) {
			t.Errorf("Value(%#v) = false, want true", v)
		}
	}
	for _, v := range []any{&store{}, store{}, 0, "", map[string]int{}} {
		if Value(v) {
			t.Errorf("Value(%#v) = true, want false", v)
		}
	}
}
