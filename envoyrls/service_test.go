package envoyrls

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/envoyrules"
	"github.com/floodgate-go/floodgate/memstore"
)

// rulesOf compiles an envoyproxy/ratelimit file and builds a limiter for
// each of its policies over a fresh memory store, replacing the limits of
// the policies named in over (for limits Envoy units cannot write).
func rulesOf(t testing.TB, src string, over map[string][]floodgate.Limit) (*envoyrules.Rules, map[string]floodgate.Limiter) {
	t.Helper()
	rules, err := envoyrules.Parse("rl.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	st := memstore.New(memstore.Options{})
	t.Cleanup(func() { st.Close() })
	lims := map[string]floodgate.Limiter{}
	for name, p := range rules.Policies() {
		if l, ok := over[name]; ok {
			p.Limits = l
		}
		lim, err := floodgate.New(st, p)
		if err != nil {
			t.Fatal(err)
		}
		lims[name] = lim
	}
	return rules, lims
}

func desc(hits *uint64, kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	if hits != nil {
		d.HitsAddend = wrapperspb.UInt64(*hits)
	}
	return d
}

func u64(v uint64) *uint64 { return &v }

// serve serves svc on a free loopback port until t ends.
func serve(t testing.TB, svc *Service) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- svc.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		svc.Shutdown(ctx)
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

func rlsClient(t *testing.T, cfg Config) (rlsv3.RateLimitServiceClient, *grpc.ClientConn) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	svc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpcDial(serve(t, svc))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn), conn
}

func grpcDial(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

func call(t *testing.T, c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Statuses) != len(req.Descriptors) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(req.Descriptors))
	}
	return resp
}

func TestEnvoyDescriptors(t *testing.T) {
	rules, lims := rulesOf(t, `domain: edge
descriptors:
  - {key: k, value: a, rate_limit: {unit: minute, requests_per_unit: 2}}
  - {key: k, value: b, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: k, value: free, rate_limit: {unlimited: true}}
  - {key: k, value: shadow, shadow_mode: true, rate_limit: {name: shadow, unit: minute, requests_per_unit: 1}}
`, map[string][]floodgate.Limit{"edge.k_b": {{Rate: 10, Period: 30 * time.Second, Algorithm: floodgate.FixedWindow}}})
	var shadowed atomic.Int64
	c, conn := rlsClient(t, Config{
		ResponseHeaders: envoyrules.HeadersIETF,
		Rules:           rules,
		Limiters:        lims,
		OnShadow: func(name string, res floodgate.Result) {
			if name == "shadow" && !res.Allowed {
				shadowed.Add(1)
			}
		},
	})

	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		desc(nil, "k", "a"), desc(nil, "k", "b"), desc(nil, "k", "free"), desc(nil, "k", "unknown"),
	}}
	resp := call(t, c, req)
	if resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("first call: %v", resp)
	}
	sa, sb := resp.Statuses[0], resp.Statuses[1]
	if sa.CurrentLimit.GetRequestsPerUnit() != 2 || sa.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || sa.LimitRemaining != 1 || sa.CurrentLimit.GetName() != "" {
		t.Errorf("status a: %v", sa)
	}
	if sb.CurrentLimit.GetRequestsPerUnit() != 10 || sb.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND || sb.CurrentLimit.GetUnitMultiplier().GetValue() != 30 || sb.LimitRemaining != 9 {
		t.Errorf("status b: %v", sb)
	}
	if d := sa.DurationUntilReset.AsDuration(); d <= 0 || d > time.Minute {
		t.Errorf("duration_until_reset %v", d)
	}
	for _, i := range []int{2, 3} {
		if st := resp.Statuses[i]; st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit != nil {
			t.Errorf("status %d: %v, want OK without a limit", i, st)
		}
	}
	hdr := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		hdr[h.Key] += h.Value + ";"
	}
	if !strings.Contains(hdr["ratelimit-policy"], `"edge.k_a";q=2;w=60`) || !strings.Contains(hdr["ratelimit-policy"], `"edge.k_b";q=10;w=30`) || !strings.HasPrefix(hdr["ratelimit"], `"edge.k_a";r=1;t=`) {
		t.Errorf("response headers %v", hdr)
	}

	call(t, c, req)
	resp = call(t, c, req)
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("third call: %v", resp)
	}
	// b passed but was refunded: it reports what the engine holds.
	if st := resp.Statuses[1]; st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit.GetRequestsPerUnit() != 10 || st.LimitRemaining != 8 {
		t.Errorf("refunded descriptor b: %v, want OK with 8 of 10 left", st)
	}
	// The denied call charged nothing: b has 8 left (two calls), not 7.
	peek := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc(u64(0), "k", "b")}}
	if st := call(t, c, peek).Statuses[0]; st.LimitRemaining != 8 {
		t.Errorf("b remaining %d, want 8", st.LimitRemaining)
	}

	// Shadow: never over limit, the would-be denials counted.
	sreq := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc(nil, "k", "shadow")}}
	for range 3 {
		if resp := call(t, c, sreq); resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK {
			t.Fatalf("shadow: %v", resp)
		}
	}
	if n := shadowed.Load(); n != 2 {
		t.Errorf("OnShadow counted %d, want 2", n)
	}

	hc := healthpb.NewHealthClient(conn)
	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		hr, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || hr.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q: %v %v", svc, hr, err)
		}
	}
	for _, bad := range []*rlsv3.RateLimitRequest{{Descriptors: req.Descriptors}, {Domain: "edge"}} {
		if _, err := c.ShouldRateLimit(context.Background(), bad); status.Code(err) != codes.InvalidArgument {
			t.Errorf("bad request %v: %v, want InvalidArgument", bad, err)
		}
	}
}

