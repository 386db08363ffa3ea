// Package experiments runs the five experiments of the course module on
// incoming requests (middleware, keys, hybrid local+global) with floodgate
// daemons configured by YAML instead of code, and reports what it found:
//
//  1. headers: a hybrid limiter with the course's numbers (local 10/s burst
//     20, global 50/s burst 100) shows X-RateLimit-*; past the limit, 429
//     with Retry-After;
//  2. local mode multiplies: two instances each limiting locally admit
//     twice the limit;
//  3. hybrid is exact: first the course's own pair on two instances, which
//     admits what the two local limits add up to (the pair assumes five
//     replicas), then shares sized for two, which admit the global limit;
//     X-RateLimit-Source says which level decided;
//  4. degradation: Redis stopped under load, traffic keeps flowing, Source
//     becomes local-fallback and the Redis error counter grows;
//  5. spoofing: with the clients' own address trusted as a proxy (the naive
//     key), a new X-Forwarded-For per request lets everything through; with
//     the peer's address as the key, it does nothing.
//
// Everything runs on loopback and stops by itself.
package experiments

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/daemon"
	"github.com/floodgate-go/floodgate/testkit"
)

// Findings are what the experiments measured.
type Findings struct {
	HeadersShown   bool  // 1: X-RateLimit-* on every answer
	Got429         bool  // 1: a 429 with Retry-After past the limit
	LocalAdmitted  int64 // 2: admitted by two local instances
	LocalBound     int64 // 2: what two whole limits allow in the time the requests took
	CourseAdmitted int64 // 3: admitted by two hybrid instances with the course's local 10/s burst 20
	CourseBound    int64 // 3: what two such local limits allow in the time the requests took
	HybridAdmitted int64 // 3: admitted by two hybrid instances sized for two
	HybridBound    int64 // 3: what one global limit allows in the time the requests took
	Limit          int64 // the burst both modes were asked to admit
	SourcesSeen    []string
	FlowedDown     int64   // 4: requests answered while Redis was down
	FallbackSeen   bool    // 4: Source local-fallback while down
	RedisErrors    float64 // 4: floodgate_engine_errors_total{engine="redis"} after the outage
	NaiveAdmitted  int64   // 5: of 200 spoofed requests, with the clients' address trusted as a proxy
	SpoofAdmitted  int64   // 5: of 200 requests with distinct spoofed X-Forwarded-For, keyed by peer
	SpoofBound     int64   // 5: what one client may get in the time they took
}

