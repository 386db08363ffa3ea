package envoydiff

import (
	"context"
	"fmt"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The documented differences (docs/envoy.md, "What floodgate does
// differently"), by the names the sequences that show them use.
const (
	diffNotCharged   = "a denied request is not charged"
	diffAllOrNothing = "all or nothing across descriptors"
	diffShadowAfter  = "shadow limits are decided after the enforced ones"
	diffKeyJoin      = "wildcards compare the entry's key exactly"
	diffNewer        = "newer than the reference built here"
	diffOverride     = "a limit sent in the descriptor counts in a bucket of its own"
	diffPeekOver     = "no count above the limit"
)

// exampleSeqs are sequences over the reference's examples/ratelimit
// example.yaml (domain rl). byDefault names the difference a sequence
// shows against floodgate's default counting; with parity settings every
// one of them must agree.
var exampleSeqs = []struct {
	sequence
	byDefault string
}{
	{sequence: sequence{name: "category 4 per minute", calls: []call{req(6, d("category=account"))}}},
	{sequence: sequence{name: "nested value 1 per minute", calls: []call{req(3, d("source_cluster=proxy", "destination_cluster=mock"))}}},
	{sequence: sequence{name: "key only, a bucket per value", calls: []call{req(3, d("foo=a")), req(2, d("foo=b"))}}},
	{sequence: sequence{name: "key only at the second level", calls: []call{req(5, d("foo=a", "bar=x")), req(1, d("foo=a", "bar=y"))}}},
	{sequence: sequence{name: "named limit", calls: []call{req(3, d("foo=a", "bar=bkthomps"))}}},
	{sequence: sequence{name: "replaces drops the named limit", calls: []call{req(5, d("category=account"), d("foo=a", "bar=bkthomps"))}}},
	{sequence: sequence{name: "requests_per_unit 0", calls: []call{req(1, dh(0, "foo=a", "bar=banned")), req(2, d("foo=a", "bar=banned"))}}},
	{sequence: sequence{name: "replacing the blocked limit", calls: []call{req(3, d("source_cluster=proxy", "destination_cluster=override"), d("foo=a", "bar=banned"))}}},
	{sequence: sequence{name: "shadow mode", calls: []call{req(5, d("foo=a", "baz=shady"))}}},
	{sequence: sequence{name: "shadow mode with hits_addend 2", calls: []call{reqHits(3, 2, d("foo=a", "baz=shady"))}}, byDefault: diffNotCharged},
	{sequence: sequence{name: "shadow mode with a descriptor's hits_addend", calls: []call{req(3, dh(2, "foo=a", "baz=shady"))}}, byDefault: diffNotCharged},
	{sequence: sequence{name: "unlimited", calls: []call{req(2, d("foo=a", "bay=z")), req(2, d("qux=1"))}}},
	{sequence: sequence{name: "detailed metric", calls: []call{req(3, d("unspec=u1")), req(1, d("unspec=u2"))}}},
	{sequence: sequence{name: "per second", calls: []call{req(3, d("foo=a", "baz=q"))}}},
	{sequence: sequence{name: "no rule matches", calls: []call{
		req(1, d("nothing=here")), req(1, d("foo=a", "bar=x", "deeper=y")), req(1, d("source_cluster=proxy")),
		{descs: d1("category=account"), domain: "no-such-domain"},
	}}},
	{sequence: sequence{name: "peek with hits_addend 0", calls: []call{req(1, dh(0, "category=account")), req(4, d("category=account")), req(1, dh(0, "category=account"))}}},
	{sequence: sequence{name: "a peek after a denial", calls: []call{req(5, d("category=account")), req(1, dh(0, "category=account"))}, differs: diffPeekOver}},
	{sequence: sequence{name: "hits_addend past the limit", calls: []call{reqHits(3, 3, d("category=account")), req(1, d("category=account"))}}, byDefault: diffNotCharged},
	{sequence: sequence{name: "a denied request with two descriptors", calls: []call{req(3, d("foo=a"), d("foo=a", "bar=bkthomps"))}}, byDefault: diffAllOrNothing},
	{sequence: sequence{name: "nine descriptors in one request", calls: []call{req(1, nine("category=account")...)}}, byDefault: diffAllOrNothing},
	{sequence: sequence{name: "nine exhausted descriptors", calls: []call{req(4, d("category=account")), req(2, nine("category=account")...)}}},
	{sequence: sequence{name: "shadow and enforced in one denied request", calls: []call{req(4, d("foo=a", "baz=shady"), d("source_cluster=proxy", "destination_cluster=mock"))}}, byDefault: diffShadowAfter},
	{sequence: sequence{name: "a limit sent in the descriptor", calls: []call{req(3, withLimit(d("category=account"), 2)), req(2, withLimit(d("foo=a", "bar=banned"), 1))}}},
	{sequence: sequence{name: "a limit sent in the descriptor beside its rule", calls: []call{req(2, d("category=account")), req(1, withLimit(d("category=account"), 3))}, differs: diffOverride}},
}

func d1(e string) []*commonrl.RateLimitDescriptor { return []*commonrl.RateLimitDescriptor{d(e)} }

// withLimit sets the descriptor's own limit (Envoy's limit override).
func withLimit(x *commonrl.RateLimitDescriptor, perMinute uint32) *commonrl.RateLimitDescriptor {
	x.Limit = &commonrl.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: perMinute, Unit: typev3.RateLimitUnit_MINUTE}
	return x
}

func nine(e string) []*commonrl.RateLimitDescriptor {
	var out []*commonrl.RateLimitDescriptor
	for range 9 {
		out = append(out, d(e))
	}
	return out
}

// TestExampleConfig compares the two servers on the reference's own
// example configuration, with floodgate's default counting and with the
// settings that count as the reference does.
func TestExampleConfig(t *testing.T) {
	files := []File{sourceFile(t, "examples/ratelimit/config/example.yaml")}
	t.Run("default", func(t *testing.T) {
		s := setup{domain: "rl", files: files}
		for _, q := range exampleSeqs {
			seq := q.sequence
			if seq.differs == "" {
				seq.differs = q.byDefault
			}
			s.seqs = append(s.seqs, seq)
		}
		compare(t, s)
	})
	t.Run("parity", func(t *testing.T) {
		s := setup{domain: "rl", files: files, floodgate: parity}
		for _, q := range exampleSeqs {
			s.seqs = append(s.seqs, q.sequence)
		}
		compare(t, s)
	})
}

// TestHybridStorage: with floodgate's hybrid storage (a local filter in
// front of Redis) the Envoy descriptors answer as on Redis alone.
func TestHybridStorage(t *testing.T) {
	s := setup{domain: "rl", files: []File{sourceFile(t, "examples/ratelimit/config/example.yaml")}, floodgate: parity, engine: "hybrid"}
	for _, q := range exampleSeqs {
		s.seqs = append(s.seqs, q.sequence)
	}
	compare(t, s)
}

// TestBasicConfig covers the reference's test/config/basic_config.yaml.
func TestBasicConfig(t *testing.T) {
	compare(t, setup{domain: "test-domain", files: []File{sourceFile(t, "test/config/basic_config.yaml")}, floodgate: parity, seqs: []sequence{
		{name: "second level key only", calls: []call{req(7, d("key1=value1", "subkey1=s"))}},
		{name: "second level value", calls: []call{req(11, d("key1=value1", "subkey1=subvalue1"))}},
		{name: "first level key only", calls: []call{reqHits(3, 8, d("key2=x"))}},
		{name: "first level value", calls: []call{req(2, d("key2=value2"))}},
		{name: "value without a limit", calls: []call{req(2, d("key2=value3"))}},
		{name: "per hour", calls: []call{req(2, d("key3=a"))}},
		{name: "per day, named", calls: []call{req(2, d("key4=a"))}},
		{name: "a limit at each level", calls: []call{req(2, d("key5=value5")), req(2, d("key5=value5", "subkey5=subvalue5"))}},
		{name: "unlimited", calls: []call{req(2, d("key6=x"))}},
		{name: "detailed metric", calls: []call{req(3, d("key7=a"))}},
		{name: "a level without a limit", calls: []call{req(1, d("key1=value1"))}},
		{name: "every rule in one request", calls: []call{req(3, d("key1=value1", "subkey1=s"), d("key2=x"), d("key3=a"), d("key6=x"), d("key2=value3"))}},
	}})
}

// TestShadowModeConfig covers test/config/shadowmode_config.yaml.
func TestShadowModeConfig(t *testing.T) {
	files := []File{sourceFile(t, "test/config/shadowmode_config.yaml")}
	seqs := []sequence{
		{name: "shadow per second", calls: []call{req(12, d("key1=value1", "subkey1=subvalue1"))}},
		{name: "shadow with hits_addend 7", calls: []call{reqHits(4, 7, d("key2=x"))}},
		{name: "enforced beside it", calls: []call{req(2, d("key2=value2")), req(6, d("key1=value1", "subkey1=s"))}},
	}
	compare(t, setup{domain: "test-domain", files: files, floodgate: parity, seqs: seqs})
	compare(t, setup{domain: "test-domain", files: files, floodgate: parity, seqs: []sequence{
		{name: "shadow beside a denying limit", calls: []call{req(8, d("key2=x"), d("key1=value1", "subkey1=s"))}},
	}})
}

// TestGlobalShadowMode is the reference's SHADOW_MODE against floodgate's
// envoy.shadow_mode: every request is answered OK overall, each
// descriptor still says whether it was over its limit.
func TestGlobalShadowMode(t *testing.T) {
	compare(t, setup{domain: "g", files: []File{inline("g.yaml", "domain: g\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n")},
		floodgate: "shadow_mode: true", ref: ReferenceOptions{"SHADOW_MODE=true"},
		seqs: []sequence{{name: "8 at 5 per second", calls: []call{req(8, d("k=v"))}}}})
}

// TestWildcardConfig covers test/config/wildcard.yaml.
func TestWildcardConfig(t *testing.T) {
	compare(t, setup{domain: "test-domain", files: []File{sourceFile(t, "test/config/wildcard.yaml")}, seqs: []sequence{
		{name: "trailing wildcard, a bucket per value", calls: []call{req(2, d("wild=foo1")), req(1, d("wild=foo2")), req(1, d("wild=goo"))}},
		{name: "no wildcard", calls: []call{req(2, d("noWild=foo")), req(1, d("noWild=foo1"))}},
		{name: "no value", calls: []call{req(2, d("noVal=x"))}},
		{name: "a * inside the value, as written", calls: []call{req(2, d("midWild=bar*b"))}},
		{name: "nested wildcard", calls: []call{req(2, d("nestedWild=val1", "wild=goo1"))}},
		{name: "a * inside the value", calls: []call{req(2, d("midWild=barXb"))}, differs: diffNewer},
		{name: "key and value joined", calls: []call{req(2, d("wild_foo=1"))}, differs: diffKeyJoin},
	}})
}

// TestShareThreshold covers test/config/share_threshold.yaml: values
// matched by one wildcard share one counter.
func TestShareThreshold(t *testing.T) {
	compare(t, setup{domain: "test-domain", files: []File{sourceFile(t, "test/config/share_threshold.yaml")}, seqs: []sequence{
		{name: "top level", calls: []call{reqHits(1, 25, d("files=files/a")), reqHits(1, 25, d("files=files/b")), reqHits(2, 25, d("files=files/c")), req(1, d("files=files/d"))}},
		{name: "nested", calls: []call{reqHits(1, 100, d("nested=parent", "files=nested/x")), reqHits(1, 100, d("nested=parent", "files=nested/y")), req(1, d("nested=parent", "files=nested/z"))}},
		{name: "same key at two levels", calls: []call{reqHits(1, 150, d("files=top/a", "files=nested/b")), reqHits(1, 150, d("files=top/c", "files=nested/d")), req(1, d("files=top/e", "files=nested/f"))}},
		{name: "with value_to_metric", calls: []call{reqHits(1, 30, d("route=api/v1", "method=GET")), reqHits(1, 30, d("route=api/v2", "method=GET")), reqHits(1, 30, d("route=api/v3", "method=POST"))}},
		{name: "with detailed_metric", calls: []call{reqHits(1, 40, d("service=svc/a", "endpoint=e")), reqHits(1, 40, d("service=svc/b", "endpoint=e")), req(1, d("service=svc/c", "endpoint=e"))}},
		{name: "shared and not shared", calls: []call{reqHits(1, 60, d("path=path/a", "file=file/x", "type=t")), reqHits(1, 60, d("path=path/b", "file=file/x", "type=t")), reqHits(1, 60, d("path=path/c", "file=file/y", "type=t"))}},
		{name: "both shared", calls: []call{reqHits(1, 75, d("user=user/a", "resource=res/x", "action=r")), reqHits(1, 75, d("user=user/b", "resource=res/y", "action=w")), req(1, d("user=user/c", "resource=res/z", "action=d"))}},
		{name: "an exact value beside a shared wildcard", calls: []call{reqHits(1, 50, d("file=test1")), reqHits(1, 50, d("file=test2")), reqHits(1, 50, d("file=test3")), req(1, d("file=test1"))}},
	}})
}

// TestMergeDomains is the reference's MERGE_DOMAIN_CONFIG against
// floodgate's envoy.merge_domains, on its test/config/merge_domain_key*.
func TestMergeDomains(t *testing.T) {
	compare(t, setup{domain: "test-domain",
		files:     []File{sourceFile(t, "test/config/merge_domain_key1.yaml"), sourceFile(t, "test/config/merge_domain_key2.yaml")},
		floodgate: "merge_domains: true", ref: ReferenceOptions{"MERGE_DOMAIN_CONFIG=true"},
		seqs: []sequence{{name: "a rule of each file", calls: []call{req(11, d("key1=value1")), req(3, d("key2=value2"))}}}})
}

// TestQuotaMode compares quota_mode descriptors.
func TestQuotaMode(t *testing.T) {
	const rules = `domain: q
descriptors:
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 5}
`
	compare(t, setup{domain: "q", files: []File{inline("q.yaml", rules)}, seqs: []sequence{
		{name: "within quota", calls: []call{req(2, d("quota=a"), d("plain=b"))}},
		{name: "a quota over, another not", calls: []call{req(2, dh(2, "quota=a"), d("quota=z"))}, differs: diffNewer},
		{name: "every quota over", calls: []call{req(4, d("quota=a"), d("plain=b"))}, differs: diffNewer},
		{name: "a plain limit over beside a quota", calls: []call{reqHits(2, 3, d("quota=c"), d("plain=c"))}, differs: diffNewer},
	}})
}

// TestConfigsAcceptedAlike checks every configuration of the reference's
// test/config and examples: floodgate validates what the reference's
// checker accepts and rejects what it rejects.
func TestConfigsAcceptedAlike(t *testing.T) {
	var paths []string
	for _, g := range []string{"test/config/*.yaml", "examples/ratelimit/config/*.yaml", "test/integration/runtime/current/ratelimit/config/*.yaml"} {
		m, err := filepath.Glob(filepath.Join(reference.Source, g))
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, m...)
	}
	if len(paths) < 20 {
		t.Fatalf("found %d configurations in %s; expected the reference's test and example configs", len(paths), reference.Source)
	}
	for _, p := range paths {
		rel, _ := filepath.Rel(reference.Source, p)
		t.Run(rel, func(t *testing.T) {
			f := sourceFile(t, rel)
			refErr := CheckReference(context.Background(), reference, t.TempDir(), []File{f}, false)
			fgErr := validate(t, []File{f}, "")
			switch {
			case refErr == nil && fgErr != nil:
				t.Errorf("the reference accepts %s, floodgate refuses it:\n%v", rel, fgErr)
			case refErr != nil && fgErr == nil:
				t.Errorf("the reference refuses %s (%v), floodgate accepts it", rel, refErr)
			}
		})
	}
	t.Run("merged domains", func(t *testing.T) {
		fs := []File{sourceFile(t, "test/config/merge_domain_key1.yaml"), sourceFile(t, "test/config/merge_domain_key2.yaml")}
		if err := CheckReference(context.Background(), reference, t.TempDir(), fs, true); err != nil {
			t.Fatalf("the reference refuses the merge: %v", err)
		}
		if err := validate(t, fs, "merge_domains: true"); err != nil {
			t.Errorf("floodgate refuses the merge: %v", err)
		}
		if CheckReference(context.Background(), reference, t.TempDir(), fs, false) == nil {
			t.Fatal("the reference merges without MERGE_DOMAIN_CONFIG")
		}
		if validate(t, fs, "") == nil {
			t.Error("floodgate merges two files of one domain without merge_domains")
		}
	})
}

