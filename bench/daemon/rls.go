package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
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

	"github.com/floodgate-go/floodgate/internal/envoydiff"
	"github.com/floodgate-go/floodgate/testkit"
)

// rlsRules are the rules both servers get: two descriptors limited to
// rate per second each (by default a rate every call passes, so each call
// is a full decision in both).
func rlsRules(rate int64) string {
	return fmt.Sprintf(`domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: %d}
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: %d}
`, rate, rate)
}

// runRLS loads floodgate serve's Envoy listener and envoyproxy/ratelimit
// (built from its source at envoydiff.Version) with the same rules, each
// on a redis-server of its own, in interleaved rounds, and reports calls
// per second, latency, and CPU per call of each server process and each
// redis-server (from /proc), with the Redis commands each call cost.
func runRLS(args []string) error {
	fs := flag.NewFlagSet("rls", flag.ExitOnError)
	d := fs.Duration("d", 5*time.Second, "duration of each load run")
	rounds := fs.Int("rounds", 4, "rounds; each runs floodgate and the reference, in turns first")
	callers := fs.Int("callers", 32, "concurrent callers")
	conns := fs.Int("conns", 4, "gRPC connections the callers share")
	keys := fs.Int("keys", 1, "distinct values per descriptor, drawn at random per call")
	descs := fs.Int("descriptors", 1, "descriptors per call (1 or 2)")
	envoy := fs.String("floodgate", "", "more lines of floodgate's envoy section, separated by ';' (e.g. 'descriptors: independent;charge_denied: true')")
	storage := fs.String("storage", "redis", "floodgate's engine: redis or hybrid")
	refEnv := fs.String("reference-env", "", "more settings of the reference, NAME=value separated by ','")
	bin := fs.String("floodgate-bin", "", "a floodgate binary to run (default: build this tree's)")
	rate := fs.Int64("rate", 1_000_000_000, "requests per second each descriptor's limit admits; below the load, most calls are over the limit")
	fs.Parse(args)
	if *descs < 1 || *descs > 2 {
		return errors.New("-descriptors is 1 or 2")
	}
	ctx := context.Background()
	tmp, err := os.MkdirTemp("", "rlsbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	fg := *bin
	if fg == "" {
		if fg, err = envoydiff.BuildFloodgate(ctx, tmp); err != nil {
			return err
		}
	}
	ref, err := envoydiff.BuildReference(ctx)
	if err != nil {
		return err
	}
	rFG, err := startRedis()
	if err != nil {
		return err
	}
	defer rFG.stop()
	rRef, err := startRedis()
	if err != nil {
		return err
	}
	defer rRef.stop()
	files := []envoydiff.File{{Name: "bench.yaml", Data: []byte(rlsRules(*rate))}}

	fgDir, refDir := filepath.Join(tmp, "floodgate-serve"), filepath.Join(tmp, "reference-serve")
	for _, dir := range []string{fgDir, refDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	if *storage != "redis" && *storage != "hybrid" {
		return fmt.Errorf("-storage %q: redis or hybrid", *storage)
	}
	fgServer, err := envoydiff.StartFloodgateStorage(ctx, fg, fgDir, rFG.addr, files, strings.ReplaceAll(*envoy, ";", "\n"), *storage)
	if err != nil {
		return err
	}
	defer fgServer.Close()
	var opts envoydiff.ReferenceOptions
	if *refEnv != "" {
		opts = strings.Split(*refEnv, ",")
	}
	refServer, err := envoydiff.StartReference(ctx, ref, refDir, rRef.addr, files, opts)
	if err != nil {
		return err
	}
	defer refServer.Close()

	type side struct {
		name   string
		server *envoydiff.Server
		redis  *redisProc
		runs   []rlsRun
	}
	sides := []*side{{name: "floodgate", server: fgServer, redis: rFG}, {name: "reference", server: refServer, redis: rRef}}
	fmt.Printf("# %s; reference %s@%s; load %s\n", machine(), envoydiff.Module, envoydiff.Version, loadavg())
	fmt.Printf("# callers=%d conns=%d keys=%d descriptors=%d rate=%d/s d=%s storage=%s floodgate=%q reference-env=%q\n", *callers, *conns, *keys, *descs, *rate, *d, *storage, *envoy, *refEnv)
	for round := range *rounds {
		// The order alternates, so a drift of the machine's load does not
		// always favour the same side.
		order := []*side{sides[0], sides[1]}
		if round%2 == 1 {
			order[0], order[1] = sides[1], sides[0]
		}
		for _, s := range order {
			r, err := loadRLS(s.server, s.redis, *callers, *conns, *keys, *descs, *d, *rate < 1_000_000_000)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			s.runs = append(s.runs, r)
			fmt.Printf("round=%d impl=%s %s\n", round+1, s.name, r)
		}
	}
	med := func(s *side, f func(rlsRun) float64) float64 {
		v := make([]float64, len(s.runs))
		for i, r := range s.runs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	ratio := func(f func(rlsRun) float64) string {
		var lo, hi float64
		for i := range sides[0].runs {
			x := f(sides[0].runs[i]) / f(sides[1].runs[i])
			if i == 0 || x < lo {
				lo = x
			}
			if i == 0 || x > hi {
				hi = x
			}
		}
		return fmt.Sprintf("%.2f× (rounds %.2f–%.2f)", med(sides[0], f)/med(sides[1], f), lo, hi)
	}
	fmt.Printf("floodgate/reference: calls/s %s, p99 %s, server CPU/call %s, redis CPU/call %s, redis commands/call %.2f vs %.2f\n",
		ratio(func(r rlsRun) float64 { return r.rate }),
		ratio(func(r rlsRun) float64 { return float64(r.p99) }),
		ratio(func(r rlsRun) float64 { return r.serverCPU }),
		ratio(func(r rlsRun) float64 { return r.redisCPU }),
		med(sides[0], func(r rlsRun) float64 { return r.redisCmds }), med(sides[1], func(r rlsRun) float64 { return r.redisCmds }))
	return nil
}

// An rlsRun is one load run's numbers.
type rlsRun struct {
	rate                float64 // calls per second
	p50, p99            time.Duration
	serverCPU, redisCPU float64 // µs of user+system CPU per call
	redisCmds           float64 // Redis commands per call
	calls, errs         int
	firstErr            error
	commands            string // the commands, by count
}

func (r rlsRun) String() string {
	s := fmt.Sprintf("calls/s=%.0f p50=%s p99=%s cpu/call: server=%.1fµs redis=%.1fµs redis-commands/call=%.2f (command calls/µs in the command, per call: %s) errors=%d",
		r.rate, r.p50, r.p99, r.serverCPU, r.redisCPU, r.redisCmds, r.commands, r.errs)
	if r.firstErr != nil {
		s += " first-error=" + strconv.Quote(r.firstErr.Error())
	}
	return s
}

// loadRLS runs callers against server for d, each call with descs
// descriptors of random values among keys.
func loadRLS(server *envoydiff.Server, rp *redisProc, callers, conns, keys, descs int, d time.Duration, limited bool) (rlsRun, error) {
	clients := make([]rlsv3.RateLimitServiceClient, conns)
	for i := range clients {
		cc, err := grpc.NewClient(server.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return rlsRun{}, err
		}
		defer cc.Close()
		clients[i] = rlsv3.NewRateLimitServiceClient(cc)
	}
	names := make([]string, keys)
	for i := range names {
		names[i] = "k" + strconv.Itoa(i)
	}
	mkReq := func(r *rand.Rand) *rlsv3.RateLimitRequest {
		req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: names[r.IntN(keys)]}}},
		}}
		if descs == 2 {
			req.Descriptors = append(req.Descriptors, &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: names[r.IntN(keys)]}}})
		}
		return req
	}
	check := func(resp *rlsv3.RateLimitResponse, err error) error {
		if err == nil && (resp.OverallCode != rlsv3.RateLimitResponse_OK && !limited || len(resp.Statuses) != descs || resp.Statuses[0].CurrentLimit == nil) {
			err = fmt.Errorf("answer %v", resp)
		}
		return err
	}
	// Warm up: connections, scripts, the first keys.
	warm := rand.New(rand.NewPCG(1, 1))
	for i := range 200 {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := check(clients[i%conns].ShouldRateLimit(cctx, mkReq(warm)))
		cancel()
		if err != nil {
			return rlsRun{}, fmt.Errorf("warm-up: %w", err)
		}
	}
	statsBefore, err := rp.commandStats()
	if err != nil {
		return rlsRun{}, err
	}
	srvBefore, err := procCPU(server.Pid())
	if err != nil {
		return rlsRun{}, err
	}
	redisBefore, err := procCPU(rp.pid())
	if err != nil {
		return rlsRun{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	lat := make([][]time.Duration, callers)
	errs := make([]int, callers)
	var first error
	var mu sync.Mutex
	var wg sync.WaitGroup
	begin := time.Now()
	for c := range callers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(c), 7))
			l := make([]time.Duration, 0, 1<<15)
			for ctx.Err() == nil {
				req := mkReq(r)
				cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
				t0 := time.Now()
				err := check(clients[c%conns].ShouldRateLimit(cctx, req))
				l = append(l, time.Since(t0))
				ccancel()
				if err != nil {
					errs[c]++
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
			lat[c] = l
		})
	}
	wg.Wait()
	elapsed := time.Since(begin)
	srvAfter, err := procCPU(server.Pid())
	if err != nil {
		return rlsRun{}, err
	}
	redisAfter, err := procCPU(rp.pid())
	if err != nil {
		return rlsRun{}, err
	}
	statsAfter, err := rp.commandStats()
	if err != nil {
		return rlsRun{}, err
	}
	var all []time.Duration
	n := 0
	for c := range lat {
		all = append(all, lat[c]...)
		n += errs[c]
	}
	if len(all) == 0 {
		return rlsRun{}, errors.New("no call finished")
	}
	slices.Sort(all)
	p := func(q float64) time.Duration { return all[min(len(all)-1, int(q*float64(len(all))))] }
	// Only decisions count: an error or an answer of the failure mode
	// (no current_limit) is not one.
	calls := float64(len(all) - n)
	if calls <= 0 {
		return rlsRun{}, fmt.Errorf("no call was decided: %v", first)
	}
	run := rlsRun{rate: calls / elapsed.Seconds(), p50: p(0.5), p99: p(0.99), calls: len(all), errs: n, firstErr: first,
		serverCPU: float64(srvAfter-srvBefore) / calls / float64(time.Microsecond),
		redisCPU:  float64(redisAfter-redisBefore) / calls / float64(time.Microsecond)}
	var parts []string
	total := int64(0)
	for _, name := range slices.Sorted(maps.Keys(statsAfter)) {
		if strings.HasSuffix(name, " µs") || name == "info" {
			continue
		}
		if dn := statsAfter[name] - statsBefore[name]; dn > 0 {
			total += dn
			us := float64(statsAfter[name+" µs"]-statsBefore[name+" µs"]) / calls
			parts = append(parts, fmt.Sprintf("%s %.2f/%.1fµs", name, float64(dn)/calls, us))
		}
	}
	run.redisCmds = float64(total) / calls
	run.commands = strings.Join(parts, ", ")
	return run, nil
}