func TestEnvoyHitsAddend(t *testing.T) {
	rules, lims := rulesOf(t, "domain: d\ndescriptors: [{key: k, value: v, rate_limit: {unit: minute, requests_per_unit: 10}}]\n", nil)
	c, _ := rlsClient(t, Config{ResponseHeaders: envoyrules.HeadersDraft, Rules: rules, Limiters: lims})
	remaining := func(reqHits uint32, descHits *uint64) uint32 {
		t.Helper()
		resp := call(t, c, &rlsv3.RateLimitRequest{Domain: "d", HitsAddend: reqHits, Descriptors: []*ratelimitv3.RateLimitDescriptor{desc(descHits, "k", "v")}})
		return resp.Statuses[0].LimitRemaining
	}
	if r := remaining(3, nil); r != 7 {
		t.Errorf("request hits_addend 3: remaining %d, want 7", r)
	}
	if r := remaining(3, u64(0)); r != 7 {
		t.Errorf("descriptor hits_addend 0 (check only): remaining %d, want 7", r)
	}
	if r := remaining(3, u64(5)); r != 2 {
		t.Errorf("descriptor hits_addend 5 over request 3: remaining %d, want 2", r)
	}
	if r := remaining(0, nil); r != 1 {
		t.Errorf("no hits_addend (1): remaining %d, want 1", r)
	}
	resp := call(t, c, &rlsv3.RateLimitRequest{Domain: "d", HitsAddend: 2, Descriptors: []*ratelimitv3.RateLimitDescriptor{desc(nil, "k", "v")}})
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("2 hits with 1 left: %v", resp.OverallCode)
	}
	hdr := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		hdr[h.Key] = h.Value
	}
	if hdr["x-ratelimit-limit"] != "10" || hdr["x-ratelimit-remaining"] != "1" || hdr["x-ratelimit-reset"] == "" {
		t.Errorf("draft headers %v", hdr)
	}
	// Negative hits give units back.
	neg := desc(u64(4), "k", "v")
	neg.IsNegativeHits = true
	call(t, c, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{neg}})
	if r := remaining(0, u64(0)); r != 5 {
		t.Errorf("after 4 negative hits: remaining %d, want 5", r)
	}
}

func TestCurrentLimitUnits(t *testing.T) {
	type want struct {
		rpu  uint32
		unit rlsv3.RateLimitResponse_RateLimit_Unit
		mult uint32
	}
	for l, w := range map[floodgate.Limit]want{
		floodgate.PerSecond(5):                     {5, rlsv3.RateLimitResponse_RateLimit_SECOND, 0},
		floodgate.PerMinute(100):                   {100, rlsv3.RateLimitResponse_RateLimit_MINUTE, 0},
		floodgate.PerHour(7):                       {7, rlsv3.RateLimitResponse_RateLimit_HOUR, 0},
		floodgate.PerDay(1000):                     {1000, rlsv3.RateLimitResponse_RateLimit_DAY, 0},
		{Rate: 3, Period: 7 * 24 * time.Hour}:      {3, rlsv3.RateLimitResponse_RateLimit_WEEK, 0},
		{Rate: 10, Period: 90 * time.Minute}:       {10, rlsv3.RateLimitResponse_RateLimit_MINUTE, 90},
		{Rate: 10, Period: 30 * time.Second}:       {10, rlsv3.RateLimitResponse_RateLimit_SECOND, 30},
		{Rate: 1, Period: 500 * time.Millisecond}:  {2, rlsv3.RateLimitResponse_RateLimit_SECOND, 0},
		{Rate: 3, Period: 1500 * time.Millisecond}: {4, rlsv3.RateLimitResponse_RateLimit_SECOND, 2},
		{Rate: 1 << 40, Period: time.Hour}:         {1<<32 - 1, rlsv3.RateLimitResponse_RateLimit_HOUR, 0},
	} {
		cl := currentLimit(&rlsv3.RateLimitResponse_RateLimit{}, l, "x")
		if cl.RequestsPerUnit != w.rpu || cl.Unit != w.unit || cl.GetUnitMultiplier().GetValue() != w.mult {
			t.Errorf("%v: %d per %v ×%d, want %d per %v ×%d", l, cl.RequestsPerUnit, cl.Unit, cl.GetUnitMultiplier().GetValue(), w.rpu, w.unit, w.mult)
		}
	}
}

func TestEnvoyConfigErrors(t *testing.T) {
	rules, _ := rulesOf(t, "domain: d\n", nil)
	if _, err := New(Config{Rules: rules, ResponseHeaders: "both"}); err == nil {
		t.Error("response_headers both accepted")
	}
	if _, err := New(Config{}); err == nil {
		t.Error("no rules accepted")
	}
}
