package config

import (
	"reflect"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/yamlpos"
)

// An OverrideSpec is a runtime override as the admin API takes it (PUT
// /v1/overrides, in JSON or YAML): limits written as the file's overrides
// write them, or a multiplier, for how long, by whom and why.
type OverrideSpec struct {
	LimitsSpec `yaml:",inline"`

	// Multiplier multiplies the limits the key (or tier) gets otherwise:
	// 2 doubles them, 0.1 cuts them to a tenth. Give it or limits.
	Multiplier float64 `yaml:"multiplier,omitempty"`

	// TTL is how long the override lasts ("2h"); at most 90 days.
	TTL Duration `yaml:"ttl"`

	// By names who set it, for the audit trail; the admin API fills in
	// the caller's address when it is absent.
	By string `yaml:"by,omitempty"`

	// Reason says why ("INC-4411: batch import").
	Reason string `yaml:"reason,omitempty"`
}

// ParseOverride reads a runtime override's body and builds its limits as
// the file's overrides are built: when the limits it replaces (replaced,
// those the key or tier gets otherwise) are one limit, an override that
// gives neither algorithm nor align takes theirs. Unknown fields are
// errors, with the nearest known name suggested, as in the file.
func ParseOverride(data []byte, replaced []floodgate.Limit) (*OverrideSpec, []floodgate.Limit, error) {
	d := yamlpos.New("body")
	s := &OverrideSpec{}
	body := d.Parse(data)
	if body == nil && len(d.Errs) == 0 {
		d.Errorf("", "the body is empty; give rate (e.g. {\"rate\": \"500/s\", \"ttl\": \"2h\"}) or multiplier, and ttl")
	}
	if body != nil {
		d.Decode(body, reflect.ValueOf(s).Elem(), "")
	}
	if len(d.Errs) > 0 {
		return nil, nil, d.Errs.Sorted()
	}
	k := &checker{c: &Config{}, d: d}
	var limits []floodgate.Limit
	hasLimits := !s.Rate.IsZero() || len(s.Limits) > 0 || k.has("burst")
	switch {
	case hasLimits && k.has("multiplier"):
		k.errf("multiplier", "give limits or a multiplier, not both")
	case hasLimits:
		var inherit LimitSpec
		if len(replaced) == 1 {
			inherit.Algorithm = replaced[0].Algorithm.String()
			if loc := replaced[0].Location; loc != nil {
				inherit.Align = loc.String()
			}
		}
		limits = k.limits("", &s.LimitsSpec, inherit)
	case !k.has("multiplier"):
		k.errf("", "no limit: give rate (e.g. rate: 500/s), a limits list, or a multiplier (e.g. multiplier: 2)")
	case s.Multiplier <= 0:
		k.errf("multiplier", "must be positive: 2 doubles the limits, 0.5 halves them")
	}
	switch ttl := s.TTL.D(); {
	case !k.has("ttl"):
		k.errf("", "no ttl: say how long the override lasts, e.g. ttl: 2h (at most 90 days)")
	case ttl <= 0:
		k.errf("ttl", "must be positive, e.g. 2h")
	case ttl > 90*24*time.Hour:
		k.errf("ttl", "%s is longer than 90 days; put lasting limits in the configuration file", ttl)
	}
	if len(d.Errs) > 0 {
		return nil, nil, d.Errs.Sorted()
	}
	return s, limits, nil
}
