package envoyrls

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clock"
	"github.com/floodgate-go/floodgate/envoyrules"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/testkit"

	"github.com/redis/go-redis/v9"
)

// pinned is an instant 10 s into a minute: every fixed window of these
// tests holds it, so a sequence never straddles one.
var pinned = time.Date(2026, 3, 1, 12, 0, 10, 0, time.UTC).UnixNano()

// service serves rules on a memory store whose clock stands at pinned.
func service(t *testing.T, src string, cfg Config) rlsv3.RateLimitServiceClient {
	t.Helper()
	rules, err := envoyrules.Parse("rl.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	st := memstore.New(memstore.Options{Clock: clock.Func(func() int64 { return pinned })})
	t.Cleanup(func() { st.Close() })
	cfg.Rules, cfg.Limiters = rules, map[string]floodgate.Limiter{}
	for name, p := range rules.Policies() {
		lim, err := floodgate.New(st, p)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Limiters[name] = lim
	}
	c, _ := rlsClient(t, cfg)
	return c
}

// ask sends descriptors ("k=v" each, hits in the request) and returns the
// answer as "OVERALL code/remaining ...".
func ask(t *testing.T, c rlsv3.RateLimitServiceClient, hits uint32, descs ...*ratelimitv3.RateLimitDescriptor) string {
	t.Helper()
	resp := call(t, c, &rlsv3.RateLimitRequest{Domain: "d", HitsAddend: hits, Descriptors: descs})
	return summary(resp)
}

func summary(resp *rlsv3.RateLimitResponse) string {
	var b strings.Builder
	b.WriteString(resp.OverallCode.String())
	for _, s := range resp.Statuses {
		fmt.Fprintf(&b, " %s/%d", s.Code, s.LimitRemaining)
		if s.CurrentLimit == nil {
			b.WriteString("/-")
		}
	}
	return b.String()
}

func kv(e string) *ratelimitv3.RateLimitDescriptor {
	k, v, _ := strings.Cut(e, "=")
	return desc(nil, k, v)
}

func expect(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s:\ngot\n  %s\nwant\n  %s", what, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// envoy.shadow_mode answers OK overall while every descriptor still says
// it is over its limit (envoyproxy/ratelimit's SHADOW_MODE); it used to be
// read by nothing, so a "shadow" rollout refused traffic. Each limit that
// would have refused is reported as a shadow denial, to OnShadow (the
// daemon's floodgate_shadow_denials_total) and in the log with
// shadow=true, as a shadow_mode descriptor's is: they used to be logged as
// enforced denials and never counted.
func TestGlobalShadowMode(t *testing.T) {
	logs := &testkit.Buffer{}
	var mu sync.Mutex
	var shadowed []string
	c := service(t, "domain: d\ndescriptors: [{key: k, rate_limit: {name: kay, unit: minute, requests_per_unit: 5}}]\n", Config{
		Mode:   Mode{ShadowMode: true},
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		OnShadow: func(name string, res floodgate.Result) {
			mu.Lock()
			defer mu.Unlock()
			shadowed = append(shadowed, fmt.Sprintf("%s %v", name, res.Allowed))
		},
	})
	var got []string
	for range 8 {
		got = append(got, ask(t, c, 0, kv("k=v")))
	}
	expect(t, "8 calls at 5 per minute", got,
		"OK OK/4", "OK OK/3", "OK OK/2", "OK OK/1", "OK OK/0",
		"OK OVER_LIMIT/0", "OK OVER_LIMIT/0", "OK OVER_LIMIT/0")
	mu.Lock()
	defer mu.Unlock()
	expect(t, "the shadow denials reported", shadowed, "kay false", "kay false", "kay false")
	var lines []string
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec struct {
			Msg    string
			Shadow *bool
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec.Msg == "request denied" {
			lines = append(lines, fmt.Sprintf("shadow=%v", rec.Shadow != nil && *rec.Shadow))
		}
	}
	expect(t, "the denials logged", lines, "shadow=true", "shadow=true", "shadow=true")
}

// A shadow descriptor is charged its hits_addend (it was charged 1).
func TestShadowHitsAddend(t *testing.T) {
	const rules = "domain: d\ndescriptors: [{key: s, shadow_mode: true, rate_limit: {unit: minute, requests_per_unit: 3}}]\n"
	for _, m := range []struct {
		name string
		cfg  Config
		want []string
	}{
		// A denial is charged nothing: one unit stays, as an enforced
		// limit would keep it.
		{"default", Config{}, []string{"OK OK/1", "OK OK/1", "OK OK/1"}},
		{"charge_denied", Config{Mode: Mode{ChargeDenied: true}}, []string{"OK OK/1", "OK OK/0", "OK OK/0"}},
	} {
		t.Run(m.name, func(t *testing.T) {
			c := service(t, rules, m.cfg)
			var got []string
			for range 3 {
				got = append(got, ask(t, c, 2, kv("s=x")))
			}
			expect(t, "3 calls of 2 hits at 3 per minute", got, m.want...)
		})
	}
}

// Every descriptor of a denied request reports what the engine holds,
// before and after the one that denies: the others were not charged (or
// were refunded). They used to report OK, 0 and no current_limit after
// the denial, and their refunded charge before it.
func TestDeniedRequestReportsEngine(t *testing.T) {
	c := service(t, `domain: d
descriptors:
  - {key: a, rate_limit: {unit: minute, requests_per_unit: 10}}
  - {key: b, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: z, rate_limit: {unit: minute, requests_per_unit: 20}}
`, Config{})
	got := []string{
		ask(t, c, 0, kv("a=1"), kv("b=1"), kv("z=1")),
		ask(t, c, 0, kv("a=1"), kv("b=1"), kv("z=1")),
		ask(t, c, 0, kv("z=1"), kv("b=1"), kv("a=1")),
		ask(t, c, 0, kv("a=1"), kv("z=1")),
	}
	expect(t, "a denied request with three descriptors", got,
		"OK OK/9 OK/0 OK/19",
		"OVER_LIMIT OK/9 OVER_LIMIT/0 OK/19",
		"OVER_LIMIT OK/19 OVER_LIMIT/0 OK/9",
		"OK OK/8 OK/18")
}

// Nine copies of one descriptor in one request are one bucket decided for
// their sum: over its limit, not UNAVAILABLE (with Envoy's default
// failure_mode_deny: false, an error let the request through however
// exhausted the limit was).
func TestManyDescriptors(t *testing.T) {
	const rules = "domain: d\ndescriptors: [{key: k, rate_limit: {unit: minute, requests_per_unit: 4}}, {key: n, rate_limit: {unit: minute, requests_per_unit: 2}}]\n"
	nine := func(e string) []*ratelimitv3.RateLimitDescriptor {
		var ds []*ratelimitv3.RateLimitDescriptor
		for range 9 {
			ds = append(ds, kv(e))
		}
		return ds
	}
	t.Run("exhausted", func(t *testing.T) {
		c := service(t, rules, Config{})
		for range 4 {
			ask(t, c, 0, kv("k=v"))
		}
		resp, err := c.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: nine("k=v")})
		if err != nil {
			t.Fatalf("nine exhausted descriptors: %v", err)
		}
		if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Errorf("nine exhausted descriptors: %s", summary(resp))
		}
	})
	t.Run("fresh", func(t *testing.T) {
		c := service(t, rules, Config{})
		// 9 units at 4 per minute: refused, nothing charged.
		if got, want := ask(t, c, 0, nine("k=v")...), "OVER_LIMIT"+strings.Repeat(" OVER_LIMIT/4", 9); got != want {
			t.Errorf("nine fresh descriptors:\ngot  %s\nwant %s", got, want)
		}
		// Three copies pass and each reports what is left after it.
		if got, want := ask(t, c, 0, kv("k=v"), kv("n=1"), kv("k=v"), kv("k=v")), "OK OK/3 OK/1 OK/2 OK/1"; got != want {
			t.Errorf("three copies: got %s, want %s", got, want)
		}
	})
	t.Run("independent", func(t *testing.T) {
		c := service(t, rules, Config{Mode: Mode{Independent: true, ChargeDenied: true}})
		want := "OVER_LIMIT OK/3 OK/2 OK/1 OK/0" + strings.Repeat(" OVER_LIMIT/0", 5)
		if got := ask(t, c, 0, nine("k=v")...); got != want {
			t.Errorf("nine descriptors decided one by one:\ngot  %s\nwant %s", got, want)
		}
	})
	t.Run("twelve rules", func(t *testing.T) {
		var b strings.Builder
		b.WriteString("domain: d\ndescriptors:\n")
		var ds []*ratelimitv3.RateLimitDescriptor
		for i := range 12 {
			fmt.Fprintf(&b, "  - {key: k%d, rate_limit: {unit: minute, requests_per_unit: 3}}\n", i)
			ds = append(ds, kv(fmt.Sprintf("k%d=v", i)))
		}
		c := service(t, b.String(), Config{})
		if got, want := ask(t, c, 0, ds...), "OK"+strings.Repeat(" OK/2", 12); got != want {
			t.Errorf("twelve descriptors of twelve rules:\ngot  %s\nwant %s", got, want)
		}
	})
}

