package httplimit_test

import (
	"errors"
	"fmt"
	"strings"
)

// parseSFList checks that s is an RFC 9651 List whose members are Items with
// a String value and Parameters with Integer or String values, the shape the
// RateLimit and RateLimit-Policy fields take.
func parseSFList(s string) error {
	if s == "" {
		return errors.New("empty list")
	}
	p := &sfParser{s: s}
	for {
		if err := p.item(); err != nil {
			return fmt.Errorf("at %d: %w", p.i, err)
		}
		p.ows()
		if p.i == len(p.s) {
			return nil
		}
		if p.s[p.i] != ',' {
			return fmt.Errorf("at %d: want ','", p.i)
		}
		p.i++
		p.ows()
		if p.i == len(p.s) {
			return errors.New("trailing comma")
		}
	}
}

type sfParser struct {
	s string
	i int
}

func (p *sfParser) ows() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *sfParser) item() error {
	if err := p.str(); err != nil {
		return err
	}
	seen := map[string]bool{}
	for p.i < len(p.s) && p.s[p.i] == ';' {
		p.i++
		for p.i < len(p.s) && p.s[p.i] == ' ' {
			p.i++
		}
		start := p.i
		if p.i == len(p.s) || !(p.s[p.i] >= 'a' && p.s[p.i] <= 'z' || p.s[p.i] == '*') {
			return errors.New("bad key")
		}
		for p.i < len(p.s) && strings.IndexByte("abcdefghijklmnopqrstuvwxyz0123456789_-.*", p.s[p.i]) >= 0 {
			p.i++
		}
		key := p.s[start:p.i]
		if seen[key] {
			return fmt.Errorf("duplicate parameter %q", key)
		}
		seen[key] = true
		if p.i == len(p.s) || p.s[p.i] != '=' {
			return errors.New("parameter without value")
		}
		p.i++
		if p.i < len(p.s) && p.s[p.i] == '"' {
			if err := p.str(); err != nil {
				return err
			}
			continue
		}
		if err := p.integer(); err != nil {
			return err
		}
	}
	return nil
}

func (p *sfParser) str() error {
	if p.i >= len(p.s) || p.s[p.i] != '"' {
		return errors.New("want a string")
	}
	p.i++
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if p.i == len(p.s) || (p.s[p.i] != '"' && p.s[p.i] != '\\') {
				return errors.New("bad escape")
			}
			p.i++
		case c == '"':
			return nil
		case c < 0x20 || c > 0x7e:
			return fmt.Errorf("byte %#x in string", c)
		}
	}
	return errors.New("unterminated string")
}

func (p *sfParser) integer() error {
	start := p.i
	if p.i < len(p.s) && p.s[p.i] == '-' {
		p.i++
	}
	digits := 0
	for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
		p.i++
		digits++
	}
	if digits == 0 || digits > 15 {
		return fmt.Errorf("bad integer %q", p.s[start:p.i])
	}
	return nil
}
