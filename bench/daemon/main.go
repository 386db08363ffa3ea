// Command daemonbench measures floodgate's daemon front ends on loopback:
// the reverse proxy (as a server for wrk to load, with limiting on or off),
// and the Envoy rate limit API and the check API over the Redis engine
// (with a load generator of its own). run.sh drives it; see
// docs/BENCHMARKS.md for the results.
//
//	daemonbench upstream -listen 127.0.0.1:9001
//	daemonbench proxy -listen 127.0.0.1:9002 -upstream http://127.0.0.1:9001 -limit=true
//	daemonbench load -redis 127.0.0.1:6379 -api envoy -keys 65536 -d 10s
//	daemonbench rls -descriptors 2 -keys 10000 -d 5s -rounds 3
//
// rls runs floodgate serve and envoyproxy/ratelimit (built from source)
// side by side, each on a redis-server of its own (see rls.go).
//
// Every server stops by itself after -max (default 10 minutes), and every
// load run after -d.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/checkapi"
	"github.com/floodgate-go/floodgate/envoyrls"
	"github.com/floodgate-go/floodgate/envoyrules"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/proxy"
	"github.com/floodgate-go/floodgate/redisstore"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: daemonbench upstream|proxy|bareproxy|proxyvs|load|rls [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "upstream":
		err = runUpstream(os.Args[2:])
	case "proxy":
		err = runProxy(os.Args[2:])
	case "bareproxy":
		err = runBareProxy(os.Args[2:])
	case "proxyvs":
		err = runProxyVS(os.Args[2:])
	case "rls":
		err = runRLS(os.Args[2:])
	case "load":
		err = runLoad(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "daemonbench:", err)
		os.Exit(1)
	}
}

// serveFor serves h on addr until max passes.
func serveFor(addr string, h http.Handler, max time.Duration) error {
	srv := &http.Server{Addr: addr, Handler: h}
	time.AfterFunc(max, func() { srv.Close() })
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		return err
	}
	return nil
}

var hello = []byte("hello from the upstream\n")

func runUpstream(args []string) error {
	fs := flag.NewFlagSet("upstream", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:9001", "address")
	max := fs.Duration("max", 10*time.Minute, "stop after")
	b64 := fs.Bool("body64", false, "answer the 64 bytes the nginx upstream of proxyvs answers")
	fs.Parse(args)
	body := hello
	if *b64 {
		body = []byte(body64)
	}
	return serveFor(*listen, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = []string{"text/plain"}
		w.Write(body)
	}), *max)
}

func runProxy(args []string) error {
	fs := flag.NewFlagSet("proxy", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:9002", "address")
	upstream := fs.String("upstream", "http://127.0.0.1:9001", "upstream URL")
	limit := fs.Bool("limit", true, "limit every request by client address (a limit high enough that all pass)")
	max := fs.Duration("max", 10*time.Minute, "stop after")
	pprofAddr := fs.String("pprof", "", "serve net/http/pprof on this address, for profiles under load")
	fs.Parse(args)
	if *pprofAddr != "" {
		go serveFor(*pprofAddr, http.DefaultServeMux, *max)
	}
	cfg := proxy.Config{Upstream: *upstream, Logger: slog.New(slog.DiscardHandler)}
	if *limit {
		st := memstore.New(memstore.Options{})
		defer st.Close()
		// Every request is decided and passes: the cost measured is the
		// decision and its header fields, not refusals.
		lim, err := floodgate.New(st, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerSecond(1_000_000_000)}})
		if err != nil {
			return err
		}
		cfg.Routes = []proxy.Route{{Limits: []httplimit.Rule{{Limiter: lim}}}}
	}
	p, err := proxy.New(cfg)
	if err != nil {
		return err
	}
	return serveFor(*listen, p, *max)
}