// unlimited answers limit_remaining 4294967295; requests_per_unit 0 its
// limit, 0 per unit, with the rate_limit's name, as envoyproxy/ratelimit
// does (Envoy's x-ratelimit headers read them).
func TestUnlimitedAndBlocked(t *testing.T) {
	c := service(t, `domain: d
descriptors:
  - {key: free, rate_limit: {unlimited: true}}
  - {key: banned, rate_limit: {name: banned_limit, unit: minute, requests_per_unit: 0}}
`, Config{})
	resp := call(t, c, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{kv("free=x"), kv("banned=x")}})
	free, banned := resp.Statuses[0], resp.Statuses[1]
	if free.Code != rlsv3.RateLimitResponse_OK || free.LimitRemaining != math.MaxUint32 || free.CurrentLimit != nil {
		t.Errorf("unlimited: %v", free)
	}
	cl := banned.CurrentLimit
	if banned.Code != rlsv3.RateLimitResponse_OVER_LIMIT || cl == nil || cl.RequestsPerUnit != 0 || cl.Unit != rlsv3.RateLimitResponse_RateLimit_MINUTE || cl.Name != "banned_limit" || banned.DurationUntilReset == nil {
		t.Errorf("requests_per_unit 0: %v", banned)
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("overall %v", resp.OverallCode)
	}
}

