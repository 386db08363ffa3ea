package config

import (
	"net/url"

	"github.com/goccy/go-yaml"
)

// Redacted replaces a secret in the output of Redact.
const Redacted = "[redacted]"

// Redact returns a copy of c with every secret replaced by Redacted: the
// Redis and Sentinel passwords, the check and admin tokens, the telemetry headers, and a password
// in the upstream URL. Secret file names are kept (they say where the
// secret is, not what it is). The copy shares c's maps and slices, so
// treat it as read-only.
func Redact(c *Config) *Config {
	out := *c
	hide := func(s *string) {
		if *s != "" {
			*s = Redacted
		}
	}
	if c.Storage.Redis != nil {
		r := *c.Storage.Redis
		hide(&r.Password)
		hide(&r.SentinelPassword)
		out.Storage.Redis = &r
	}
	if c.Check != nil {
		ch := *c.Check
		hide(&ch.Token)
		out.Check = &ch
	}
	if c.Admin != nil {
		a := *c.Admin
		hide(&a.Token)
		out.Admin = &a
	}
	if c.Telemetry != nil && len(c.Telemetry.Headers) > 0 {
		// Export headers carry credentials (an authorization, an API key):
		// every value is hidden.
		t := *c.Telemetry
		t.Headers = make(map[string]string, len(c.Telemetry.Headers))
		for name := range c.Telemetry.Headers {
			t.Headers[name] = Redacted
		}
		out.Telemetry = &t
	}
	if c.Proxy != nil {
		p := *c.Proxy
		if u, err := url.Parse(p.Upstream); err == nil && u.User != nil {
			if _, has := u.User.Password(); has {
				u.User = url.UserPassword(u.User.Username(), Redacted)
				p.Upstream = u.String()
			}
		}
		out.Proxy = &p
	}
	return &out
}

// Marshal renders c as YAML in the file's vocabulary, defaults included:
// the effective configuration. It does not hide secrets; use
// MarshalRedacted for anything shown to people.
func (c *Config) Marshal() ([]byte, error) {
	return yaml.MarshalWithOptions(c, yaml.Indent(2), yaml.IndentSequence(true))
}

// MarshalRedacted renders Redact(c), for the admin /v1/config endpoint.
func MarshalRedacted(c *Config) ([]byte, error) { return Redact(c).Marshal() }
