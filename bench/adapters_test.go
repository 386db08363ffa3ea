package bench

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/gofiber/fiber/v3"
	fiberlimiter "github.com/gofiber/fiber/v3/middleware/limiter"
	"github.com/labstack/echo/v4"
	echomw "github.com/labstack/echo/v4/middleware"
	ulule "github.com/ulule/limiter/v3"
	ulugin "github.com/ulule/limiter/v3/drivers/middleware/gin"
	ululemem "github.com/ulule/limiter/v3/drivers/store/memory"
	"github.com/valyala/fasthttp"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	echolimit "github.com/floodgate-go/floodgate/contrib/echo"
	fiberlimit "github.com/floodgate-go/floodgate/contrib/fiber"
	ginlimit "github.com/floodgate-go/floodgate/contrib/gin"
	grpclimit "github.com/floodgate-go/floodgate/contrib/grpc"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/memstore"
)

// The adapter families time one request through each framework's router
// with a bare handler, with floodgate's adapter, and with the limiter that
// framework's users usually reach for, all on memory stores, keyed by client
// IP (the TCP peer), from adapterClients clients cycled in order, with a
// quota that admits every request. The overhead of a limiter is its ns/op
// minus bare's.
//
//	cd bench && go test -run '^$' -bench 'Gin|Echo|Fiber|GRPC' -benchmem -count 6 . | tee adapters.txt
//	benchstat -col /impl adapters.txt
const adapterClients = 256

// adapterQuota admits every request of a benchmark run.
var adapterQuota = quota{rate: 1_000_000_000, period: time.Second}

// memLimiter is a floodgate limiter of q on a memory store of its own.
func memLimiter(tb testing.TB, name string, q quota) floodgate.Limiter {
	tb.Helper()
	s := memstore.New(memstore.Options{})
	tb.Cleanup(func() { s.Close() })
	lim, err := floodgate.New(s, floodgate.Policy{Name: name, Limits: []floodgate.Limit{{Rate: q.rate, Period: q.period}}})
	if err != nil {
		tb.Fatal(err)
	}
	return lim
}

// The header sets of the variants: floodgate's default (every family),
// the three X-RateLimit fields that ulule and Fiber's limiter send, and none,
// as Echo's RateLimiter and the x/time/rate interceptor send.
var (
	allHeaders = httplimit.Headers{}
	xHeaders   = httplimit.Headers{DisableRateLimit: true}
	noHeaders  = httplimit.Headers{DisableRateLimit: true, DisableXRateLimit: true}
)

// memMiddleware is httplimit's middleware over memLimiter, keyed by peer.
func memMiddleware(tb testing.TB, q quota, hdr httplimit.Headers) *httplimit.Middleware {
	tb.Helper()
	mw, err := httplimit.New(httplimit.Config{Headers: hdr, Rules: []httplimit.Rule{{Limiter: memLimiter(tb, "api", q)}}})
	if err != nil {
		tb.Fatal(err)
	}
	return mw
}

// netHTTPImpl builds a framework's handler, optionally limited.
type netHTTPImpl struct {
	name  string
	build func(tb testing.TB, q quota) http.Handler
}

var ginImpls = []netHTTPImpl{
	{"bare", func(tb testing.TB, _ quota) http.Handler { return ginRouter() }},
	{"floodgate", func(tb testing.TB, q quota) http.Handler {
		return ginRouter(ginlimit.New(memMiddleware(tb, q, allHeaders)))
	}},
	{"floodgate-x", func(tb testing.TB, q quota) http.Handler {
		return ginRouter(ginlimit.New(memMiddleware(tb, q, xHeaders)))
	}},
	{"ulule", func(tb testing.TB, q quota) http.Handler {
		return ginRouter(ulugin.NewMiddleware(ulule.New(ululemem.NewStore(), ulule.Rate{Period: q.period, Limit: q.rate})))
	}},
}

func ginRouter(mw ...gin.HandlerFunc) http.Handler {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(mw...)
	r.GET("/v1/items", func(c *gin.Context) { c.Writer.Write(okBody) })
	return r
}