func runLoad(args []string) error {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	redisAddr := fs.String("redis", "127.0.0.1:6379", "redis-server address")
	api := fs.String("api", "envoy", "envoy, check or engine (the limiter called directly)")
	keys := fs.Int("keys", 1, "distinct keys, drawn at random per call")
	callers := fs.Int("callers", 32, "concurrent callers")
	conns := fs.Int("conns", 4, "connections the callers share")
	d := fs.Duration("d", 10*time.Second, "duration")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the run")
	fs.Parse(args)

	client := redis.NewClient(&redis.Options{Addr: *redisAddr, ContextTimeoutEnabled: true, PoolSize: 16})
	defer client.Close()
	rs, err := redisstore.New(client, redisstore.Options{Prefix: fmt.Sprintf("bench%d:", time.Now().UnixNano())})
	if err != nil {
		return err
	}
	defer rs.Close()
	store, err := failover.New(rs, failover.Options{Mode: failover.FailClosed, Guard: failover.GuardOptions{ContextBound: true, Timeout: 2 * time.Second}})
	if err != nil {
		return err
	}
	lim, err := floodgate.New(store, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerSecond(1_000_000)}})
	if err != nil {
		return err
	}
	// The front ends' deadlines are above the engine's timeout, so a
	// stalled call is answered by the failure policy.
	check := checkapi.New(checkapi.Config{Timeout: 3 * time.Second, Policies: map[string]floodgate.Limiter{"api": lim}, Logger: slog.New(slog.DiscardHandler)})
	checkLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	checkSrv := &http.Server{Handler: check}
	go checkSrv.Serve(checkLn)
	defer checkSrv.Close()
	rules, err := envoyrules.Parse("bench.yaml", []byte("domain: bench\ndescriptors: [{key: user, rate_limit: {unit: second, requests_per_unit: 1000000}}]\n"))
	if err != nil {
		return err
	}
	rls, err := envoyrls.New(envoyrls.Config{Timeout: 3 * time.Second, Rules: rules, Limiters: map[string]floodgate.Limiter{"bench.user": lim}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	envoyLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go rls.Serve(envoyLn)
	defer rls.Shutdown(context.Background())

	var call func(ctx context.Context, c int, key string) error
	switch *api {
	case "engine":
		call = func(ctx context.Context, _ int, key string) error {
			res, err := floodgate.Allow(ctx, lim, key)
			if err == nil && res.Source != "redis" {
				err = fmt.Errorf("decided by %s", res.Source)
			}
			return err
		}
	case "envoy":
		clients := make([]rlsv3.RateLimitServiceClient, *conns)
		for i := range clients {
			cc, err := grpc.NewClient(envoyLn.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				return err
			}
			defer cc.Close()
			clients[i] = rlsv3.NewRateLimitServiceClient(cc)
		}
		call = func(ctx context.Context, c int, key string) error {
			resp, err := clients[c%len(clients)].ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
				Domain: "bench",
				Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{
					{Key: "user", Value: key},
				}}},
			})
			if err == nil && resp.OverallCode != rlsv3.RateLimitResponse_OK {
				err = fmt.Errorf("answer %v", resp.OverallCode)
			}
			return err
		}
	case "check":
		// One transport per connection, so the callers share exactly
		// conns connections.
		trs := make([]*http.Client, *conns)
		for i := range trs {
			trs[i] = &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}}
		}
		url := "http://" + checkLn.Addr().String() + checkapi.Path
		call = func(ctx context.Context, c int, key string) error {
			body := `{"policy":"api","key":"` + key + `"}`
			req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
			resp, err := trs[c%len(trs)].Do(req)
			if err != nil {
				return err
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return nil
		}
	default:
		return fmt.Errorf("unknown api %q", *api)
	}

	keyNames := make([]string, *keys)
	for i := range keyNames {
		keyNames[i] = "user:" + strconv.Itoa(i)
	}
	// Warm up: connections, the script, the keys' first writes.
	for i := range min(*keys, 1000) {
		if err := call(context.Background(), i, keyNames[i]); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	ctx, cancel := context.WithTimeout(context.Background(), *d)
	defer cancel()
	lat := make([][]time.Duration, *callers)
	errs := make([]int, *callers)
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	begin := time.Now()
	for c := range *callers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(c), 7))
			l := make([]time.Duration, 0, 1<<16)
			for ctx.Err() == nil {
				k := keyNames[r.IntN(len(keyNames))]
				t0 := time.Now()
				err := call(context.Background(), c, k)
				l = append(l, time.Since(t0))
				if err != nil {
					errs[c]++
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
			lat[c] = l
		})
	}
	wg.Wait()
	elapsed := time.Since(begin)
	var all []time.Duration
	nerr := 0
	for c := range lat {
		all = append(all, lat[c]...)
		nerr += errs[c]
	}
	slices.Sort(all)
	p := func(q float64) time.Duration { return all[min(len(all)-1, int(q*float64(len(all))))] }
	fmt.Printf("api=%s keys=%d callers=%d conns=%d decisions/s=%.0f p50=%s p99=%s errors=%d\n",
		*api, *keys, *callers, *conns, float64(len(all))/elapsed.Seconds(), p(0.50), p(0.99), nerr)
	if firstErr != nil {
		fmt.Fprintln(os.Stderr, "first error:", firstErr)
	}
	return nil
}
