package envoyrules

import (
	"github.com/floodgate-go/floodgate/internal/textform"
	"github.com/floodgate-go/floodgate/internal/yamlpos"

	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
)

// File is one envoyproxy/ratelimit configuration file, field for
// field. See docs/envoy.md for what floodgate supports and what differs.
type File struct {
	// Domain names the set of limits; Envoy's rate limit filter sends it
	// with every request. Required, unique across files.
	Domain string `yaml:"domain"`

	// Descriptors are the top-level rules.
	Descriptors []Descriptor `yaml:"descriptors,omitempty"`
}

// An Descriptor matches one entry (key and value) of a request's
// descriptor, at its depth.
type Descriptor struct {
	// Key must equal the entry's key. Required.
	Key string `yaml:"key"`

	// Value, when set, must equal the entry's value. Each * in it matches
	// any run of characters (foo*, bar*baz, *.example.com); an exact value
	// at the same level wins over a wildcard, and of the wildcards the first
	// in the file that matches. Absent: any value, and each distinct value
	// is limited on its own (one bucket per remote_address).
	Value string `yaml:"value,omitempty"`

	// RateLimit is the limit of requests whose descriptor ends here.
	// Absent (and no nested descriptors): such requests are not limited.
	RateLimit *RateLimit `yaml:"rate_limit,omitempty"`

	// RateLimits is a floodgate extension: several limits that must all
	// pass (10/s and 1000/h). Exclusive with RateLimit.
	RateLimits []RateLimit `yaml:"rate_limits,omitempty"`

	// ShadowMode counts but never denies.
	ShadowMode bool `yaml:"shadow_mode,omitempty"`

	// QuotaMode makes the limit a quota: a descriptor over it is reported
	// OVER_LIMIT, but the request is refused only when every quota
	// descriptor of it is over (or a plain limit is), as
	// envoyproxy/ratelimit's quota_mode.
	QuotaMode bool `yaml:"quota_mode,omitempty"`

	// DetailedMetric labels metrics with the entry's value rather than
	// rolling distinct values into one series. Mind the cardinality.
	DetailedMetric bool `yaml:"detailed_metric,omitempty"`

	// ValueToMetric puts the request's value of this level into the rule's
	// metric key (Rule.MetricKey) where the key alone would stand.
	ValueToMetric bool `yaml:"value_to_metric,omitempty"`

	// ShareThreshold makes every value a wildcard Value matches share one
	// bucket (files/* : one limit for all files), instead of a bucket per
	// value. Only on a Value with a *.
	ShareThreshold bool `yaml:"share_threshold,omitempty"`

	// Metadata is free-form data of the rule (envoyproxy/ratelimit sends
	// it in the response's dynamic metadata); floodgate keeps it on the
	// Rule.
	Metadata map[string]any `yaml:"metadata,omitempty"`

	// Descriptors match the next entry of the request's descriptor.
	Descriptors []Descriptor `yaml:"descriptors,omitempty"`
}

// An RateLimit is requests_per_unit requests per unit.
type RateLimit struct {
	// Unit is second, minute, hour, day, week, month (30 days) or year
	// (rejected: longer than the longest period floodgate keeps exactly).
	// Case does not matter. Required unless Unlimited.
	Unit string `yaml:"unit,omitempty"`

	// RequestsPerUnit is the limit; 0 denies every request.
	RequestsPerUnit int64 `yaml:"requests_per_unit"`

	// Unlimited never limits (requests are still counted in metrics).
	Unlimited bool `yaml:"unlimited,omitempty"`

	// Name identifies the limit for Replaces.
	Name string `yaml:"name,omitempty"`

	// Replaces lists limits (by Name) that this one replaces when both
	// match descriptors of one request: the replaced ones are neither
	// checked nor charged.
	Replaces []Replace `yaml:"replaces,omitempty"`

	// Algorithm is a floodgate extension: the algorithm of this limit.
	// Default: envoy.algorithm of the daemon's file (fixed_window).
	Algorithm string `yaml:"algorithm,omitempty"`

	// Burst is a floodgate extension for gcra and token_bucket.
	Burst int64 `yaml:"burst,omitempty"`
}

// An Replace names a replaced limit.
type Replace struct {
	// Name is the name of the replaced rate_limit.
	Name string `yaml:"name"`
}