// quota_mode: a descriptor over its quota is reported OVER_LIMIT, and the
// request is refused only when every quota of it is over (or a plain
// limit is); a refused request charges its plain limits nothing.
func TestQuotaMode(t *testing.T) {
	c := service(t, `domain: d
descriptors:
  - {key: q, quota_mode: true, rate_limit: {unit: minute, requests_per_unit: 2}}
  - {key: p, rate_limit: {unit: minute, requests_per_unit: 5}}
`, Config{})
	got := []string{
		ask(t, c, 0, kv("q=a"), kv("q=b"), kv("p=1")),
		ask(t, c, 0, desc(u64(2), "q", "a"), kv("q=b"), kv("p=1")),
		ask(t, c, 0, kv("q=a"), kv("q=b"), kv("p=1")),
		ask(t, c, 0, kv("q=a"), kv("q=b"), kv("p=1")),
		ask(t, c, 0, kv("p=1")),
	}
	expect(t, "quotas beside a plain limit", got,
		"OK OK/1 OK/1 OK/4",
		"OK OVER_LIMIT/1 OK/0 OK/3",
		"OK OK/0 OVER_LIMIT/0 OK/2",
		"OVER_LIMIT OVER_LIMIT/0 OVER_LIMIT/0 OK/2",
		"OK OK/1")
}

// With independent and charge_denied every descriptor is charged its
// hits, denied or not, as envoyproxy/ratelimit counts.
func TestReferenceCounting(t *testing.T) {
	c := service(t, `domain: d
descriptors:
  - {key: a, rate_limit: {unit: minute, requests_per_unit: 2}}
  - {key: b, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: h, rate_limit: {unit: minute, requests_per_unit: 4}}
`, Config{Mode: Mode{Independent: true, ChargeDenied: true}})
	got := []string{
		ask(t, c, 0, kv("a=1"), kv("b=1")),
		ask(t, c, 0, kv("a=1"), kv("b=1")),
		ask(t, c, 0, kv("a=1"), kv("b=1")),
		ask(t, c, 3, kv("h=1")),
		ask(t, c, 3, kv("h=1")),
		ask(t, c, 1, kv("h=1")),
	}
	expect(t, "every descriptor charged", got,
		"OK OK/1 OK/0",
		"OVER_LIMIT OK/0 OVER_LIMIT/0",
		"OVER_LIMIT OVER_LIMIT/0 OVER_LIMIT/0",
		"OK OK/1",
		"OVER_LIMIT OVER_LIMIT/0",
		"OVER_LIMIT OVER_LIMIT/0")
}

// engine_errors: status answers a call the storage could not reach with
// UNAVAILABLE, so that Envoy's failure_mode_deny decides; by default the
// storage's failure mode answers (fail-open: OK).
func TestErrorStatus(t *testing.T) {
	srv := testkit.Redis(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { client.Close() })
	rs, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := failover.New(rs, failover.Options{Mode: failover.FailOpen, Guard: failover.GuardOptions{Timeout: 300 * time.Millisecond, ContextBound: true}})
	if err != nil {
		t.Fatal(err)
	}
	rules, err := envoyrules.Parse("rl.yaml", []byte("domain: d\ndescriptors: [{key: k, rate_limit: {unit: minute, requests_per_unit: 5}}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	lims := map[string]floodgate.Limiter{}
	for name, p := range rules.Policies() {
		if lims[name], err = floodgate.New(st, p); err != nil {
			t.Fatal(err)
		}
	}
	open, _ := rlsClient(t, Config{Rules: rules, Limiters: lims})
	strict, _ := rlsClient(t, Config{Rules: rules, Limiters: lims, Mode: Mode{ErrorStatus: true}})
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{kv("k=v")}}
	if _, err := strict.ShouldRateLimit(t.Context(), req); err != nil {
		t.Fatalf("with Redis up: %v", err)
	}
	srv.Kill()
	if resp, err := open.ShouldRateLimit(t.Context(), req); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("fail-open with Redis down: %v %v", resp, err)
	}
	if _, err := strict.ShouldRateLimit(t.Context(), req); status.Code(err) != codes.Unavailable {
		t.Errorf("engine_errors status with Redis down: %v, want UNAVAILABLE", err)
	}
}

