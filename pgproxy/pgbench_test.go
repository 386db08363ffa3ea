package pgproxy_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/pgproxy"
	"github.com/floodgate-go/floodgate/testkit"
)

// BenchmarkPgbench compares, side by side, pgbench -S (select-only) run
// directly against PostgreSQL and through the hops a user might put in
// front of it:
//
//   - floodgate: this proxy, all three query scopes on, with limits too
//     high to bite (every query is decided by three limiters, on a memory
//     store, inline on the event loop);
//   - floodgate-tls: this proxy as floodgate, with clients over TLS
//     (sslmode=require), which the goroutine relay carries;
//   - pgbouncer: pgbouncer in session mode (one server connection per
//     client, as floodgate);
//   - pgbouncer-tx: pgbouncer in transaction mode (pooling);
//   - floodgate+pgbouncer-tx: floodgate in front of pgbouncer in transaction
//     mode, how a user who needs pooling runs it;
//   - relay: a Go TCP relay, io.Copy each way (the net.Conn yardstick);
//   - epoll-relay: a Go relay on one epoll loop over raw sockets, without
//     the runtime's netpoller (the floor of a Go hop, bytes only);
//   - uring-relay: the same on io_uring, one submission per round for all
//     connections, completions instead of epoll_wait and reads.
//
// for each query mode and client count. Runs are interleaved: every round
// runs every target once per mode and client count, in the opposite order
// of the round before, so noise from other processes spreads over all
// targets. Each line gives tps, the CPU time (user + system) of each hop's
// process per transaction, read from /proc (getrusage for this process,
// which holds floodgate and the Go relays), and the load average at its
// start; the summary gives medians, and the ratios of floodgate to
// pgbouncer per round (each round's pair ran side by side) as median and
// range. It runs once, whatever b.N: bench/pgbench.sh runs it with
// -benchtime=1x.
//
// Environment: PGBENCH_T seconds per run (default 15), PGBENCH_ROUNDS
// (default 4), PGBENCH_MODES (default "simple prepared"), PGBENCH_CLIENTS
// (default "8 32"), PGBENCH_JOBS (2), and PGBENCH_TARGETS (default all, by
// the names above), e.g. to profile one alone. pgbouncer 1.18 keeps no
// prepared statements across transactions, so the transaction-mode targets
// run in the simple and extended modes only.
func BenchmarkPgbench(b *testing.B) {
	dur := envInt(b, "PGBENCH_T", 15)
	rounds := envInt(b, "PGBENCH_ROUNDS", 4)
	jobs := envInt(b, "PGBENCH_JOBS", 2)
	modes := envList("PGBENCH_MODES", "simple prepared")
	var clientCounts []int
	for _, f := range envList("PGBENCH_CLIENTS", "8 32") {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			b.Fatalf("PGBENCH_CLIENTS: %q is not a positive integer", f)
		}
		clientCounts = append(clientCounts, n)
	}

	pg := testkit.Postgres(b)
	pg.Exec("ALTER SYSTEM SET max_connections = 200")
	pg.Restart()
	pgbench := pg.Bin("pgbench")
	if out, err := exec.Command(pgbench, "-i", "-q", "-s", "1", pg.DSN(testkit.PostgresSuperuser, "postgres")).CombinedOutput(); err != nil {
		b.Fatalf("pgbench -i: %v\n%s", err, out)
	}
	bouncer := testkit.PgBouncer(b, pg, "session")
	bouncerTx := testkit.PgBouncer(b, pg, "transaction")

	store := memstore.New(memstore.Options{})
	b.Cleanup(func() { store.Close() })
	high := func(name string) pgproxy.Scope {
		lim, err := floodgate.New(store, floodgate.Policy{Name: name, Limits: []floodgate.Limit{floodgate.PerSecond(100_000_000)}})
		if err != nil {
			b.Fatal(err)
		}
		return pgproxy.Scope{Limiter: lim}
	}
	// The limiters are on a memory store: Local lets the event loop decide
	// inline, as the daemon's memory engine does.
	limits := pgproxy.Limits{Global: high("bench-global"), PerUser: high("bench-user"), PerIP: high("bench-ip"), Local: true}
	conc, err := concurrency.New(concurrency.NewLocal(), concurrency.Options{Name: "bench", Limit: 10_000})
	if err != nil {
		b.Fatal(err)
	}
	withConc := limits
	withConc.ConcurrentQueries = conc
	proxyWith := func(upstream string, limits pgproxy.Limits, tc ...*tls.Config) string {
		cfg := pgproxy.Config{Upstream: upstream, Limits: limits}
		if len(tc) > 0 {
			cfg.TLS = tc[0]
		}
		p, err := pgproxy.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		go p.Serve(ln)
		b.Cleanup(func() { p.Close() })
		return ln.Addr().String()
	}
	proxyTo := func(upstream string) string { return proxyWith(upstream, limits) }
	_, cert := testCerts(b)
	withTLS := &tls.Config{Certificates: []tls.Certificate{cert}}
	self := os.Getpid()
	type target struct {
		name, addr string
		hops       []int // the processes whose CPU is the hop's
		prepared   bool  // runs -M prepared
		sslmode    string
	}
	targets := []target{
		{"direct", pg.Addr, nil, true, ""},
		{"floodgate", proxyTo(pg.Addr), []int{self}, true, ""},
		{"floodgate-tls", proxyWith(pg.Addr, limits, withTLS), []int{self}, true, "require"},
		{"floodgate+concurrency", proxyWith(pg.Addr, withConc), []int{self}, true, ""},
		{"pgbouncer", bouncer.Addr, []int{bouncer.Pid()}, true, ""},
		{"pgbouncer-tx", bouncerTx.Addr, []int{bouncerTx.Pid()}, false, ""},
		{"floodgate+pgbouncer-tx", proxyTo(bouncerTx.Addr), []int{self, bouncerTx.Pid()}, false, ""},
		{"relay", startRelay(b, pg.Addr), []int{self}, true, ""},
		{"epoll-relay", startEpollRelay(b, pg.Addr), []int{self}, true, ""},
		{"uring-relay", startUringRelay(b, pg.Addr), []int{self}, true, ""},
	}
	if only := envList("PGBENCH_TARGETS", ""); len(only) > 0 {
		targets = slices.DeleteFunc(targets, func(tg target) bool { return !slices.Contains(only, tg.name) })
	}
	type key struct {
		mode    string
		clients int
		target  string
	}
	tps := map[key][]float64{}      // one per round
	cpuPerTx := map[key][]float64{} // the hop's CPU, all its processes, µs per transaction
	tpsRe := regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)
	fmt.Printf("# %d CPUs, load %s at the start\n", runtime.NumCPU(), loadAvg())
	b.ResetTimer()
	for round := range rounds {
		for _, mode := range modes {
			for _, clients := range clientCounts {
				order := slices.Clone(targets)
				if round%2 == 1 {
					slices.Reverse(order)
				}
				for _, tg := range order {
					if mode == "prepared" && !tg.prepared {
						continue
					}
					host, port, _ := net.SplitHostPort(tg.addr)
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(dur+60)*time.Second)
					cmd := exec.CommandContext(ctx, pgbench, "-n", "-S", "-M", mode,
						"-c", strconv.Itoa(clients), "-j", strconv.Itoa(jobs), "-T", strconv.Itoa(dur),
						"-h", host, "-p", port, "-U", testkit.PostgresSuperuser, "postgres")
					if tg.sslmode != "" {
						cmd.Env = append(os.Environ(), "PGSSLMODE="+tg.sslmode)
					}
					load := loadAvg()
					cpu0 := hopCPU(b, tg.hops)
					out, err := cmd.CombinedOutput()
					cpu := hopCPU(b, tg.hops)
					cancel()
					if err != nil {
						b.Fatalf("pgbench -M %s -c %d through %s: %v\n%s", mode, clients, tg.name, err, out)
					}
					m := tpsRe.FindSubmatch(out)
					if m == nil || !strings.Contains(string(out), "number of failed transactions: 0") {
						b.Fatalf("pgbench -M %s -c %d through %s: no tps, or failures:\n%s", mode, clients, tg.name, out)
					}
					v, _ := strconv.ParseFloat(string(m[1]), 64)
					k := key{mode, clients, tg.name}
					tps[k] = append(tps[k], v)
					txs := parseTransactions(b, out)
					var per []string
					total := 0.0
					for i := range tg.hops {
						us := float64((cpu[i]-cpu0[i])/time.Microsecond) / txs
						total += us
						per = append(per, fmt.Sprintf("%.1f", us))
					}
					if len(tg.hops) > 0 {
						cpuPerTx[k] = append(cpuPerTx[k], total)
					}
					fmt.Printf("round %d  -M %-8s -c %-3d %-23s %8.0f tps  %-11s µs hop CPU/tx  load %s\n",
						round+1, mode, clients, tg.name, v, strings.Join(per, "+"), load)
				}
			}
		}
	}
	b.StopTimer()

	fmt.Printf("\npgbench -S -j %d -T %d, %d rounds, load %s at the end; median tps and hop CPU µs/transaction [range]:\n", jobs, dur, rounds, loadAvg())
	for _, mode := range modes {
		for _, clients := range clientCounts {
			fmt.Printf("\n-M %s -c %d\n", mode, clients)
			for _, tg := range targets {
				k := key{mode, clients, tg.name}
				if len(tps[k]) == 0 {
					continue
				}
				line := fmt.Sprintf("  %-23s %8.0f tps %-17s", tg.name, median(tps[k]), spread(tps[k], "%.0f"))
				if c := cpuPerTx[k]; len(c) > 0 {
					line += fmt.Sprintf(" %6.1f µs/tx %s", median(c), spread(c, "%.1f"))
				}
				fmt.Println(line)
			}
			fg, pb := key{mode, clients, "floodgate"}, key{mode, clients, "pgbouncer"}
			if len(tps[fg]) > 0 && len(tps[fg]) == len(tps[pb]) {
				tr := ratios(tps[fg], tps[pb])
				cr := ratios(cpuPerTx[fg], cpuPerTx[pb])
				fmt.Printf("  floodgate / pgbouncer: tps %.2f %s, CPU per transaction %.2f %s\n", median(tr), spread(tr, "%.2f"), median(cr), spread(cr, "%.2f"))
				b.ReportMetric(median(tr), fmt.Sprintf("%s-c%d-tps-floodgate/pgbouncer", mode, clients))
				b.ReportMetric(median(cr), fmt.Sprintf("%s-c%d-cpu-floodgate/pgbouncer", mode, clients))
			}
		}
	}
}