// gathered reads the value of the series of metric name whose op label is
// op from the daemon's registry.
func gathered(d *daemon.Daemon, name, op string) float64 {
	mfs, err := d.Registry().Gather()
	if err != nil {
		return 0
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "op" && l.GetValue() == op {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// conf is the daemons' configuration: the storage section, the policy's
// local limits, the upstream and the proxy's client_ip section.
const conf = `
storage:
%s
policies:
  api: {rate: 50/s, burst: 100%s}
proxy:
  listen: 127.0.0.1:0
  upstream: %s
  headers: {source: true}
%s
  routes:
    - limits: [{policy: api, key: ip}]
admin: {listen: ""}
`

// Run runs the five experiments, writing what happens to w.
func Run(ctx context.Context, w io.Writer) (*Findings, error) {
	f := &Findings{Limit: 100}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") }))
	defer up.Close()
	rs, err := testkit.StartRedis()
	if err != nil {
		return nil, err
	}
	defer rs.Close()

	start := func(engine string) (*daemon.Daemon, string, error) {
		storage, local, clientIP := "  engine: memory", "", ""
		switch engine {
		case "hybrid":
			// The course's two numbers: local 10/s burst 20 in front of
			// global 50/s burst 100.
			local = ", local: {rate: 10/s, burst: 20}"
		case "naive":
			// The clients' own address trusted as a proxy: X-Forwarded-For
			// is believed from anyone on it.
			clientIP = "  client_ip: {trusted_proxies: [127.0.0.0/8]}"
		}
		if strings.HasPrefix(engine, "hybrid") {
			storage = fmt.Sprintf(`  engine: hybrid
  redis: {addrs: [%s]}
  failure: {timeout: 100ms, breaker: {min_calls: 3, backoff: 1s}}`, rs.Addr)
			if engine == "hybrid-2" {
				// Two instances sized as such: shares add up to more than
				// the global limit (headroom 1.2), so Redis, not the
				// filters, decides what passes.
				storage += "\n  hybrid: {instances: 2, headroom: 1.2}"
			}
		}
		c, err := config.Parse("course.yaml", []byte(fmt.Sprintf(conf, storage, local, up.URL, clientIP)))
		if err != nil {
			return nil, "", err
		}
		d, err := daemon.New(c, daemon.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return nil, "", err
		}
		if err := d.Start(); err != nil {
			return nil, "", err
		}
		return d, "http://" + d.Addrs().Proxy.String() + "/", nil
	}
	stop := func(ds ...*daemon.Daemon) {
		for _, d := range ds {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			d.Shutdown(sctx)
			cancel()
		}
	}

	// 1. Headers and a 429.
	fmt.Fprintln(w, "1. A hybrid limiter (global 50/s burst 100, local 10/s burst 20): the headers")
	d1, u1, err := start("hybrid")
	if err != nil {
		return nil, err
	}
	resp, err := http.Get(u1)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	f.HeadersShown = resp.Header.Get("X-Ratelimit-Limit") != "" && resp.Header.Get("X-Ratelimit-Remaining") != ""
	for _, h := range []string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "X-Ratelimit-Source", "Ratelimit"} {
		fmt.Fprintf(w, "   %s: %s\n", h, resp.Header.Get(h))
	}
	for range 200 {
		resp, err := http.Get(u1)
		if err != nil {
			return nil, err
		}
		resp.Body.Close()
		if resp.StatusCode == 429 && resp.Header.Get("Retry-After") != "" {
			f.Got429 = true
			fmt.Fprintf(w, "   past the limit: %s, Retry-After: %s, Source: %s\n", resp.Status, resp.Header.Get("Retry-After"), resp.Header.Get("X-Ratelimit-Source"))
			break
		}
	}
	stop(d1)
	// A fresh Redis for the next experiments: the global limit starts full.
	rs.Kill()
	if err := rs.Start(); err != nil {
		return nil, err
	}

	// 2 and 3: two instances behind a round-robin balancer, 400 requests at
	// once from one client, local mode then hybrid mode.
	var took time.Duration
	burst := func(engine string) (int64, []string, error) {
		a, ua, err := start(engine)
		if err != nil {
			return 0, nil, err
		}
		b, ub, err := start(engine)
		if err != nil {
			stop(a)
			return 0, nil, err
		}
		defer stop(a, b)
		began := time.Now()
		defer func() { took = time.Since(began) }()
		var admitted int64
		sources := map[string]bool{}
		for i := range 400 {
			u := ua
			if i%2 == 1 {
				u = ub
			}
			resp, err := http.Get(u)
			if err != nil {
				return 0, nil, err
			}
			resp.Body.Close()
			if resp.StatusCode == 200 {
				admitted++
			}
			sources[resp.Header.Get("X-Ratelimit-Source")] = true
		}
		var list []string
		for s := range sources {
			list = append(list, s)
		}
		return admitted, list, nil
	}
	fmt.Fprintln(w, "\n2. Two instances in local mode (memory engine each), 400 requests at once:")
	if f.LocalAdmitted, _, err = burst("memory"); err != nil {
		return nil, err
	}
	f.LocalBound = 2 * (f.Limit + int64(took.Seconds()*50) + 1)
	fmt.Fprintf(w, "   admitted %d: %.1f× the burst of %d — each instance enforces the whole limit\n", f.LocalAdmitted, float64(f.LocalAdmitted)/float64(f.Limit), f.Limit)
	fmt.Fprintln(w, "\n3. The same two instances in hybrid mode, sharing Redis, with the course's local 10/s burst 20:")
	if f.CourseAdmitted, _, err = burst("hybrid"); err != nil {
		return nil, err
	}
	// Each filter passes its burst of 20 plus 10/s of refill.
	f.CourseBound = 2 * (20 + int64(took.Seconds()*10) + 1)
	fmt.Fprintf(w, "   admitted %d, within the two local limits' %d for the %s they took: the filters together pass 20/s burst 40,\n"+
		"   below the global 50/s burst 100. The 10/50 pair assumes five replicas (5 × 10/s = 50/s); size the shares for the instances you run:\n",
		f.CourseAdmitted, f.CourseBound, took.Round(time.Millisecond))
	rs.Kill() // the global limit starts full again
	if err := rs.Start(); err != nil {
		return nil, err
	}
	fmt.Fprintln(w, "   the same two instances with shares sized for two (instances: 2, headroom: 1.2):")
	if f.HybridAdmitted, f.SourcesSeen, err = burst("hybrid-2"); err != nil {
		return nil, err
	}
	// The global limit allows its burst plus 50/s of refill while they ran.
	f.HybridBound = f.Limit + int64(took.Seconds()*50) + 1
	fmt.Fprintf(w, "   admitted %d, within the one global limit's %d for the %s they took; sources %s\n",
		f.HybridAdmitted, f.HybridBound, took.Round(time.Millisecond), strings.Join(f.SourcesSeen, ", "))

	// 4. Redis stopped under load.
	fmt.Fprintln(w, "\n4. Redis stopped under load:")
	d4, u4, err := start("hybrid")
	if err != nil {
		return nil, err
	}
	defer stop(d4)
	rs.Kill()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(u4)
		if err != nil {
			return nil, err
		}
		resp.Body.Close()
		if resp.StatusCode == 200 || resp.StatusCode == 429 {
			f.FlowedDown++
		}
		if resp.Header.Get("X-Ratelimit-Source") == "local-fallback" {
			f.FallbackSeen = true
		}
		time.Sleep(10 * time.Millisecond) // a client's pace: a bounded load, not a flood
	}
	f.RedisErrors = gathered(d4, "floodgate_engine_errors_total", "decide")
	fmt.Fprintf(w, "   %d requests answered in 3 s with Redis down; Source local-fallback seen: %v; floodgate_engine_errors_total{engine=\"redis\",op=\"decide\"} = %g\n",
		f.FlowedDown, f.FallbackSeen, f.RedisErrors)
	if err := rs.Start(); err != nil {
		return nil, err
	}

	// 5. A spoofed X-Forwarded-For, naive key first, then the peer's.
	spoof := func(engine string) (admitted int64, took time.Duration, err error) {
		d, u, err := start(engine)
		if err != nil {
			return 0, 0, err
		}
		defer stop(d)
		began := time.Now()
		for i := range 200 {
			req, _ := http.NewRequest("GET", u, nil)
			req.Header.Set("X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return 0, 0, err
			}
			resp.Body.Close()
			if resp.StatusCode == 200 {
				admitted++
			}
		}
		return admitted, time.Since(began), nil
	}
	fmt.Fprintln(w, "\n5. 200 requests from one address, each with another X-Forwarded-For, twice:")
	var spoofTook time.Duration
	f.NaiveAdmitted, _, err = spoof("naive")
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "   the naive key (the clients' own address trusted as a proxy, so X-Forwarded-For is believed): %d of 200 passed — every request is a new client\n", f.NaiveAdmitted)
	if f.SpoofAdmitted, spoofTook, err = spoof("memory"); err != nil {
		return nil, err
	}
	// One client gets the burst of 100 plus 50/s of refill.
	f.SpoofBound = f.Limit + int64(spoofTook.Seconds()*50) + 1
	fmt.Fprintf(w, "   the peer's address as the key (no trusted proxies): %d of 200 passed, within one client's %d for the time they took: the header is not believed from this peer\n", f.SpoofAdmitted, f.SpoofBound)
	return f, nil
}
