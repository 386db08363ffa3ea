package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
	"github.com/floodgate-go/floodgate/clientip"
	"github.com/floodgate-go/floodgate/clock"
	grpclimit "github.com/floodgate-go/floodgate/contrib/grpc"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/httplimit/httplimittest"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/redisstore"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const (
	check = "/grpc.health.v1.Health/Check"
	watch = "/grpc.health.v1.Health/Watch"
)

// countingHealth is the health service, counting the calls that reach it.
type countingHealth struct {
	*health.Server
	calls atomic.Int64
}

func (h *countingHealth) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.calls.Add(1)
	return h.Server.Check(ctx, req)
}

// start serves the health service ("known" is a service it knows) behind
// cfg's interceptors on a loopback port, and returns a client for it.
func start(t *testing.T, cfg grpclimit.Config, dial ...grpc.DialOption) (healthpb.HealthClient, *countingHealth) {
	t.Helper()
	in, err := grpclimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(in.Unary()), grpc.ChainStreamInterceptor(in.Stream()))
	h := &countingHealth{Server: health.NewServer()}
	h.SetServingStatus("known", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, h)
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		<-done
	})
	return healthpb.NewHealthClient(conn), h
}

func limiters(t *testing.T, s floodgate.Store, limits map[string]floodgate.Limit) map[string]floodgate.Limiter {
	t.Helper()
	out := make(map[string]floodgate.Limiter)
	for name, l := range limits {
		lim, err := floodgate.New(s, floodgate.Policy{Name: name, Limits: []floodgate.Limit{l}})
		if err != nil {
			t.Fatal(err)
		}
		out[name] = lim
	}
	return out
}

func memory(t *testing.T) *memstore.Store {
	s := memstore.New(memstore.Options{})
	t.Cleanup(func() { s.Close() })
	return s
}

// call checks service on c with the metadata pairs md and returns the
// error and the response header metadata.
func call(t *testing.T, c healthpb.HealthClient, service string, md ...string) (metadata.MD, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	var header metadata.MD
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: service}, grpc.Header(&header))
	return header, err
}

func wantCode(t *testing.T, what string, err error, code codes.Code) {
	t.Helper()
	if status.Code(err) != code {
		t.Errorf("%s: %v, want %s", what, err, code)
	}
}

func wantMD(t *testing.T, what string, md metadata.MD, pairs ...string) {
	t.Helper()
	for i := 0; i+1 < len(pairs); i += 2 {
		if got := strings.Join(md.Get(pairs[i]), ", "); got != pairs[i+1] {
			t.Errorf("%s: %s = %q, want %q", what, pairs[i], got, pairs[i+1])
		}
	}
}

// wantExhausted checks a denial: RESOURCE_EXHAUSTED with a RetryInfo of at
// most maxDelay, a QuotaFailure naming policy, and retry-after metadata.
func wantExhausted(t *testing.T, what string, md metadata.MD, err error, policy string, maxDelay time.Duration) {
	t.Helper()
	wantCode(t, what, err, codes.ResourceExhausted)
	delay, ok := grpclimit.RetryDelay(err)
	if !ok || delay <= 0 || delay > maxDelay {
		t.Errorf("%s: RetryInfo delay %v (%v), want up to %v", what, delay, ok, maxDelay)
	}
	found := false
	for _, d := range status.Convert(err).Details() {
		if qf, ok := d.(*errdetails.QuotaFailure); ok && len(qf.Violations) == 1 && qf.Violations[0].Subject == "policy:"+policy {
			found = true
		}
	}
	if !found {
		t.Errorf("%s: no QuotaFailure for %s in %v", what, policy, status.Convert(err).Details())
	}
	if len(md.Get("retry-after")) != 1 || md.Get("x-ratelimit-remaining")[0] != "0" {
		t.Errorf("%s: metadata %v", what, md)
	}
}

func TestHeadersAndExhausted(t *testing.T) {
	lims := limiters(t, memory(t), map[string]floodgate.Limit{"api": floodgate.PerMinute(2)})
	c, h := start(t, grpclimit.Config{Rules: []grpclimit.Rule{{Limiter: lims["api"]}}})
	for i, left := range []string{"1", "0"} {
		md, err := call(t, c, "known")
		wantCode(t, "call", err, codes.OK)
		wantMD(t, "call "+left, md, "x-ratelimit-limit", "2", "x-ratelimit-remaining", left, "ratelimit-policy", `"api";q=2;w=60`, "retry-after", "")
		if rl := strings.Join(md.Get("ratelimit"), ""); !strings.HasPrefix(rl, `"api";r=`+left+";t=") {
			t.Errorf("call %d: ratelimit %q", i+1, rl)
		}
	}
	md, err := call(t, c, "known")
	wantExhausted(t, "call 3", md, err, "api", 30*time.Second)
	if n := h.calls.Load(); n != 2 {
		t.Errorf("%d calls reached the handler, want 2", n)
	}
}