// procCPU is a process's user+system CPU time so far, from /proc (in
// clock ticks of 10 ms, the kernel's USER_HZ on Linux).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	// The command name may hold spaces; fields resume after its ')'.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// A redisProc is a redis-server of the benchmark's own, with a client to
// read its command counts.
type redisProc struct {
	srv    *testkit.RedisServer
	addr   string
	client *redis.Client
}

func startRedis() (*redisProc, error) {
	srv, err := testkit.StartRedis()
	if err != nil {
		return nil, err
	}
	return &redisProc{srv: srv, addr: srv.Addr, client: redis.NewClient(&redis.Options{Addr: srv.Addr})}, nil
}

func (r *redisProc) pid() int { return r.srv.Pid() }

func (r *redisProc) stop() {
	r.client.Close()
	r.srv.Close()
}

// commandStats returns how many times each command ran so far.
func (r *redisProc) commandStats() (map[string]int64, error) {
	s, err := r.client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		// cmdstat_evalsha:calls=123,usec=456,...
		name, rest, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		n, rest, _ := strings.Cut(rest, ",")
		if v, err := strconv.ParseInt(n, 10, 64); err == nil {
			out[name] = v
		}
		if u, ok := strings.CutPrefix(rest, "usec="); ok {
			u, _, _ = strings.Cut(u, ",")
			if v, err := strconv.ParseInt(u, 10, 64); err == nil {
				out[name+" µs"] = v
			}
		}
	}
	return out, nil
}

func machine() string {
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				_, model, _ = strings.Cut(l, ":")
				break
			}
		}
	}
	n := 0
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		n = strings.Count(string(b), "processor\t:")
	}
	return fmt.Sprintf("%d cores,%s", n, model)
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