var echoImpls = []netHTTPImpl{
	{"bare", func(tb testing.TB, _ quota) http.Handler { return echoRouter() }},
	{"floodgate", func(tb testing.TB, q quota) http.Handler {
		return echoRouter(echolimit.New(memMiddleware(tb, q, allHeaders)))
	}},
	{"floodgate-none", func(tb testing.TB, q quota) http.Handler {
		return echoRouter(echolimit.New(memMiddleware(tb, q, noHeaders)))
	}},
	// Echo's RateLimiter keys by c.RealIP(), which reads X-Forwarded-For
	// and X-Real-IP when present; the benchmark's requests carry neither,
	// so it keys by the peer as the others do. Its memory store is a
	// mutex-guarded map of x/time/rate limiters with a rate in events per
	// second.
	{"echo", func(tb testing.TB, q quota) http.Handler {
		perSec := rate.Limit(float64(q.rate) / q.period.Seconds())
		return echoRouter(echomw.RateLimiter(echomw.NewRateLimiterMemoryStoreWithConfig(
			echomw.RateLimiterMemoryStoreConfig{Rate: perSec, Burst: int(min(q.rate, 1<<30)), ExpiresIn: time.Hour})))
	}},
}

func echoRouter(mw ...echo.MiddlewareFunc) http.Handler {
	e := echo.New()
	e.Use(mw...)
	e.GET("/v1/items", func(c echo.Context) error { _, err := c.Response().Write(okBody); return err })
	return e
}

func runNetHTTP(b *testing.B, impls []netHTTPImpl) {
	reqs := ipRequests(adapterClients)
	for _, im := range impls {
		b.Run("impl="+im.name, func(b *testing.B) {
			h := im.build(b, adapterQuota)
			w := &nopWriter{h: newHeader()}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				h.ServeHTTP(w, reqs[i%adapterClients])
				if w.status != 0 && w.status != http.StatusOK {
					b.Fatalf("status %d", w.status)
				}
				w.reset()
			}
		})
	}
}

func BenchmarkGin(b *testing.B)  { runNetHTTP(b, ginImpls) }
func BenchmarkEcho(b *testing.B) { runNetHTTP(b, echoImpls) }

var fiberImpls = []struct {
	name  string
	build func(tb testing.TB, q quota) fasthttp.RequestHandler
}{
	{"bare", func(tb testing.TB, _ quota) fasthttp.RequestHandler { return fiberApp(nil) }},
	{"floodgate", func(tb testing.TB, q quota) fasthttp.RequestHandler {
		return fiberApp(fiberlimit.New(fiberlimit.Config{Limiter: memLimiter(tb, "api", q)}))
	}},
	{"floodgate-x", func(tb testing.TB, q quota) fasthttp.RequestHandler {
		return fiberApp(fiberlimit.New(fiberlimit.Config{Limiter: memLimiter(tb, "api", q), Headers: xHeaders}))
	}},
	// Fiber's limiter keys by c.IP(), the peer unless ProxyHeader is set;
	// FixedWindow is its default, on its in-process memory storage.
	{"fiber", func(tb testing.TB, q quota) fasthttp.RequestHandler {
		return fiberApp(fiberlimiter.New(fiberlimiter.Config{Max: int(min(q.rate, 1<<40)), Expiration: q.period}))
	}},
}

func fiberApp(mw fiber.Handler) fasthttp.RequestHandler {
	app := fiber.New()
	if mw != nil {
		app.Use(mw)
	}
	app.Get("/v1/items", func(c fiber.Ctx) error { return c.Send(okBody) })
	return app.Handler()
}

func BenchmarkFiber(b *testing.B) {
	ctxs := make([]*fasthttp.RequestCtx, adapterClients)
	for i := range ctxs {
		var req fasthttp.Request
		req.SetRequestURI("http://api.test/v1/items")
		addr := &net.TCPAddr{IP: net.ParseIP(ipKey(i)), Port: 4711}
		ctxs[i] = new(fasthttp.RequestCtx)
		ctxs[i].Init(&req, addr, nil)
	}
	for _, im := range fiberImpls {
		b.Run("impl="+im.name, func(b *testing.B) {
			h := im.build(b, adapterQuota)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				ctx := ctxs[i%adapterClients]
				h(ctx)
				if ctx.Response.StatusCode() != http.StatusOK {
					b.Fatalf("status %d", ctx.Response.StatusCode())
				}
				ctx.Response.Reset()
			}
		})
	}
}