// Rules apply per method: Check and Watch have policies of their own, and
// a stream is decided when it opens.
func TestPerMethod(t *testing.T) {
	lims := limiters(t, memory(t), map[string]floodgate.Limit{"check": floodgate.PerMinute(1), "watch": floodgate.PerMinute(1)})
	c, _ := start(t, grpclimit.Config{Rules: []grpclimit.Rule{
		{Limiter: lims["check"], Methods: []string{check}},
		{Limiter: lims["watch"], Methods: []string{watch}},
	}})
	_, err := call(t, c, "known")
	wantCode(t, "check 1", err, codes.OK)
	md, err := call(t, c, "known")
	wantExhausted(t, "check 2", md, err, "check", 60*time.Second)
	openWatch := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := c.Watch(ctx, &healthpb.HealthCheckRequest{Service: "known"})
		if err != nil {
			return err
		}
		_, err = s.Recv()
		return err
	}
	wantCode(t, "watch 1", openWatch(), codes.OK)
	wantCode(t, "watch 2", openWatch(), codes.ResourceExhausted)

	// A service prefix matches all its methods.
	lims = limiters(t, memory(t), map[string]floodgate.Limit{"svc": floodgate.PerMinute(1)})
	c, _ = start(t, grpclimit.Config{Rules: []grpclimit.Rule{{Limiter: lims["svc"], Methods: []string{"/grpc.health.v1.Health/"}}}})
	_, err = call(t, c, "known")
	wantCode(t, "prefix check", err, codes.OK)
	wantCode(t, "prefix watch", openWatch(), codes.ResourceExhausted)
}

func TestClientAddress(t *testing.T) {
	t.Run("spoofed x-forwarded-for from an untrusted peer", func(t *testing.T) {
		lims := limiters(t, memory(t), map[string]floodgate.Limit{"api": floodgate.PerMinute(2)})
		c, _ := start(t, grpclimit.Config{Rules: []grpclimit.Rule{{Limiter: lims["api"]}},
			ClientIP: clientip.Config{TrustedProxies: []string{"10.0.0.0/8"}}})
		for _, xff := range []string{"198.51.100.1", "198.51.100.2"} {
			_, err := call(t, c, "known", "x-forwarded-for", xff)
			wantCode(t, xff, err, codes.OK)
		}
		md, err := call(t, c, "known", "x-forwarded-for", "198.51.100.3")
		wantExhausted(t, "fresh spoofed address", md, err, "api", 30*time.Second)
	})
	t.Run("x-forwarded-for from a trusted proxy", func(t *testing.T) {
		lims := limiters(t, memory(t), map[string]floodgate.Limit{"api": floodgate.PerMinute(1)})
		c, _ := start(t, grpclimit.Config{Rules: []grpclimit.Rule{{Limiter: lims["api"]}},
			ClientIP: clientip.Config{TrustedProxies: []string{"127.0.0.1"}}})
		_, err := call(t, c, "known", "x-forwarded-for", "203.0.113.9, 198.51.100.1")
		wantCode(t, "client 1", err, codes.OK)
		_, err = call(t, c, "known", "x-forwarded-for", "198.51.100.1")
		wantCode(t, "client 1 again", err, codes.ResourceExhausted)
		_, err = call(t, c, "known", "x-forwarded-for", "198.51.100.2")
		wantCode(t, "client 2", err, codes.OK)
	})
	t.Run("metadata key", func(t *testing.T) {
		lims := limiters(t, memory(t), map[string]floodgate.Limit{"api": floodgate.PerMinute(1)})
		c, _ := start(t, grpclimit.Config{Rules: []grpclimit.Rule{{Limiter: lims["api"], Key: grpclimit.KeyByMetadata("X-Api-Key", nil)}}})
		for _, tt := range []struct {
			key  string
			want codes.Code
		}{{"a", codes.OK}, {"a", codes.ResourceExhausted}, {"b", codes.OK}, {"", codes.OK}, {"", codes.ResourceExhausted}} {
			var md []string
			if tt.key != "" {
				md = []string{"x-api-key", tt.key}
			}
			_, err := call(t, c, "known", md...)
			wantCode(t, "key "+tt.key, err, tt.want)
		}
	})
}