// units are envoyproxy/ratelimit's window lengths: its windows are
// fixed, aligned to the Unix epoch, a month is 30 days and a year 365.
var units = map[string]time.Duration{
	"second": time.Second,
	"minute": time.Minute,
	"hour":   time.Hour,
	"day":    24 * time.Hour,
	"week":   7 * 24 * time.Hour,
	"month":  30 * 24 * time.Hour,
	"year":   365 * 24 * time.Hour,
}

// A Entry is one key/value pair of a request's descriptor, as
// Envoy sends it (e.g. remote_address = 10.0.0.1).
type Entry struct {
	Key   string
	Value string
}

// An Rule is the rule that applies to one request descriptor.
type Rule struct {
	// Policy is a stable name for the rule, from its place in the file:
	// the domain and each level's key (and value when set), joined by
	// dots, e.g. "edge.remote_address" or "messaging.message_type_marketing.to_number".
	// It is also the rule's metric key, as envoyproxy/ratelimit names it.
	Policy string

	// Limits must all pass; empty when Unlimited or Blocked.
	Limits []floodgate.Limit

	// Key is what the request is counted by: the descriptor's entries,
	// key=value joined by "|" (| = and \ in values escaped with \), so
	// that each distinct value of an entry without a fixed value gets its
	// own bucket.
	Key string

	// Name is the rate_limit's name, for replaces.
	Name string

	// Replaces are the names this rule replaces.
	Replaces []string

	// Unlimited rules are never limited.
	Unlimited bool

	// Blocked rules (requests_per_unit: 0) deny every request that costs
	// anything; BlockedPeriod is their unit, for the answer's
	// current_limit (0 per that unit).
	Blocked       bool
	BlockedPeriod time.Duration

	// Quota rules (quota_mode) refuse a request only together with the
	// request's other quota rules; see Descriptor.QuotaMode.
	Quota bool

	// Metadata is the descriptor's metadata, as written.
	Metadata map[string]any

	// Shadow rules decide and count but always answer OK.
	Shadow bool

	// DetailedMetric asks for the entry's value in metric labels:
	// MetricKey then ends with it.
	DetailedMetric bool

	// MetricKey names the rule in metrics and logs as envoyproxy/ratelimit
	// names its stats: the domain and each level's key, with the value
	// where the rule fixes one (a wildcard as written), where
	// value_to_metric asks for the request's, and for DetailedMetric every
	// entry's key and value.
	MetricKey string

	// Pos is where the rule is in its file.
	Pos yamlpos.Pos
}

// FloodgatePolicy returns the floodgate policy of the rule (for rules with
// limits).
func (r *Rule) FloodgatePolicy() floodgate.Policy {
	return floodgate.Policy{Name: r.Policy, Limits: r.Limits}
}

// Rules are loaded envoyproxy/ratelimit configurations, one per
// domain, ready to match request descriptors. Safe for concurrent use.
type Rules struct {
	domains map[string]*node
	files   map[string]string // domain → file
}

// entryKey keys a level's descriptors by key and value ("" for key only).
// envoyproxy/ratelimit joins them with "_", which makes (a_b, c) and
// (a, b_c) one descriptor; a pair keeps them apart.
type entryKey struct{ key, value string }

type node struct {
	children  map[entryKey]*node
	wildcards []*node // values with a *, in file order
	key       string
	value     string   // as written
	parts     []string // a wildcard value split at its *s
	share     bool     // share_threshold: the matched values share a bucket
	toMetric  bool     // value_to_metric
	rule      *Rule
}