// dynamic_metadata carries the request's descriptors and the merged
// metadata of the rules that passed, as RESPONSE_DYNAMIC_METADATA does.
func TestDynamicMetadata(t *testing.T) {
	c := service(t, `domain: d
descriptors:
  - {key: a, rate_limit: {unit: minute, requests_per_unit: 5}, metadata: {name: service_1, tier: {level: 1}}}
  - {key: b, rate_limit: {unit: minute, requests_per_unit: 5}, metadata: {name: service_2, tier: {zone: eu}}}
  - {key: c, rate_limit: {unit: minute, requests_per_unit: 0}, metadata: {blocked: true}}
`, Config{Mode: Mode{DynamicMetadata: true}})
	resp := call(t, c, &rlsv3.RateLimitRequest{Domain: "d", HitsAddend: 1, Descriptors: []*ratelimitv3.RateLimitDescriptor{kv("a=1"), desc(u64(1), "b", "2"), kv("c=3")}})
	md := resp.DynamicMetadata.AsMap()
	if md["domain"] != "d" || md["hitsAddend"] != 1.0 {
		t.Errorf("dynamic metadata %v", md)
	}
	descs, _ := md["descriptors"].([]any)
	if len(descs) != 3 || fmt.Sprint(descs[1]) != "map[entries:[b=2] hitsAddend:1]" {
		t.Errorf("descriptors %v", md["descriptors"])
	}
	if got := fmt.Sprint(md["metadata"]); got != "map[name:service_1 tier:map[level:1 zone:eu]]" {
		t.Errorf("merged metadata %s (the blocked rule's left out)", got)
	}
	plain := service(t, "domain: d\ndescriptors: [{key: a, rate_limit: {unit: minute, requests_per_unit: 5}, metadata: {x: 1}}]\n", Config{})
	if r := call(t, plain, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{kv("a=1")}}); r.DynamicMetadata != nil {
		t.Errorf("dynamic metadata without asking: %v", r.DynamicMetadata)
	}
}

// A descriptor that carries its own limit (Envoy's limit override) is
// limited by it, as envoyproxy/ratelimit does, whatever rule it matches;
// one in an unknown domain is not limited; a unit floodgate cannot keep
// is an error.
func TestLimitOverride(t *testing.T) {
	st := memstore.New(memstore.Options{Clock: clock.Func(func() int64 { return pinned })})
	t.Cleanup(func() { st.Close() })
	c := service(t, "domain: d\ndescriptors: [{key: k, shadow_mode: true, rate_limit: {unit: minute, requests_per_unit: 100}}]\n", Config{Store: st})
	over := func(perMinute uint32, e string) *ratelimitv3.RateLimitDescriptor {
		x := kv(e)
		x.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: perMinute, Unit: typev3.RateLimitUnit_MINUTE}
		return x
	}
	got := []string{
		ask(t, c, 0, over(2, "k=v")),
		ask(t, c, 0, over(2, "k=v")),
		ask(t, c, 0, over(2, "k=v")),
		ask(t, c, 0, kv("k=v")),
		ask(t, c, 0, over(0, "other=x")),
	}
	expect(t, "an override of 2 per minute on a shadow rule of 100", got,
		"OK OK/1", "OK OK/0", "OVER_LIMIT OVER_LIMIT/0", "OK OK/99", "OVER_LIMIT OVER_LIMIT/0")
	resp := call(t, c, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{over(2, "k=v")}})
	if cl := resp.Statuses[0].CurrentLimit; cl.GetRequestsPerUnit() != 2 || cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE {
		t.Errorf("current_limit of an override: %v", cl)
	}
	if r := call(t, c, &rlsv3.RateLimitRequest{Domain: "nope", Descriptors: []*ratelimitv3.RateLimitDescriptor{over(1, "k=v")}}); summary(r) != "OK OK/0/-" {
		t.Errorf("an override in an unknown domain: %s", summary(r))
	}
	yearly := kv("k=v")
	yearly.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_UNKNOWN}
	if _, err := c.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{yearly}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("an override without a unit: %v, want INVALID_ARGUMENT", err)
	}
}