// Failed calls count, successful ones are refunded: a limit on guesses.
func TestCountFailed(t *testing.T) {
	lims := limiters(t, memory(t), map[string]floodgate.Limit{"login": floodgate.PerHour(2)})
	c, _ := start(t, grpclimit.Config{Rules: []grpclimit.Rule{{Limiter: lims["login"], Count: httplimit.CountFailed}}})
	for range 4 {
		_, err := call(t, c, "known")
		wantCode(t, "success", err, codes.OK)
	}
	for range 2 {
		_, err := call(t, c, "unknown")
		wantCode(t, "failure", err, codes.NotFound)
	}
	md, err := call(t, c, "known")
	wantExhausted(t, "after two failures", md, err, "login", time.Hour)
}

func TestRedis(t *testing.T) {
	client := httplimittest.Redis(t)
	store, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	lims := limiters(t, store, map[string]floodgate.Limit{"api": floodgate.PerMinute(2)})
	c, _ := start(t, grpclimit.Config{Rules: []grpclimit.Rule{{Limiter: lims["api"]}}})
	other, _ := start(t, grpclimit.Config{Rules: []grpclimit.Rule{{Limiter: lims["api"]}}})
	_, err = call(t, c, "known")
	wantCode(t, "server 1", err, codes.OK)
	_, err = call(t, other, "known")
	wantCode(t, "server 2", err, codes.OK)
	md, err := call(t, c, "known")
	wantExhausted(t, "shared limit", md, err, "api", 30*time.Second)
	keys, err := client.Keys(context.Background(), redisstore.DefaultPrefix+"{api::127.0.0.1}*").Result()
	if err != nil || len(keys) != 1 {
		t.Errorf("keys in Redis: %q (%v), want one", keys, err)
	}
}

// The client interceptor waits out the RetryInfo delay and retries once,
// and does not wait past the call's deadline or maxWait.
func TestRetryUnary(t *testing.T) {
	// The store reads the system clock itself rather than a coarse cached
	// copy, so the delay it reports is exact: a retry after it passes.
	s := memstore.New(memstore.Options{Clock: clock.System})
	t.Cleanup(func() { s.Close() })
	lims := limiters(t, s, map[string]floodgate.Limit{
		"fast": {Rate: 1, Period: 200 * time.Millisecond}, "slow": floodgate.PerHour(1)})
	c, h := start(t, grpclimit.Config{Rules: []grpclimit.Rule{{Limiter: lims["fast"], Key: func(context.Context, string) string { return "k" }}}},
		grpc.WithUnaryInterceptor(grpclimit.RetryUnary(0)))
	for i := range 3 {
		_, err := call(t, c, "known")
		wantCode(t, "call", err, codes.OK)
		if n := h.calls.Load(); n != int64(i+1) {
			t.Errorf("call %d: handler ran %d times", i+1, n)
		}
	}

	slow, _ := start(t, grpclimit.Config{Rules: []grpclimit.Rule{{Limiter: lims["slow"]}}}, grpc.WithUnaryInterceptor(grpclimit.RetryUnary(0)))
	_, err := call(t, slow, "known")
	wantCode(t, "first", err, codes.OK)
	start := time.Now()
	_, err = call(t, slow, "known") // a 10 s deadline, an hour to wait
	wantCode(t, "beyond the deadline", err, codes.ResourceExhausted)
	if time.Since(start) > 5*time.Second {
		t.Errorf("waited %v for a retry it could not make", time.Since(start))
	}
	capped, _ := start2(t, lims["fast"])
	_, err = call(t, capped, "known")
	wantCode(t, "capped first", err, codes.OK)
	_, err = call(t, capped, "known")
	wantCode(t, "beyond maxWait", err, codes.ResourceExhausted)
}

func start2(t *testing.T, lim floodgate.Limiter) (healthpb.HealthClient, *countingHealth) {
	return start(t, grpclimit.Config{Rules: []grpclimit.Rule{{Limiter: lim, Key: func(context.Context, string) string { return "capped" }}}},
		grpc.WithUnaryInterceptor(grpclimit.RetryUnary(time.Millisecond)))
}

