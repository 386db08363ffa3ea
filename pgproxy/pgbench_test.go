package pgproxy_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/pgproxy"
	"github.com/floodgate-go/floodgate/testkit"
)

// BenchmarkPgbench compares, side by side, pgbench -S (select-only) run
// directly against PostgreSQL, through floodgate's proxy (all three query
// scopes on, with limits too high to bite), through pgbouncer in session
// mode, and through a plain TCP relay (io.Copy each way), in each query
// mode. Runs are interleaved, round by round with the order rotated, so
// that noise from other processes spreads over all targets. It runs once,
// whatever b.N: bench/pgbench.sh runs it with -benchtime=1x.
//
// Environment: PGBENCH_T seconds per run (default 20), PGBENCH_ROUNDS
// (default 3), PGBENCH_MODES (default "prepared simple extended"),
// PGBENCH_CLIENTS (8), PGBENCH_JOBS (2), and PGBENCH_TARGETS (default all:
// "direct floodgate pgbouncer relay"), to profile one alone.
func BenchmarkPgbench(b *testing.B) {
	dur := envInt(b, "PGBENCH_T", 20)
	rounds := envInt(b, "PGBENCH_ROUNDS", 3)
	clients := envInt(b, "PGBENCH_CLIENTS", 8)
	jobs := envInt(b, "PGBENCH_JOBS", 2)
	modes := strings.Fields(os.Getenv("PGBENCH_MODES"))
	if len(modes) == 0 {
		modes = []string{"prepared", "simple", "extended"}
	}

	pg := testkit.Postgres(b)
	pg.Exec("ALTER SYSTEM SET max_connections = 200")
	pg.Restart()
	pgbench := pg.Bin("pgbench")
	if out, err := exec.Command(pgbench, "-i", "-q", "-s", "1", pg.DSN(testkit.PostgresSuperuser, "postgres")).CombinedOutput(); err != nil {
		b.Fatalf("pgbench -i: %v\n%s", err, out)
	}
	bouncer := testkit.PgBouncer(b, pg, "session")
	relay := startRelay(b, pg.Addr)

	store := memstore.New(memstore.Options{})
	b.Cleanup(func() { store.Close() })
	high := func(name string) pgproxy.Scope {
		lim, err := floodgate.New(store, floodgate.Policy{Name: name, Limits: []floodgate.Limit{floodgate.PerSecond(100_000_000)}})
		if err != nil {
			b.Fatal(err)
		}
		return pgproxy.Scope{Limiter: lim}
	}
	p, err := pgproxy.New(pgproxy.Config{Upstream: pg.Addr, Limits: pgproxy.Limits{
		Global: high("bench-global"), PerUser: high("bench-user"), PerIP: high("bench-ip"),
	}})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go p.Serve(ln)
	b.Cleanup(func() { p.Close() })

	targets := []struct{ name, addr string }{
		{"direct", pg.Addr},
		{"floodgate", ln.Addr().String()},
		{"pgbouncer", bouncer.Addr},
		{"relay", relay},
	}
	if only := strings.Fields(os.Getenv("PGBENCH_TARGETS")); len(only) > 0 {
		targets = slices.DeleteFunc(targets, func(tg struct{ name, addr string }) bool { return !slices.Contains(only, tg.name) })
	}
	tps := map[string][]float64{}      // mode/target → one per round
	cpuPerTx := map[string][]float64{} // the same, for the hop's CPU time
	tpsRe := regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)
	b.ResetTimer()
	for round := range rounds {
		for _, mode := range modes {
			for i := range targets {
				tg := targets[(i+round)%len(targets)]
				host, port, _ := net.SplitHostPort(tg.addr)
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(dur+60)*time.Second)
				cmd := exec.CommandContext(ctx, pgbench, "-n", "-S", "-M", mode,
					"-c", strconv.Itoa(clients), "-j", strconv.Itoa(jobs), "-T", strconv.Itoa(dur),
					"-h", host, "-p", port, "-U", testkit.PostgresSuperuser, "postgres")
				cpu0 := proxyCPU(b, tg.name, bouncer.Pid())
				out, err := cmd.CombinedOutput()
				cpu := proxyCPU(b, tg.name, bouncer.Pid()) - cpu0
				cancel()
				if err != nil {
					b.Fatalf("pgbench -M %s through %s: %v\n%s", mode, tg.name, err, out)
				}
				m := tpsRe.FindSubmatch(out)
				if m == nil || !strings.Contains(string(out), "number of failed transactions: 0") {
					b.Fatalf("pgbench -M %s through %s: no tps, or failures:\n%s", mode, tg.name, out)
				}
				v, _ := strconv.ParseFloat(string(m[1]), 64)
				key := mode + "/" + tg.name
				tps[key] = append(tps[key], v)
				txs := parseTransactions(b, out)
				usPerTx := float64(cpu/time.Microsecond) / txs
				if tg.name != "direct" {
					cpuPerTx[key] = append(cpuPerTx[key], usPerTx)
				}
				fmt.Printf("round %d  -M %-8s %-10s %10.0f tps  %6.1f µs proxy CPU per transaction\n", round+1, mode, tg.name, v, usPerTx)
			}
		}
	}
	b.StopTimer()

	fmt.Printf("\npgbench -S -c %d -j %d -T %d, %d rounds, median tps:\n", clients, jobs, dur, rounds)
	fmt.Printf("%-9s %10s %10s %10s %10s   %-18s %-18s %-18s\n", "mode", "direct", "floodgate", "pgbouncer", "relay", "floodgate/pgbouncer", "floodgate/relay", "relay/direct")
	for _, mode := range modes {
		med := func(t string) float64 { return median(tps[mode+"/"+t]) }
		fg, pb, rl, dr := med("floodgate"), med("pgbouncer"), med("relay"), med("direct")
		fmt.Printf("%-9s %10.0f %10.0f %10.0f %10.0f   %-18.2f %-18.2f %-18.2f\n", mode, dr, fg, pb, rl, fg/pb, fg/rl, rl/dr)
		cfg, cpb, crl := median(cpuPerTx[mode+"/floodgate"]), median(cpuPerTx[mode+"/pgbouncer"]), median(cpuPerTx[mode+"/relay"])
		fmt.Printf("%-9s %10s %10.1f %10.1f %10.1f   µs of the hop's CPU per transaction\n", "", "", cfg, cpb, crl)
		b.ReportMetric(fg/pb, mode+"-floodgate/pgbouncer")
		b.ReportMetric(fg/rl, mode+"-floodgate/relay")
	}
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

// proxyCPU returns the CPU time (user and system) used so far by the hop
// of target: this process for floodgate and the relay, pgbouncer's process
// for pgbouncer, nothing for direct. Other goroutines of this process are
// idle while pgbench runs.
func proxyCPU(b *testing.B, target string, bouncerPid int) time.Duration {
	switch target {
	case "floodgate", "relay":
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	case "pgbouncer":
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(bouncerPid) + "/stat")
		if err != nil {
			b.Fatal(err)
		}
		// Fields 14 and 15 (utime, stime, in clock ticks) follow the
		// command name, which is in parentheses.
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		return time.Duration(ut+st) * time.Second / clockTicks
	}
	return 0
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