// matches reports whether value matches the wildcard pattern split into
// parts at its *s: each * stands for any run of characters.
func matches(parts []string, value string) bool {
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// Domains returns the loaded domains, sorted.
func (r *Rules) Domains() []string {
	return slices.Sorted(maps.Keys(r.domains))
}

// Policies returns the floodgate policy of every rule that has limits, by
// name, so a server can build its limiters once per load.
func (r *Rules) Policies() map[string]floodgate.Policy {
	out := map[string]floodgate.Policy{}
	var walk func(n *node)
	walk = func(n *node) {
		if n.rule != nil && len(n.rule.Limits) > 0 {
			out[n.rule.Policy] = n.rule.FloodgatePolicy()
		}
		for _, c := range n.children {
			walk(c)
		}
	}
	for _, d := range r.domains {
		walk(d)
	}
	return out
}

// Match returns the rule for one descriptor of a request to domain, or
// nil when none applies (unknown domain, no rule at the descriptor's
// depth, or a descriptor without entries). At each depth, an exact
// key/value rule wins over a wildcard value (the first in the file that
// matches), which wins over a key-only rule; a rule applies only when the
// descriptor ends at its depth, as envoyproxy/ratelimit matches.
func (r *Rules) Match(domain string, entries []Entry) *Rule {
	rule, _, _ := r.match(domain, entries)
	return rule
}

// The reasons match finds no rule.
const (
	missNone    = iota
	missDomain  // no file has the domain
	missEmpty   // the descriptor has no entries
	missEntry   // no rule at the depth for the entry
	missDeeper  // the descriptor goes on below a rule without children
	missNoLimit // the descriptor ends at a level that only has children
)

// match is Match, and when it finds no rule, why: the reason and the
// index of the entry at fault. Match and Explain both run it.
func (r *Rules) match(domain string, entries []Entry) (*Rule, int, int) {
	if r == nil {
		return nil, missDomain, -1
	}
	n := r.domains[domain]
	if n == nil {
		return nil, missDomain, -1
	}
	if len(entries) == 0 {
		return nil, missEmpty, -1
	}
	// The nodes matched at each level: the key and the metric key are
	// spelled from them once the rule is found.
	var path [maxDepth]*node
	var deep []*node
	if len(entries) > maxDepth {
		deep = make([]*node, len(entries))
	} else {
		deep = path[:len(entries)]
	}
	for i, e := range entries {
		var next *node
		if e.Value != "" {
			next = n.children[entryKey{e.Key, e.Value}]
		}
		if next == nil {
			for _, w := range n.wildcards {
				if w.key == e.Key && matches(w.parts, e.Value) {
					next = w
					break
				}
			}
		}
		if next == nil {
			next = n.children[entryKey{e.Key, ""}]
		}
		if next == nil {
			return nil, missEntry, i
		}
		deep[i] = next
		if i == len(entries)-1 {
			break
		}
		if len(next.children) == 0 && len(next.wildcards) == 0 {
			return nil, missDeeper, i
		}
		n = next
	}
	found := deep[len(entries)-1]
	if found.rule == nil {
		return nil, missNoLimit, len(entries) - 1
	}
	rule := *found.rule
	rule.Key = key(entries, deep)
	rule.MetricKey = rule.Policy
	if rule.DetailedMetric || spelled(deep) {
		rule.MetricKey = metricKey(domain, entries, deep, rule.DetailedMetric)
	}
	return &rule, missNone, -1
}

// A Matched is one descriptor's rule as Explain finds it, or why it has
// none.
type Matched struct {
	Rule *Rule  // nil when no rule applies
	Why  string // why no rule applies; "" when one does
}

// Explain is MatchOverrides that also says, for each descriptor without a
// rule, why: an unknown domain, the entry no rule at its depth matches, a
// descriptor longer or shorter than the rules, or a rule another matched
// rule replaces. It decides nothing; its rules are MatchOverrides's.
func (r *Rules) Explain(domain string, descriptors [][]Entry, overrides []*Override) []Matched {
	rules := r.MatchOverrides(domain, descriptors, overrides)
	out := make([]Matched, len(descriptors))
	for i, d := range descriptors {
		out[i].Rule = rules[i]
		if rules[i] != nil {
			continue
		}
		rule, miss, at := r.match(domain, d)
		switch miss {
		case missNone:
			by := ""
			for j, o := range rules {
				if o != nil && slices.Contains(o.Replaces, rule.Name) {
					by = fmt.Sprintf(" (descriptor %d, %s)", j+1, o.Policy)
					break
				}
			}
			out[i].Why = fmt.Sprintf("its rule %s is named %q, which another matched rule replaces%s", rule.Policy, rule.Name, by)
		case missDomain:
			out[i].Why = fmt.Sprintf("no configuration has the domain %q; the domains are %s", domain, strings.Join(r.Domains(), ", "))
		case missEmpty:
			out[i].Why = "the descriptor has no entries"
		case missEntry:
			out[i].Why = fmt.Sprintf("no rule at depth %d matches the entry %s=%s", at+1, d[at].Key, d[at].Value)
		case missDeeper:
			out[i].Why = fmt.Sprintf("the rule for %s=%s has no descriptors below it, and the descriptor goes on with %d more entries", d[at].Key, d[at].Value, len(d)-at-1)
		case missNoLimit:
			out[i].Why = fmt.Sprintf("the level of %s=%s has descriptors below it but no rate_limit of its own: the descriptor must go on", d[at].Key, d[at].Value)
		}
	}
	return out
}

// maxDepth is the descriptor depth Match keeps on the stack.
const maxDepth = 8

// key is Key, with the value of every entry matched by a share_threshold
// wildcard replaced by the wildcard as written, so that those values share
// one bucket.
func key(entries []Entry, nodes []*node) string {
	shared := false
	for _, n := range nodes {
		shared = shared || n.share
	}
	if !shared {
		return Key(entries)
	}
	es := slices.Clone(entries)
	for i, n := range nodes {
		if n.share {
			es[i].Value = n.value
		}
	}
	return Key(es)
}

// spelled reports whether a level of nodes puts the request's value into
// the metric key (value_to_metric); otherwise the key is the rule's Policy.
func spelled(nodes []*node) bool {
	for _, n := range nodes {
		if n.toMetric {
			return true
		}
	}
	return false
}

// metricKey spells Rule.MetricKey.
func metricKey(domain string, entries []Entry, nodes []*node, detailed bool) string {
	var b strings.Builder
	b.WriteString(domain)
	for i, e := range entries {
		n := nodes[i]
		b.WriteByte('.')
		b.WriteString(e.Key)
		v := ""
		switch {
		case n.share:
			v = n.value
		case detailed, n.toMetric:
			v = e.Value
		default:
			v = n.value
		}
		if v != "" {
			b.WriteByte('_')
			b.WriteString(v)
		}
	}
	return b.String()
}

// MatchRequest matches every descriptor of one request and applies
// replaces: a rule whose name another matched rule replaces is dropped.
// The result is aligned with descriptors; nil means no limit.
func (r *Rules) MatchRequest(domain string, descriptors [][]Entry) []*Rule {
	return r.MatchOverrides(domain, descriptors, nil)
}

// An Override is a limit a request's descriptor carries itself (Envoy's
// RateLimitDescriptor.limit): requests_per_unit per period.
type Override struct {
	RequestsPerUnit int64
	Period          time.Duration
}

// MatchOverrides is MatchRequest for descriptors that may carry their own
// limit (overrides[i], nil for none; overrides may be shorter than
// descriptors). As envoyproxy/ratelimit does, a descriptor with its own
// limit in a known domain is limited by it alone, counted in a fixed
// window by its entries, whatever rule it would match, and is neither
// shadowed nor replaceable nor replacing.
func (r *Rules) MatchOverrides(domain string, descriptors [][]Entry, overrides []*Override) []*Rule {
	out := make([]*Rule, len(descriptors))
	var replaced map[string]bool
	for i, d := range descriptors {
		if i < len(overrides) && overrides[i] != nil {
			out[i] = r.override(domain, d, overrides[i])
			continue
		}
		out[i] = r.Match(domain, d)
		if out[i] != nil {
			for _, n := range out[i].Replaces {
				if replaced == nil {
					replaced = map[string]bool{}
				}
				replaced[n] = true
			}
		}
	}
	if replaced == nil {
		return out
	}
	for i, rule := range out {
		if rule != nil && rule.Name != "" && replaced[rule.Name] {
			out[i] = nil
		}
	}
	return out
}

// override is the rule of a descriptor that carries limit o.
func (r *Rules) override(domain string, entries []Entry, o *Override) *Rule {
	if r == nil || r.domains[domain] == nil || len(entries) == 0 {
		return nil
	}
	rule := &Rule{Policy: fmt.Sprintf("%s.override.%d/%s", domain, o.RequestsPerUnit, o.Period), Key: Key(entries)}
	rule.MetricKey = metricKeyOf(domain, entries)
	if o.RequestsPerUnit <= 0 {
		rule.Blocked, rule.BlockedPeriod = true, o.Period
		return rule
	}
	rule.Limits = []floodgate.Limit{{Rate: o.RequestsPerUnit, Period: o.Period, Algorithm: floodgate.FixedWindow}}
	return rule
}

// metricKeyOf is envoyproxy/ratelimit's stat name of a descriptor: the
// domain and every key_value.
func metricKeyOf(domain string, entries []Entry) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range entries {
		b.WriteByte('.')
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteByte('_')
			b.WriteString(e.Value)
		}
	}
	return b.String()
}

