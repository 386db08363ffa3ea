package config

import (
	"crypto/sha256"
	"sort"

	"github.com/floodgate-go/floodgate/internal/yamlpos"

	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
)

//go:embed default.yaml
var defaultYAML []byte

// DefaultYAML returns the embedded default configuration file: what
// `floodgate serve` runs without a file (the memory engine, a proxy on
// :8080 in front of the built-in demo upstream with one policy of 10/min,
// burst 5, per client IP, and the admin listener on 127.0.0.1:9090).
func DefaultYAML() []byte { return append([]byte(nil), defaultYAML...) }

// Default returns the parsed default configuration (see DefaultYAML).
func Default() *Config {
	c, err := Parse("(default)", defaultYAML)
	if err != nil {
		// The file is embedded and tested; failing here is a build defect.
		panic("config: the embedded default configuration is invalid: " + err.Error())
	}
	return c
}

// Load reads and parses the configuration file at path. See Parse.
func Load(path string) (*Config, error) {
	c, _, err := LoadFiles(path)
	return c, err
}

// LoadFiles is Load that also returns the contents of path and of every
// file it refers to (Envoy configurations, secret files), valid or not, so
// that a watcher can tell when any of them changed (DigestOf).
func LoadFiles(path string) (*Config, map[string][]byte, error) {
	data, err := yamlpos.ReadFile(path)
	if err != nil {
		return nil, map[string][]byte{path: nil}, Errors{{Pos: Pos{File: path}, Msg: "cannot read the configuration: " + err.Error(), Err: err}}
	}
	return parse(path, data, os.LookupEnv)
}

// Parse parses a configuration file's content; name is used in error
// messages and to resolve relative file names (TLS files, secret files,
// Envoy configurations) against its directory.
//
// Unknown fields are errors, with the nearest known name suggested.
// ${NAME} and ${NAME:-default} in any value are replaced by environment
// variables; a variable that is not set and has no default is an error.
// Every problem is reported, not just the first: the error is an Errors
// whose entries each name file:line:column and the field's path.
func Parse(name string, data []byte) (*Config, error) {
	c, _, err := parse(name, data, os.LookupEnv)
	return c, err
}

func parse(name string, data []byte, env func(string) (string, bool)) (*Config, map[string][]byte, error) {
	files := map[string][]byte{name: data}
	d := yamlpos.New(name)
	d.Env = env
	d.Defaults = setDefaults
	c := &Config{File: name}
	c.setDefaults()
	if body := d.Parse(data); body != nil {
		d.Decode(body, reflect.ValueOf(c).Elem(), "")
	}
	c.pos = d.Pos
	d.Errs = retiredFields(envoyRuleFile(d.Errs))
	decodeErrs := len(d.Errs)
	k := &checker{c: c, d: d, dir: filepath.Dir(name), files: files}
	k.check()
	d.Errs = dropCascades(d.Errs, decodeErrs)
	if len(d.Errs) > 0 {
		return nil, files, d.Errs.Sorted()
	}
	c.Digest = DigestOf(files)
	return c, files, nil
}

// readSecret reads a secret file, trimming one trailing newline (which
// editors and `echo` add and which is never part of a password).
// maxSecretBytes bounds a secret file (a token, a password).
const maxSecretBytes = 64 << 10

func readSecret(path string) (string, []byte, error) {
	b, err := yamlpos.ReadFile(path) // bounded: the path may name any file
	if err != nil {
		return "", nil, fmt.Errorf("cannot read %s: %w", path, err)
	}
	if len(b) > maxSecretBytes {
		return "", b, fmt.Errorf("%s is larger than %d KiB; a secret file holds one token or password", path, maxSecretBytes>>10)
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if s == "" {
		return "", b, fmt.Errorf("%s is empty", path)
	}
	return s, b, nil
}

// dropCascades removes checker errors (those after the first n) that
// follow from a decoding error: on the same field, an enclosing one, or
// one inside it. "policies.api: no limit" says nothing new after
// "policies.api.ratee: unknown field; did you mean rate?".
func dropCascades(errs Errors, n int) Errors {
	if n == 0 {
		return errs
	}
	out := errs[:n:n]
	for _, e := range errs[n:] {
		related := false
		for _, de := range errs[:n] {
			if de.Path == "" || within(de.Path, e.Path) || within(e.Path, de.Path) {
				related = true
				break
			}
		}
		if !related {
			out = append(out, e)
		}
	}
	return out
}

// within reports whether path is inner or a field or index inside it.
func within(inner, path string) bool {
	if !strings.HasPrefix(inner, path) {
		return false
	}
	rest := inner[len(path):]
	return rest == "" || path == "" || rest[0] == '.' || rest[0] == '['
}

// defaulter is implemented by the structs with defaults other than the zero
// value; the decoder calls setDefaults on every fresh one before it decodes
// the file's fields into it, so that absent fields keep their defaults.
type defaulter interface{ setDefaults() }

func setDefaults(p reflect.Value) {
	if df, ok := p.Interface().(defaulter); ok {
		df.setDefaults()
	}
}

// envoyRuleFile replaces the errors of an envoyproxy/ratelimit rule file
// given where floodgate's configuration belongs (its domain and
// descriptors are unknown fields here) by one that says where such a file
// goes.
func envoyRuleFile(errs yamlpos.Errors) yamlpos.Errors {
	var domain *yamlpos.Error
	for _, e := range errs {
		if e.Path == "domain" && strings.HasPrefix(e.Msg, `unknown field "domain"`) {
			domain = e
		}
	}
	if domain == nil {
		return errs
	}
	out := yamlpos.Errors{{Pos: domain.Pos, Path: "domain", Msg: "this is an envoyproxy/ratelimit rule file, not floodgate's configuration: " +
		"serve it from a floodgate file with envoy: {ratelimit_config: [" + domain.Pos.File + "]} (see docs/envoy.md)"}}
	for _, e := range errs {
		if e.Path != "domain" && e.Path != "descriptors" && !strings.HasPrefix(e.Path, "descriptors[") {
			out = append(out, e)
		}
	}
	return out
}

// retired are fields earlier versions had, with what replaces them.
var retired = map[string]string{
	"storage.failure.breaker.failures": "the breaker no longer counts consecutive failures: it opens when failure_rate of at least min_calls calls within window fail (defaults 0.5, 20, 10s); replace failures with min_calls (and failure_rate)",
}

// retiredFields says what replaces a field an earlier version had, in
// place of "unknown field".
func retiredFields(errs yamlpos.Errors) yamlpos.Errors {
	for _, e := range errs {
		if why, ok := retired[e.Path]; ok && strings.HasPrefix(e.Msg, "unknown field") {
			e.Msg = why
		}
	}
	return errs
}

// DigestOf is a hex SHA-256 of the names and contents of files, in a fixed
// order (a missing file, nil, differs from an empty one): Config.Digest of
// a configuration read from them.
func DigestOf(files map[string][]byte) string {
	names := keysOf(files)
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		h.Write([]byte(n))
		h.Write([]byte{0})
		b := files[n]
		if b == nil {
			h.Write([]byte{1}) // missing, unlike empty
		}
		h.Write(b)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}