var grpcImpls = []struct {
	name  string
	build func(tb testing.TB, q quota) grpc.UnaryServerInterceptor
}{
	{"bare", func(testing.TB, quota) grpc.UnaryServerInterceptor { return nil }},
	{"floodgate", func(tb testing.TB, q quota) grpc.UnaryServerInterceptor { return grpcFloodgate(tb, q, allHeaders, nil) }},
	{"floodgate-none", func(tb testing.TB, q quota) grpc.UnaryServerInterceptor { return grpcFloodgate(tb, q, noHeaders, nil) }},
	// Like the x/time/rate interceptor: one key for all, no metadata.
	{"floodgate-global", func(tb testing.TB, q quota) grpc.UnaryServerInterceptor {
		return grpcFloodgate(tb, q, noHeaders, func(context.Context, string) string { return "all" })
	}},
	// The plain x/time/rate interceptor: one limiter for the whole server,
	// no key, no metadata. floodgate keys by peer and sends metadata.
	{"xrate", func(_ testing.TB, q quota) grpc.UnaryServerInterceptor {
		lim := rate.NewLimiter(rate.Limit(float64(q.rate)/q.period.Seconds()), int(min(q.rate, 1<<30)))
		return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if !lim.Allow() {
				return nil, status.Error(codes.ResourceExhausted, "rate limit exceeded")
			}
			return h(ctx, req)
		}
	}},
}

func grpcFloodgate(tb testing.TB, q quota, hdr httplimit.Headers, key grpclimit.KeyFunc) grpc.UnaryServerInterceptor {
	tb.Helper()
	in, err := grpclimit.New(grpclimit.Config{Headers: hdr, Rules: []grpclimit.Rule{{Limiter: memLimiter(tb, "api", q), Key: key}}})
	if err != nil {
		tb.Fatal(err)
	}
	return in.Unary()
}

// BenchmarkGRPC calls each unary interceptor directly, with a context that
// carries the peer, as the server hands it over; the transport, the same for
// all, is left out.
func BenchmarkGRPC(b *testing.B) {
	ctxs := make([]context.Context, adapterClients)
	for i := range ctxs {
		ctx := grpc.NewContextWithServerTransportStream(context.Background(), nopStream{})
		ctxs[i] = peer.NewContext(ctx, &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(ipKey(i)), Port: 4711}})
	}
	info := &grpc.UnaryServerInfo{FullMethod: "/bench.Items/Get"}
	handler := func(ctx context.Context, req any) (any, error) { return req, nil }
	for _, im := range grpcImpls {
		b.Run("impl="+im.name, func(b *testing.B) {
			in := im.build(b, adapterQuota)
			if in == nil {
				in = func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
					return h(ctx, req)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if _, err := in(ctxs[i%adapterClients], okBody, info, handler); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// nopStream stands for the server's transport stream, which takes the
// response header metadata that an interceptor sets.
type nopStream struct{}

func (nopStream) Method() string                  { return "/bench.Items/Get" }
func (nopStream) SetHeader(md metadata.MD) error  { return nil }
func (nopStream) SendHeader(md metadata.MD) error { return nil }
func (nopStream) SetTrailer(md metadata.MD) error { return nil }

// TestAdaptersLimit checks that every limited implementation of the adapter
// families limits: one client's sixth request under a quota of five is
// refused.
func TestAdaptersLimit(t *testing.T) {
	five := quota{rate: 5, period: time.Hour}
	for family, impls := range map[string][]netHTTPImpl{"gin": ginImpls, "echo": echoImpls} {
		for _, im := range impls[1:] {
			t.Run(family+"/"+im.name, func(t *testing.T) {
				h := im.build(t, five)
				var last int
				for range 6 {
					w := &nopWriter{h: make(http.Header)}
					h.ServeHTTP(w, ipRequests(1)[0])
					last = w.status
				}
				if last != http.StatusTooManyRequests {
					t.Errorf("sixth request: %d, want 429", last)
				}
			})
		}
	}
	for _, im := range fiberImpls[1:] {
		t.Run("fiber/"+im.name, func(t *testing.T) {
			h := im.build(t, five)
			var ctx fasthttp.RequestCtx
			var req fasthttp.Request
			req.SetRequestURI("http://api.test/v1/items")
			ctx.Init(&req, &net.TCPAddr{IP: net.ParseIP("10.0.0.1"), Port: 1}, nil)
			for range 6 {
				ctx.Response.Reset()
				h(&ctx)
			}
			if ctx.Response.StatusCode() != http.StatusTooManyRequests {
				t.Errorf("sixth request: %d, want 429", ctx.Response.StatusCode())
			}
		})
	}
	for _, im := range grpcImpls[1:] {
		t.Run("grpc/"+im.name, func(t *testing.T) {
			in := im.build(t, five)
			ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP("10.0.0.1"), Port: 1}})
			var err error
			for range 6 {
				_, err = in(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/x/y"}, func(context.Context, any) (any, error) { return nil, nil })
			}
			if status.Code(err) != codes.ResourceExhausted {
				t.Errorf("sixth call: %v, want RESOURCE_EXHAUSTED", err)
			}
		})
	}
}