// validate runs `floodgate validate` on a configuration serving files.
func validate(t *testing.T, files []File, envoy string) error {
	t.Helper()
	dir := t.TempDir()
	var names []string
	for _, f := range files {
		p := filepath.Join(dir, f.Name)
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, p)
	}
	cfg := "storage: {engine: memory}\nenvoy:\n  listen: 127.0.0.1:0\n  ratelimit_config: [" + strings.Join(names, ", ") + "]\n"
	for _, l := range strings.Split(strings.TrimSpace(envoy), "\n") {
		if l != "" {
			cfg += "  " + l + "\n"
		}
	}
	cfg += "admin: {listen: \"\"}\n"
	file := filepath.Join(dir, "floodgate.yaml")
	if err := os.WriteFile(file, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(floodgateBin, "validate", file).CombinedOutput()
	if err != nil {
		return &validateError{string(out)}
	}
	return nil
}

type validateError struct{ out string }

func (e *validateError) Error() string { return e.out }

// TestRedisDown: with its Redis gone the reference answers an error, and
// so does floodgate with engine_errors: status (Envoy's failure_mode_deny
// then decides); by default floodgate's storage.failure answers (here
// fail-open: OK).
func TestRedisDown(t *testing.T) {
	rules := []File{inline("d.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")}
	rq := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonrl.RateLimitDescriptor{d("k=v")}}
	for _, c := range []struct {
		envoy  string
		failed bool
	}{{"engine_errors: status", true}, {"", false}} {
		t.Run(fmt.Sprintf("%q", c.envoy), func(t *testing.T) {
			p := startPair(t, setup{domain: "d", files: rules, floodgate: c.envoy})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := p.ref.ShouldRateLimit(ctx, rq); err != nil {
				t.Fatalf("reference with Redis up: %v", err)
			}
			if _, err := p.fg.ShouldRateLimit(ctx, rq); err != nil {
				t.Fatalf("floodgate with Redis up: %v", err)
			}
			p.refRedis.Kill()
			p.fgRedis.Kill()
			if _, err := p.ref.ShouldRateLimit(ctx, rq); err == nil {
				t.Fatal("the reference answered without its Redis")
			}
			resp, err := p.fg.ShouldRateLimit(ctx, rq)
			switch {
			case c.failed && status.Code(err) != codes.Unavailable:
				t.Errorf("floodgate with engine_errors: status: %v %v, want UNAVAILABLE", resp, err)
			case !c.failed && (err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK):
				t.Errorf("floodgate failing open: %v %v, want OK", resp, err)
			}
		})
	}
}
