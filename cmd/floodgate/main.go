// Command floodgate is the rate-limiting daemon and its tools.
//
//	floodgate serve [-config FILE]     run the daemon (no file: the built-in defaults)
//	floodgate validate FILE            check a configuration file, print every error
//	floodgate check -policy P -key K   ask a running daemon's check API
//	floodgate key show|reset -policy P -key K   inspect or forgive a key
//	floodgate version                  print the version
//
// See docs/daemon.md.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/daemon"
)

const usage = `usage:
  floodgate serve [-config FILE]     run the daemon (without -config: built-in defaults)
  floodgate validate FILE            check a configuration file and print every error
  floodgate check -policy P -key K [-cost N] [-addr URL] [-token T]
                                     ask a running daemon's check API (exit 0 allowed, 1 denied)
  floodgate key show|reset -policy P -key K [-addr URL] [-token T]
                                     inspect a key without charging it, or reset (forgive) it
  floodgate version                  print the version
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stderr)
	case "validate":
		return validate(args[1:], stdout, stderr)
	case "check":
		return check(args[1:], stdout, stderr)
	case "key":
		return key(args[1:], stdout, stderr)
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, "floodgate", version())
		return 0
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "floodgate: unknown command %q\n%s", args[0], usage)
	return 2
}

func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " " + s.Value[:12]
		}
	}
	return v + " " + bi.GoVersion
}

func serve(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "configuration `file` (watched and reloaded on change and on SIGHUP); empty: built-in defaults")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var cfg *config.Config
	var reload func()
	var d *daemon.Daemon
	if *path == "" {
		cfg = config.Default()
	} else {
		// The watcher's first load must succeed; later loads call back.
		w, err := daemon.Watch(ctx, *path, func(c *config.Config, err error) {
			if d == nil {
				return
			}
			if err != nil {
				d.ReloadFailed(err)
				return
			}
			_ = d.Apply(c)
		})
		if err != nil {
			fmt.Fprintf(stderr, "floodgate: %v\n", err)
			return 1
		}
		cfg, reload = w.Config(), w.Reload
	}
	d, err := daemon.New(cfg, daemon.Options{})
	if err != nil {
		fmt.Fprintf(stderr, "floodgate: %v\n", err)
		return 1
	}
	if err := d.Start(); err != nil {
		fmt.Fprintf(stderr, "floodgate: %v\n", err)
		return 1
	}
	banner(stderr, d, *path)

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-hup:
			if reload != nil {
				reload()
			}
		case err := <-d.Failed():
			fmt.Fprintf(stderr, "floodgate: %v; shutting down\n", err)
			sctx, cancel := context.WithTimeout(context.Background(), d.Config().ShutdownTimeout.D())
			defer cancel()
			d.Shutdown(sctx)
			return 1
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), d.Config().ShutdownTimeout.D()+5*time.Second)
			defer cancel()
			if err := d.Shutdown(sctx); err != nil {
				fmt.Fprintf(stderr, "floodgate: shutdown: %v\n", err)
				return 1
			}
			return 0
		}
	}
}

// banner says what is listening and how to try it.
func banner(w io.Writer, d *daemon.Daemon, path string) {
	cfg := d.Config()
	a := d.Addrs()
	src := "built-in defaults (floodgate serve -config FILE to use yours)"
	if path != "" {
		src = path
	}
	fmt.Fprintf(w, "floodgate %s\nconfiguration: %s\n", version(), src)
	fmt.Fprintf(w, "storage:       %s\n", cfg.Storage.Engine)
	local := func(addr net.Addr) string {
		host, port, err := net.SplitHostPort(addr.String())
		if err != nil {
			return addr.String()
		}
		if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
			host = "localhost"
		}
		return net.JoinHostPort(host, port)
	}
	if a.Proxy != nil {
		up := cfg.Proxy.Upstream
		if up == "demo" {
			up = "the built-in demo upstream"
		}
		fmt.Fprintf(w, "proxy:         http://%s -> %s\n", local(a.Proxy), up)
	}
	if a.Check != nil {
		fmt.Fprintf(w, "check API:     http://%s/v1/check\n", local(a.Check))
	}
	if a.Envoy != nil {
		fmt.Fprintf(w, "envoy RLS:     grpc %s\n", local(a.Envoy))
	}
	if pa := a.Postgres; pa != nil {
		fmt.Fprintf(w, "postgres:      %s -> %s\n", local(pa), cfg.Postgres.Upstream)
	}
	if a.Admin != nil {
		fmt.Fprintf(w, "admin:         http://%s (the status page; /metrics /healthz /readyz /v1/config /v1/keys)\n", local(a.Admin))
	}
	if a.Proxy != nil {
		fmt.Fprintf(w, "try:           for i in $(seq 7); do curl -si http://%s/ | head -1; done\n", local(a.Proxy))
	}
}

func validate(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprint(stderr, "usage: floodgate validate FILE\n")
		return 2
	}
	n, err := checkFile(args[0])
	if err != nil {
		var errs config.Errors
		if errors.As(err, &errs) {
			for _, e := range errs {
				fmt.Fprintln(stderr, e)
			}
			fmt.Fprintf(stderr, "%s: %d error(s)\n", args[0], len(errs))
		} else {
			fmt.Fprintf(stderr, "%s: %v\n", args[0], err)
		}
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok (%d policies, those of postgres and envoy rules included)\n", args[0], n)
	return 0
}

// checkFile runs what serve runs on the file at path, short of binding the
// listeners: the configuration is loaded and the daemon built (engine,
// limiters, routes, front ends, TLS files) and released again. A file it
// passes is one serve starts with; every error serve could give before
// listening, it gives. It returns the number of policies built.
func checkFile(path string) (int, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return 0, err
	}
	d, err := daemon.New(cfg, daemon.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return 0, err
	}
	defer d.Close()
	return d.Policies(), nil
}

// errUsage marks a request that could not even be made (a malformed
// -addr): a usage error, not an unreachable daemon.
var errUsage = errors.New("usage")

// callDaemon makes one request to a running daemon, with its token when
// given, and returns the response with its body (at most 1 MiB).
func callDaemon(method, url string, body []byte, token string) (*http.Response, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp, b, err
}

func check(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	policy := fs.String("policy", "", "policy `name`")
	key := fs.String("key", "", "the `key` to decide for, e.g. user:42")
	cost := fs.Int64("cost", 1, "units to charge; 0 peeks without charging")
	addr := fs.String("addr", "http://"+config.DefaultCheckListen, "the daemon's check API `URL`")
	token := fs.String("token", os.Getenv("FLOODGATE_CHECK_TOKEN"), "the check API's `token` (check.token), default $FLOODGATE_CHECK_TOKEN")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *policy == "" {
		fmt.Fprint(stderr, "floodgate check: -policy is required\n")
		return 2
	}
	reqBody, _ := json.Marshal(map[string]any{"policy": *policy, "key": *key, "cost": *cost})
	url := strings.TrimSuffix(*addr, "/") + "/v1/check"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(reqBody))
	if err != nil {
		fmt.Fprintf(stderr, "floodgate check: %v\n", err)
		return 2
	}
	req.Header.Set("Content-Type", "application/json")
	if *token != "" {
		req.Header.Set("Authorization", "Bearer "+*token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "floodgate check: %v (is the daemon's check listener on %s?)\n", err, *addr)
		return 2
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var pretty bytes.Buffer
	if json.Indent(&pretty, b, "", "  ") == nil {
		b = pretty.Bytes()
	}
	fmt.Fprintf(stdout, "%s\n%s\n", resp.Status, bytes.TrimSpace(b))
	switch resp.StatusCode {
	case http.StatusOK:
		return 0
	case http.StatusTooManyRequests:
		return 1
	}
	return 2
}
