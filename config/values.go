package config

import (
	"github.com/floodgate-go/floodgate/internal/textform"
	"github.com/floodgate-go/floodgate/internal/yamlpos"

	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate/tokencost"
)

// A Duration is a time.Duration written in Go syntax in the file: "100ms",
// "1s", "2m30s". A bare number is rejected rather than guessed at (seconds?
// nanoseconds?).
type Duration time.Duration

// UnmarshalText parses Go duration syntax.
func (d *Duration) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	v, err := time.ParseDuration(s)
	if err != nil {
		if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
			return fmt.Errorf("%q has no unit; write a duration such as %ss or %sms", s, s, s)
		}
		return fmt.Errorf("%q is not a duration; use Go syntax such as 100ms, 1s or 2m30s", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalText formats the duration in Go syntax.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// A Rate is a whole number of units per period, written "100/min",
// "100/m", "100/minute", "100 per minute", "10/30s", "5/1d" or "1000/h".
// The period is a unit (s, sec, second, m, min, minute, h, hour, d, day, w,
// week, optionally plural) or a number followed by one (30s, 1d, 1h30m).
// Fractions ("1.5/s") are rejected: write "3/2s".
type Rate struct {
	// Count is the number of units per Period, at least 1.
	Count int64

	// Period is the time over which Count applies; positive.
	Period time.Duration
}

// IsZero reports whether the rate was not set.
func (r Rate) IsZero() bool { return r.Count == 0 && r.Period == 0 }

// String formats r as in the file, its period as floodgate.Limit.String
// writes it: "100/min", "10/30s", "5/2h", "1000/d".
func (r Rate) String() string {
	if r.IsZero() {
		return ""
	}
	return strconv.FormatInt(r.Count, 10) + "/" + textform.Period(r.Period)
}

// MarshalText formats r as String does.
func (r Rate) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText parses a rate; see Rate.
func (r *Rate) UnmarshalText(b []byte) error {
	v, err := ParseRate(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

var rateUnits = map[string]time.Duration{
	"s": time.Second, "sec": time.Second, "secs": time.Second, "second": time.Second, "seconds": time.Second,
	"m": time.Minute, "min": time.Minute, "mins": time.Minute, "minute": time.Minute, "minutes": time.Minute,
	"h": time.Hour, "hr": time.Hour, "hrs": time.Hour, "hour": time.Hour, "hours": time.Hour,
	"d": 24 * time.Hour, "day": 24 * time.Hour, "days": 24 * time.Hour,
	"w": 7 * 24 * time.Hour, "week": 7 * 24 * time.Hour, "weeks": 7 * 24 * time.Hour,
}

// ParseRate parses the rate syntax described at Rate.
func ParseRate(s string) (Rate, error) {
	text := strings.TrimSpace(s)
	count, period, ok := strings.Cut(text, "/")
	if !ok {
		count, period, ok = strings.Cut(text, " per ")
	}
	if !ok {
		if _, err := strconv.ParseInt(text, 10, 64); err == nil {
			return Rate{}, fmt.Errorf("rate %q has no period; write %s/s, %s/min or %s/h", text, text, text, text)
		}
		return Rate{}, fmt.Errorf("rate %q is not COUNT/PERIOD; write e.g. 100/min, 10/s or \"5 per hour\"", text)
	}
	count, period = strings.TrimSpace(count), strings.TrimSpace(period)
	p, err := parsePeriod(period)
	if err != nil {
		return Rate{}, fmt.Errorf("rate %q: %w", text, err)
	}
	n, err := strconv.ParseInt(strings.ReplaceAll(count, "_", ""), 10, 64)
	if err != nil {
		if f, ok := new(big.Rat).SetString(count); ok {
			if f.Sign() <= 0 {
				return Rate{}, fmt.Errorf("rate %q must be at least 1 per period", text)
			}
			// 1.5/s is 3/2s: say so, with the exact whole-number equivalent.
			num, den := f.Num(), f.Denom()
			if den.IsInt64() && num.IsInt64() && den.Int64() <= math.MaxInt64/int64(p) {
				return Rate{}, fmt.Errorf("rate %q is not a whole number of units; write %d/%s instead", text, num.Int64(), time.Duration(den.Int64())*p)
			}
			return Rate{}, fmt.Errorf("rate %q is not a whole number of units; scale count and period up together", text)
		}
		return Rate{}, fmt.Errorf("rate %q: %q is not a whole number", text, count)
	}
	if n <= 0 {
		return Rate{}, fmt.Errorf("rate %q must be at least 1 per period", text)
	}
	return Rate{Count: n, Period: p}, nil
}

func parsePeriod(s string) (time.Duration, error) {
	if d, ok := rateUnits[strings.ToLower(s)]; ok {
		return d, nil
	}
	// A count and a unit name: "30s", "15min", "2h", "1d", "2w", "3days".
	if i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' }); i > 0 {
		if u, ok := rateUnits[strings.ToLower(s[i:])]; ok {
			n, err := strconv.ParseInt(s[:i], 10, 64)
			if err != nil || n > int64(math.MaxInt64/u) {
				return 0, fmt.Errorf("period %q is too long", s)
			}
			if n == 0 {
				return 0, fmt.Errorf("period %q must be positive", s)
			}
			return time.Duration(n) * u, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("period %q is not a unit (s, min, h, d, w) or a duration such as 30s, 15min or 1h30m", s)
	}
	if d <= 0 {
		return 0, fmt.Errorf("period %q must be positive", s)
	}
	return d, nil
}

// A KeySource is one part of a rate-limit key.
type KeySource string

// The sources a route's key is built from.
const (
	// KeyIP is the client's address as the proxy's client_ip settings
	// determine it (grouped by prefix for IPv6).
	KeyIP KeySource = "ip"

	// KeyHeader is the value of a request header, e.g. "header:X-API-Key".
	// A request without the header is keyed by its client IP instead, so
	// that leaving the header out does not escape the limit.
	KeyHeader KeySource = "header"

	// KeyUser is an authenticated user id from a request header set by a
	// trusted authenticating proxy, e.g. "user:X-User-ID". The header is
	// believed only from peers in proxy.user_trusted_from; otherwise, or
	// when it is absent, the request is keyed by its client IP.
	KeyUser KeySource = "user"

	// KeyRoute is the route's name (its match, when unnamed): one bucket
	// per route shared by all clients.
	KeyRoute KeySource = "route"

	// KeyGlobal is one bucket for every request the limit applies to.
	KeyGlobal KeySource = "global"
)

// A KeyPart is one source of a key, with the header it reads for
// KeyHeader and KeyUser.
type KeyPart struct {
	Source KeySource
	Header string
}

// String formats p as in the file: "ip", "header:X-API-Key".
func (p KeyPart) String() string {
	if p.Header != "" {
		return string(p.Source) + ":" + p.Header
	}
	return string(p.Source)
}

// ParseKeyPart parses one key source.
func ParseKeyPart(s string) (KeyPart, error) {
	src, arg, hasArg := strings.Cut(strings.TrimSpace(s), ":")
	switch KeySource(strings.ToLower(src)) {
	case KeyIP, KeyRoute, KeyGlobal:
		if hasArg {
			return KeyPart{}, fmt.Errorf("key %q: %s takes no argument", s, src)
		}
		return KeyPart{Source: KeySource(strings.ToLower(src))}, nil
	case KeyHeader, KeyUser:
		if !hasArg || arg == "" {
			return KeyPart{}, fmt.Errorf("key %q: name the header, e.g. %s:X-User-ID", s, strings.ToLower(src))
		}
		if !validHeaderName(arg) {
			return KeyPart{}, fmt.Errorf("key %q: %q is not a valid header name", s, arg)
		}
		return KeyPart{Source: KeySource(strings.ToLower(src)), Header: arg}, nil
	}
	want := []string{"ip", "header:NAME", "user:NAME", "route", "global"}
	if sg := yamlpos.Suggest(src, []string{"ip", "header", "user", "route", "global"}); sg != "" {
		return KeyPart{}, fmt.Errorf("unknown key source %q; did you mean %q? (use one of %s, or a list of them)", s, sg, strings.Join(want, ", "))
	}
	return KeyPart{}, fmt.Errorf("unknown key source %q (use one of %s, or a list of them)", s, strings.Join(want, ", "))
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// A Key is what a limit counts by: one source ("ip") or several joined
// into a composite key ("[ip, route]": each client per route).
type Key []KeyPart

// UnmarshalText parses one key source; see ParseKeyPart. A Key is a list of
// them, and a single value in the file stands for a list of one.
func (p *KeyPart) UnmarshalText(b []byte) error {
	v, err := ParseKeyPart(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// MarshalYAML renders the key as in the file.
func (k Key) MarshalYAML() (any, error) {
	if len(k) == 1 {
		return k[0].String(), nil
	}
	out := make([]string, len(k))
	for i, p := range k {
		out[i] = p.String()
	}
	return out, nil
}

// String formats k as in the file.
func (k Key) String() string {
	if len(k) == 1 {
		return k[0].String()
	}
	parts := make([]string, len(k))
	for i, p := range k {
		parts[i] = p.String()
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// A Cost says how many units a request costs: a constant ("1", "5"), the
// integer in a request header ("header:X-Cost"), or the integer in a
// response header charged once the upstream answers
// ("response_header:X-Tokens-Used", for usage known only afterwards).
type Cost struct {
	// Units is the constant cost when neither header is set.
	Units int64

	// Header names the request header that carries the cost. A missing or
	// malformed value costs Units.
	Header string

	// ResponseHeader names the response header that carries the cost.
	ResponseHeader string

	// Tokens is the token count of an LLM API call charged (tokens:input,
	// tokens:output, tokens:total; tokens alone is total), read as the
	// route's tokens section says (docs/llm.md).
	Tokens string
}

// String formats c as in the file.
func (c Cost) String() string {
	switch {
	case c.Header != "":
		return "header:" + c.Header
	case c.ResponseHeader != "":
		return "response_header:" + c.ResponseHeader
	case c.Tokens != "":
		return "tokens:" + c.Tokens
	}
	return strconv.FormatInt(c.Units, 10)
}

// MarshalText formats c as in the file.
func (c Cost) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText parses a cost.
func (c *Cost) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s == "tokens" {
		s = "tokens:total"
	}
	if count, ok := strings.CutPrefix(s, "tokens:"); ok {
		if _, err := tokencost.ParseCount(count); err != nil || count == "" {
			return fmt.Errorf("cost %q: use tokens:input, tokens:output or tokens:total", s)
		}
		*c = Cost{Tokens: count}
		return nil
	}
	if kind, name, ok := strings.Cut(s, ":"); ok {
		if !validHeaderName(name) {
			return fmt.Errorf("cost %q: %q is not a valid header name", s, name)
		}
		switch kind {
		case "header":
			*c = Cost{Units: 1, Header: name}
		case "response_header":
			*c = Cost{Units: 0, ResponseHeader: name}
		default:
			return fmt.Errorf("cost %q: use a whole number, header:NAME, response_header:NAME or tokens:COUNT", s)
		}
		return nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("cost %q: use a whole number, header:NAME, response_header:NAME or tokens:COUNT", s)
	}
	if n < 0 {
		return errors.New("cost must not be negative (0 lets requests pass without charging them)")
	}
	*c = Cost{Units: n}
	return nil
}
