package admin

import (
	"net/netip"
	"regexp"
	"strings"
)

// Key shapes are how a configuration spells the keys it makes, for key
// lookups that name a key by hand: literal text with placeholders,
//
//	{address}  a client address or prefix as package clientip keys it
//	           (203.0.113.7, 2001:db8::/64, unknown)
//	{value}    any non-empty text; in a shape of several parts joined
//	           by |, text without an unescaped | (the parts escape theirs)
//	{any}      any key at all: the policy takes keys from callers (the
//	           check API, a PostgreSQL user name)
//
// e.g. "ip:{address}", "x-api-key:{value}", "{address}|route:login",
// "remote_address={value}".
const (
	ShapeAddress = "{address}"
	ShapeValue   = "{value}"
	ShapeAny     = "{any}"
)

// ShapeMatches reports whether key has the shape.
func ShapeMatches(shape, key string) bool {
	if shape == ShapeAny {
		return true
	}
	re := regexp.MustCompile(shapePattern(shape))
	m := re.FindStringSubmatch(key)
	if m == nil {
		return false
	}
	for i, name := range re.SubexpNames() {
		if name == "a" && !isAddressKey(m[i]) {
			return false
		}
	}
	return true
}

// shapePattern is the regular expression of a shape, anchored; each
// {address} is a group named a, checked by isAddressKey.
func shapePattern(shape string) string {
	value := `.+`
	bare := shape
	for _, p := range []string{ShapeAddress, ShapeValue, ShapeAny} {
		bare = strings.ReplaceAll(bare, p, "")
	}
	if strings.Contains(bare, "|") {
		value = `(?:[^|\\]|\\.)+`
	}
	var b strings.Builder
	b.WriteString(`\A`)
	for shape != "" {
		i := strings.IndexByte(shape, '{')
		if i < 0 {
			b.WriteString(regexp.QuoteMeta(shape))
			break
		}
		b.WriteString(regexp.QuoteMeta(shape[:i]))
		rest := shape[i:]
		switch {
		case strings.HasPrefix(rest, ShapeAddress):
			b.WriteString(`(?P<a>[0-9A-Za-z:./]+)`)
			shape = rest[len(ShapeAddress):]
		case strings.HasPrefix(rest, ShapeValue):
			b.WriteString(value)
			shape = rest[len(ShapeValue):]
		case strings.HasPrefix(rest, ShapeAny):
			b.WriteString(`.*`)
			shape = rest[len(ShapeAny):]
		default:
			b.WriteString(`\{`)
			shape = rest[1:]
		}
	}
	b.WriteString(`\z`)
	return b.String()
}

// isAddressKey reports whether s is a key package clientip makes: an
// address, a masked prefix, or "unknown".
func isAddressKey(s string) bool {
	if s == "unknown" {
		return true
	}
	if _, err := netip.ParseAddr(s); err == nil {
		return true
	}
	_, err := netip.ParsePrefix(s)
	return err == nil
}