// ratios divides a by b round by round.
func ratios(a, b []float64) []float64 {
	var r []float64
	for i := range min(len(a), len(b)) {
		if b[i] > 0 {
			r = append(r, a[i]/b[i])
		}
	}
	return r
}

// spread renders the range of v.
func spread(v []float64, format string) string {
	if len(v) == 0 {
		return ""
	}
	return "[" + fmt.Sprintf(format, slices.Min(v)) + "–" + fmt.Sprintf(format, slices.Max(v)) + "]"
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

func envList(name, def string) []string {
	if v := os.Getenv(name); v != "" {
		return strings.Fields(v)
	}
	return strings.Fields(def)
}

// hopCPU returns the CPU time (user and system) used so far by each
// process: getrusage for this one (floodgate and the Go relays; its other
// goroutines are idle while pgbench runs), /proc/PID/stat for the others.
func hopCPU(b *testing.B, pids []int) []time.Duration {
	out := make([]time.Duration, len(pids))
	for i, pid := range pids {
		if pid == os.Getpid() {
			var ru syscall.Rusage
			if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
				b.Fatal(err)
			}
			out[i] = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			continue
		}
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			b.Fatal(err)
		}
		// Fields 14 and 15 (utime, stime, in clock ticks) follow the
		// command name, which is in parentheses.
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		out[i] = time.Duration(ut+st) * time.Second / clockTicks
	}
	return out
}