func TestConfigErrors(t *testing.T) {
	for name, cfg := range map[string]grpclimit.Config{
		"no rules":    {},
		"no limiter":  {Rules: []grpclimit.Rule{{}}},
		"bad proxies": {Rules: []grpclimit.Rule{{Limiter: limiters(t, memory(t), map[string]floodgate.Limit{"x": floodgate.PerSecond(1)})["x"]}}, ClientIP: clientip.Config{TrustedProxies: []string{"nonsense"}}},
	} {
		if _, err := grpclimit.New(cfg); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// RetryStream gives streams what RetryUnary gives unary calls: a stream
// refused at its opening is opened and sent again after the RetryInfo
// delay, and the caller reads its first message as if nothing happened;
// not past maxWait.
func TestRetryStream(t *testing.T) {
	s := memstore.New(memstore.Options{Clock: clock.System})
	t.Cleanup(func() { s.Close() })
	lims := limiters(t, s, map[string]floodgate.Limit{
		"fast": {Rate: 1, Period: 200 * time.Millisecond}, "slow": floodgate.PerHour(1)})
	key := func(context.Context, string) string { return "k" }
	watchOnce := func(c healthpb.HealthClient) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := c.Watch(ctx, &healthpb.HealthCheckRequest{Service: "known"})
		if err != nil {
			return err
		}
		resp, err := st.Recv()
		if err == nil && resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("first message %v, want SERVING", resp)
		}
		return err
	}
	c, _ := start(t, grpclimit.Config{Rules: []grpclimit.Rule{{Limiter: lims["fast"], Key: key}}},
		grpc.WithStreamInterceptor(grpclimit.RetryStream(0)))
	for i := range 3 {
		wantCode(t, fmt.Sprint("stream ", i+1), watchOnce(c), codes.OK)
	}
	plain, _ := start(t, grpclimit.Config{Rules: []grpclimit.Rule{{Limiter: lims["slow"], Key: key}}})
	wantCode(t, "without the interceptor, first", watchOnce(plain), codes.OK)
	wantCode(t, "without the interceptor, second", watchOnce(plain), codes.ResourceExhausted)
	capped, _ := start(t, grpclimit.Config{Rules: []grpclimit.Rule{{Limiter: lims["slow"], Key: func(context.Context, string) string { return "capped" }}}},
		grpc.WithStreamInterceptor(grpclimit.RetryStream(time.Second)))
	wantCode(t, "capped first", watchOnce(capped), codes.OK)
	begin := time.Now()
	wantCode(t, "beyond maxWait", watchOnce(capped), codes.ResourceExhausted)
	if time.Since(begin) > 5*time.Second {
		t.Errorf("waited %v for a retry beyond maxWait", time.Since(begin))
	}
}

// downStore is an engine that always fails, as a dead Redis does.
type downStore struct{ floodgate.Store }

func (downStore) Decide(context.Context, *algo.Set, string, int64) (algo.Verdict, error) {
	return algo.Verdict{}, errors.New("connection refused")
}
func (downStore) Reserve(context.Context, *algo.Set, string, int64, time.Duration) (algo.Verdict, algo.Ticket, error) {
	return algo.Verdict{}, algo.Ticket{}, errors.New("connection refused")
}
func (downStore) Cancel(context.Context, *algo.Set, string, int64, algo.Ticket) error {
	return errors.New("connection refused")
}

// OnLimited shapes every refusal: a limit's and a failed-closed
// limiter's, each with the Result that says which.
func TestOnLimitedShapesEveryRefusal(t *testing.T) {
	s := memory(t)
	fs, err := failover.New(downStore{s}, failover.Options{Mode: failover.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	closed, err := floodgate.New(fs, floodgate.Policy{Name: "closed", Limits: []floodgate.Limit{floodgate.PerHour(5)}})
	if err != nil {
		t.Fatal(err)
	}
	shape := func(_ context.Context, _ string, res floodgate.Result) error {
		return status.Errorf(codes.Aborted, "refused by %s: %d", res.Policy, httplimit.Status(res))
	}
	lims := limiters(t, s, map[string]floodgate.Limit{"one": floodgate.PerHour(1)})
	c, _ := start(t, grpclimit.Config{OnLimited: shape, Rules: []grpclimit.Rule{{Limiter: lims["one"]}}})
	call(t, c, "known")
	_, err = call(t, c, "known")
	if status.Code(err) != codes.Aborted || status.Convert(err).Message() != "refused by one: 429" {
		t.Errorf("denial: %v", err)
	}
	c, _ = start(t, grpclimit.Config{OnLimited: shape, Rules: []grpclimit.Rule{{Limiter: closed}}})
	_, err = call(t, c, "known")
	if status.Code(err) != codes.Aborted || status.Convert(err).Message() != "refused by closed: 503" {
		t.Errorf("fail closed: %v", err)
	}
}