var keyEscaper = strings.NewReplacer(`\`, `\\`, `|`, `\|`, `=`, `\=`)

// Key is the key a descriptor is counted by: its entries, key=value joined
// by "|", with |, = and \ in keys and values escaped with \, so that each
// distinct value of an entry without a fixed value gets its own bucket.
func Key(entries []Entry) string {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('|')
		}
		b.WriteString(keyEscaper.Replace(e.Key))
		b.WriteByte('=')
		b.WriteString(keyEscaper.Replace(e.Value))
	}
	return b.String()
}

// Load reads envoyproxy/ratelimit configuration files, one domain each,
// with the algorithm envoyproxy/ratelimit uses (fixed windows). The error
// is a yamlpos.Errors listing every problem, each as file:line:column.
func Load(paths ...string) (*Rules, error) {
	var srcs []Source
	var errs yamlpos.Errors
	for _, p := range paths {
		data, err := yamlpos.ReadFile(p)
		if err != nil {
			errs = append(errs, &yamlpos.Error{Pos: yamlpos.Pos{File: p}, Msg: "cannot read " + p + ": " + err.Error(), Err: err})
			continue
		}
		srcs = append(srcs, Source{Name: p, Data: data})
	}
	rules, cerrs := Compile(srcs, floodgate.FixedWindow)
	errs = append(errs, cerrs...)
	if len(errs) > 0 {
		return nil, errs.Sorted()
	}
	return rules, nil
}

// Parse parses one envoyproxy/ratelimit configuration file's content.
func Parse(name string, data []byte) (*Rules, error) {
	rules, errs := Compile([]Source{{Name: name, Data: data}}, floodgate.FixedWindow)
	if len(errs) > 0 {
		return nil, errs.Sorted()
	}
	return rules, nil
}

// A Source is one rule file: its name (for errors) and content.
type Source struct {
	Name string
	Data []byte
}

// Compile loads envoyproxy/ratelimit files with the algorithm alg for
// every limit that names none. They are taken as they are: ${...} in them
// is text, not an environment variable, since a descriptor value may well
// contain it.
func Compile(srcs []Source, alg floodgate.Algorithm) (*Rules, yamlpos.Errors) {
	return CompileWith(srcs, Options{Algorithm: alg})
}

// Options are how CompileWith reads rule files.
type Options struct {
	// Algorithm applies to every limit that names none. The zero value is
	// floodgate's default (GCRA); envoyproxy/ratelimit counts in fixed
	// windows (floodgate.FixedWindow).
	Algorithm floodgate.Algorithm

	// MergeDomains lets several files hold one domain: their top-level
	// descriptors join one tree, and a descriptor given twice is an error
	// (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG). Without it a domain
	// belongs to one file.
	MergeDomains bool
}

// CompileWith is Compile with Options.
func CompileWith(srcs []Source, opt Options) (*Rules, yamlpos.Errors) {
	alg := opt.Algorithm
	r := &Rules{domains: map[string]*node{}, files: map[string]string{}}
	names := map[string]map[string]string{} // per domain, see level
	var errs yamlpos.Errors
	for _, s := range srcs {
		d := yamlpos.New(s.Name)
		d.Env = nil
		var f File
		if body := d.Parse(s.Data); body != nil {
			d.Decode(body, reflect.ValueOf(&f).Elem(), "")
		}
		if len(d.Errs) == 0 {
			k := &checker{d: d}
			switch {
			case f.Domain == "":
				k.errf("domain", "the file needs a domain (the name Envoy's rate limit filter sends)")
			case r.files[f.Domain] != "" && !opt.MergeDomains:
				k.errf("domain", "domain %q is also defined in %s; give each file its own domain, or set envoy.merge_domains to join them", f.Domain, r.files[f.Domain])
			case r.files[f.Domain] != "":
				k.level(r.domains[f.Domain], f.Domain, "descriptors", f.Descriptors, alg, names[f.Domain])
			default:
				root := &node{children: map[entryKey]*node{}}
				names[f.Domain] = map[string]string{}
				k.level(root, f.Domain, "descriptors", f.Descriptors, alg, names[f.Domain])
				r.domains[f.Domain] = root
				r.files[f.Domain] = s.Name
			}
		}
		errs = append(errs, d.Errs...)
	}
	return r, errs
}

// envoyLevel compiles one level of descriptors under parent. names maps
// the policy names given so far to their paths: two descriptors whose
// names join to the same string would share their counts.
func (k *checker) level(parent *node, prefix, path string, ds []Descriptor, alg floodgate.Algorithm, names map[string]string) {
	for i := range ds {
		dsc := &ds[i]
		dp := fmt.Sprintf("%s[%d]", path, i)
		if dsc.Key == "" {
			k.errf(dp, "a descriptor needs a key")
			continue
		}
		final := dsc.Key
		if dsc.Value != "" {
			final += "_" + dsc.Value
		}
		policy := prefix + "." + final
		if _, dup := parent.children[entryKey{dsc.Key, dsc.Value}]; dup {
			k.errf(dp, "duplicate descriptor %q: the same key and value twice at this level", policy)
			continue
		}
		if other, dup := names[policy]; dup {
			k.errf(dp, "named %q like %s (keys and values are joined with _); rename a key or value", policy, other)
			continue
		}
		names[policy] = dp
		n := &node{children: map[entryKey]*node{}, key: dsc.Key, value: dsc.Value, share: dsc.ShareThreshold, toMetric: dsc.ValueToMetric}
		parent.children[entryKey{dsc.Key, dsc.Value}] = n
		if strings.Contains(dsc.Value, "*") {
			n.parts = strings.Split(dsc.Value, "*")
			parent.wildcards = append(parent.wildcards, n)
		} else if dsc.ShareThreshold {
			k.errf(dp+".share_threshold", "share_threshold needs a wildcard value (one with a *): the values it matches share one bucket")
		}
		var specs []RateLimit
		var specPaths []string
		switch {
		case dsc.RateLimit != nil && len(dsc.RateLimits) > 0:
			k.errf(dp+".rate_limits", "give rate_limit or rate_limits, not both")
		case dsc.RateLimit != nil:
			specs, specPaths = []RateLimit{*dsc.RateLimit}, []string{dp + ".rate_limit"}
		default:
			for j := range dsc.RateLimits {
				specs = append(specs, dsc.RateLimits[j])
				specPaths = append(specPaths, fmt.Sprintf("%s.rate_limits[%d]", dp, j))
			}
		}
		if len(specs) > floodgate.MaxLimits {
			k.errf(dp+".rate_limits", "%d limits, more than the %d one decision checks", len(specs), floodgate.MaxLimits)
			specs = nil
		}
		if len(specs) > 0 {
			n.rule = k.rule(policy, dp, specs, specPaths, dsc, alg)
		}
		k.level(n, policy, dp+".descriptors", dsc.Descriptors, alg, names)
	}
}

func (k *checker) rule(policy, dp string, specs []RateLimit, paths []string, dsc *Descriptor, alg floodgate.Algorithm) *Rule {
	rule := &Rule{Policy: policy, Shadow: dsc.ShadowMode, Quota: dsc.QuotaMode, DetailedMetric: dsc.DetailedMetric, Metadata: dsc.Metadata, Pos: yamlpos.LookupPos(k.d.Pos, k.d.File(), dp)}
	for i, s := range specs {
		p := paths[i]
		if s.Name != "" {
			if rule.Name != "" && rule.Name != s.Name {
				k.errf(p+".name", "the limits of one descriptor share one name; %q is already %q", s.Name, rule.Name)
			}
			rule.Name = s.Name
		}
		for j, rp := range s.Replaces {
			switch {
			case rp.Name == "":
				k.errf(fmt.Sprintf("%s.replaces[%d]", p, j), "an empty replaces entry; give the name of the limit to replace")
			case rp.Name == s.Name:
				k.errf(fmt.Sprintf("%s.replaces[%d]", p, j), "a limit cannot replace itself (%q)", rp.Name)
			default:
				rule.Replaces = append(rule.Replaces, rp.Name)
			}
		}
		if s.Unlimited {
			if s.Unit != "" {
				k.errf(p+".unit", "an unlimited limit takes no unit")
			}
			if len(specs) > 1 {
				k.errf(p+".unlimited", "unlimited cannot be combined with other limits")
			}
			rule.Unlimited = true
			continue
		}
		if s.Unit == "" {
			k.errf(p, "rate_limit needs a unit (second, minute, hour, day, week, month) or unlimited: true")
			continue
		}
		unit := strings.ToLower(s.Unit)
		period, ok := units[unit]
		if !ok {
			k.d.OneOf(p+".unit", s.Unit, unitNames...)
			continue
		}
		if s.RequestsPerUnit < 0 {
			k.errf(p+".requests_per_unit", "must not be negative")
			continue
		}
		if s.RequestsPerUnit == 0 {
			if len(specs) > 1 {
				k.errf(p+".requests_per_unit", "0 blocks every request; it cannot be combined with other limits")
			}
			rule.Blocked, rule.BlockedPeriod = true, period
			continue
		}
		l := floodgate.Limit{Rate: s.RequestsPerUnit, Period: period, Burst: s.Burst, Algorithm: alg}
		if s.Algorithm != "" {
			a, ok := textform.Algorithm(s.Algorithm)
			if !ok {
				k.d.OneOf(p+".algorithm", s.Algorithm, textform.AlgorithmNames()...)
				continue
			}
			l.Algorithm = floodgate.Algorithm(a)
		}
		if err := l.Validate(); err != nil {
			msg := strings.TrimPrefix(err.Error(), floodgate.ErrInvalidLimit.Error()+": ")
			field := ".requests_per_unit"
			switch {
			case unit == "year":
				// Longer than any period floodgate keeps exactly.
				field, msg = ".unit", msg+"; write the limit per month (30 days) instead"
			case s.Burst != 0 && strings.Contains(err.Error(), "burst"):
				field = ".burst"
			}
			k.wrapf(p+field, err, "%s", msg)
			continue
		}
		rule.Limits = append(rule.Limits, l)
	}
	return rule
}

// A checker compiles one file's descriptors, reporting problems at their
// fields' positions.
type checker struct{ d *yamlpos.Decoder }

func (k *checker) errf(path, format string, args ...any) { k.d.Errorf(path, format, args...) }

func (k *checker) wrapf(path string, err error, format string, args ...any) {
	k.d.Wrapf(path, err, format, args...)
}

// unitNames are the units of a rate_limit, as the file writes them.
var unitNames = []string{"second", "minute", "hour", "day", "week", "month", "year"}

// A HeaderStyle selects the rate-limit headers the Envoy service asks Envoy
// to add to responses (response_headers_to_add).
type HeaderStyle string

// The header styles.
const (
	// HeadersNone adds no headers, as envoyproxy/ratelimit by default.
	HeadersNone HeaderStyle = "none"
	// HeadersDraft adds x-ratelimit-limit, -remaining and -reset (draft 03,
	// the form envoyproxy/ratelimit sends).
	HeadersDraft HeaderStyle = "draft"
	// HeadersIETF adds the RateLimit-Policy and RateLimit fields of
	// draft-ietf-httpapi-ratelimit-headers, one item per limit decided.
	HeadersIETF HeaderStyle = "ietf"
)

// HeaderStyles are the valid HeaderStyles.
var HeaderStyles = []HeaderStyle{HeadersNone, HeadersDraft, HeadersIETF}

// UnmarshalText reads a style's name; anything else is an error naming the
// valid ones.
func (h *HeaderStyle) UnmarshalText(b []byte) error {
	for _, v := range HeaderStyles {
		if string(b) == string(v) {
			*h = v
			return nil
		}
	}
	return fmt.Errorf("%q is not valid (use one of none, draft, ietf)", b)
}

// KeyShapes returns, by policy, the shapes of the keys the rules count
// requests by (Rule.Key): each level's key=value, with {value} where the
// rule takes any value of the entry (a key-only or wildcard level), e.g.
// "remote_address={value}" or "message_type=marketing|to_number={value}".
// An operator who looks a key up gives one of these shapes.
func (r *Rules) KeyShapes() map[string][]string {
	out := map[string][]string{}
	if r == nil {
		return out
	}
	var walk func(n *node, prefix string)
	walk = func(n *node, prefix string) {
		visit := func(c *node) {
			v := "{value}"
			if c.value != "" && (len(c.parts) == 0 || c.share) {
				v = keyEscaper.Replace(c.value)
			}
			p := prefix + keyEscaper.Replace(c.key) + "=" + v
			if c.rule != nil && !slices.Contains(out[c.rule.Policy], p) {
				out[c.rule.Policy] = append(out[c.rule.Policy], p)
			}
			walk(c, p+"|")
		}
		for _, c := range n.children {
			visit(c)
		}
		for _, c := range n.wildcards {
			visit(c)
		}
	}
	for _, d := range r.domains {
		walk(d, "")
	}
	return out
}