var txRe = regexp.MustCompile(`number of transactions actually processed: ([0-9]+)`)

func parseTransactions(b *testing.B, out []byte) float64 {
	m := txRe.FindSubmatch(out)
	if m == nil {
		b.Fatalf("pgbench printed no transaction count:\n%s", out)
	}
	n, _ := strconv.ParseFloat(string(m[1]), 64)
	return n
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat times: 100 on Linux
// for every architecture Go supports.
const clockTicks = 100

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// startRelay is the yardstick: a userspace TCP hop that only copies bytes,
// io.Copy in each direction.
func startRelay(b *testing.B, upstream string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	b.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				u, err := net.Dial("tcp", upstream)
				if err != nil {
					return
				}
				defer u.Close()
				done := make(chan struct{})
				go func() {
					io.Copy(u, c)
					u.(*net.TCPConn).CloseWrite()
					close(done)
				}()
				io.Copy(c, u)
				c.(*net.TCPConn).CloseWrite()
				<-done
			})
		}
	})
	return ln.Addr().String()
}

// BenchmarkPgbenchIdle is the many-clients row: pgbench -S with
// PGBENCH_IDLE_CLIENTS clients (500) that together run PGBENCH_IDLE_RATE
// transactions a second (500: one a second each, so that the clients are
// mostly idle), through pgbouncer in transaction mode, and through
// floodgate in front of it (the same limits as BenchmarkPgbench's, Local;
// the pooler keeps PostgreSQL at its pool of server connections). Half way
// through each run it reads the resident memory (VmRSS) of the hop's
// process and, for floodgate's (this one), the Go heap and stacks in use
// after a collection, and prints their growth since before the run per
// client connection. pgbouncer is measured in its own run, first (it keeps
// what it grew to); floodgate's in the second, where pgbouncer is behind
// it.
func BenchmarkPgbenchIdle(b *testing.B) {
	clients := envInt(b, "PGBENCH_IDLE_CLIENTS", 500)
	rate := envInt(b, "PGBENCH_IDLE_RATE", 500)
	dur := envInt(b, "PGBENCH_T", 10)
	pg := testkit.Postgres(b)
	pgbench := pg.Bin("pgbench")
	if out, err := exec.Command(pgbench, "-i", "-q", "-s", "1", pg.DSN(testkit.PostgresSuperuser, "postgres")).CombinedOutput(); err != nil {
		b.Fatalf("pgbench -i: %v\n%s", err, out)
	}
	bouncerTx := testkit.PgBouncer(b, pg, "transaction")
	store := memstore.New(memstore.Options{})
	b.Cleanup(func() { store.Close() })
	var limits pgproxy.Limits
	for i, s := range []*pgproxy.Scope{&limits.Global, &limits.PerUser, &limits.PerIP} {
		lim, err := floodgate.New(store, floodgate.Policy{Name: fmt.Sprintf("idle-%d", i), Limits: []floodgate.Limit{floodgate.PerSecond(100_000_000)}})
		if err != nil {
			b.Fatal(err)
		}
		s.Limiter = lim
	}
	limits.Local = true
	p, err := pgproxy.New(pgproxy.Config{Upstream: bouncerTx.Addr, Limits: limits})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go p.Serve(ln)
	b.Cleanup(func() { p.Close() })
	self := os.Getpid()
	targets := []struct {
		name, addr string
		hops       []int
	}{
		{"pgbouncer-tx", bouncerTx.Addr, []int{bouncerTx.Pid()}},
		{"floodgate+pgbouncer-tx", ln.Addr().String(), []int{self}},
	}
	goMem := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse + m.StackInuse
	}
	fmt.Printf("# %d CPUs, load %s at the start; pgbench -S -c %d -j 2 -R %d -T %d\n", runtime.NumCPU(), loadAvg(), clients, rate, dur)
	b.ResetTimer()
	for _, tg := range targets {
		host, port, _ := net.SplitHostPort(tg.addr)
		rss0 := make([]int64, len(tg.hops))
		for i, pid := range tg.hops {
			rss0[i] = vmRSS(b, pid)
		}
		go0 := goMem()
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(dur+120)*time.Second)
		cmd := exec.CommandContext(ctx, pgbench, "-n", "-S", "-c", strconv.Itoa(clients), "-j", "2", "-R", strconv.Itoa(rate),
			"-T", strconv.Itoa(dur), "-h", host, "-p", port, "-U", testkit.PostgresSuperuser, "postgres")
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		load := loadAvg()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		time.Sleep(time.Duration(dur) * time.Second / 2) // the clients are connected and running
		var per []string
		for i, pid := range tg.hops {
			per = append(per, fmt.Sprintf("%s %.1f KiB", hopName(pid, self), float64(vmRSS(b, pid)-rss0[i])/float64(clients)/1024))
		}
		goPer := (float64(goMem()) - float64(go0)) / float64(clients) / 1024
		err := cmd.Wait()
		cancel()
		if err != nil || !strings.Contains(out.String(), "number of failed transactions: 0") {
			b.Fatalf("pgbench through %s: %v\n%s", tg.name, err, out.String())
		}
		tx := parseTransactions(b, []byte(out.String()))
		line := fmt.Sprintf("-c %d %-23s %6.0f tx  resident per client: %s", clients, tg.name, tx, strings.Join(per, ", "))
		if slices.Contains(tg.hops, self) {
			line += fmt.Sprintf(" (Go heap and stacks %.1f KiB)", goPer)
		}
		fmt.Printf("%s  load %s\n", line, load)
	}
}

func hopName(pid, self int) string {
	if pid == self {
		return "floodgate"
	}
	return "pgbouncer"
}

// vmRSS is the resident memory of process pid in bytes.
func vmRSS(b *testing.B, pid int) int64 {
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	b.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}
