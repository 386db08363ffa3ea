// Command floodgate is the rate-limiting daemon and its tools: serve,
// validate, check, key, explain, replay, health, version, completion and
// help. The commands, their help (floodgate COMMAND -h) and the shell
// completion scripts come from one table, commandTable in commands.go.
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
	"regexp"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/daemon"
	"github.com/floodgate-go/floodgate/internal/buildinfo"
	"github.com/floodgate-go/floodgate/internal/sdnotify"
	_ "github.com/floodgate-go/floodgate/internal/sighup" // before the other packages initialise
	"github.com/floodgate-go/floodgate/internal/yamlpos"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText())
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		return helpCmd(nil, stdout, stderr)
	case "-version", "--version":
		args[0] = "version"
	}
	c := lookup(args[0])
	if c == nil {
		fmt.Fprintf(stderr, "floodgate: unknown command %q\n%s", args[0], usageText())
		return 2
	}
	if wantsHelp(args[1:]) {
		c.writeHelp(stdout)
		return 0
	}
	return c.run(args[1:], stdout, stderr)
}

// versionCmd prints what buildinfo reads from the binary: one field a
// line for people, or one JSON object (-json) for machines.
func versionCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("version", stderr)
	asJSON := fs.Bool("json", false, "print one JSON object: version, revision, modified, time, go, platform")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "floodgate version: unexpected arguments %q; usage: floodgate version [-json]\n", fs.Args())
		return 2
	}
	i := buildinfo.Read()
	if *asJSON {
		b, _ := json.Marshal(i)
		fmt.Fprintf(stdout, "%s\n", b)
		return 0
	}
	rev := i.ShortRevision()
	if i.Modified {
		rev += " (modified: built with uncommitted changes)"
	}
	// The first line is the banner's (and what this command printed
	// alone before): scripts read the version after "floodgate ".
	fmt.Fprintf(stdout, "floodgate %s\nrevision:  %s\ncommitted: %s\ngo:        %s %s\n", i, rev, i.Time, i.GoVersion, i.Platform)
	return 0
}

func serve(args []string, stderr io.Writer) int {
	// Signals are taken before anything else: a SIGHUP or SIGTERM that
	// arrives while the daemon starts is handled, never the default action
	// (which would kill the process).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	fs := newFlagSet("serve", stderr)
	path := fs.String("config", "", "configuration `file` (watched and reloaded on change and on SIGHUP); empty: built-in defaults")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	switch rest := fs.Args(); {
	case len(rest) == 1 && *path == "":
		*path = rest[0] // floodgate serve FILE, as floodgate validate FILE
	case len(rest) > 0:
		fmt.Fprintf(stderr, "floodgate serve: unexpected arguments %q; usage: floodgate serve [-config] [FILE]\n", rest)
		return 2
	}

	var cfg *config.Config
	var reload func()
	var d atomic.Pointer[daemon.Daemon]
	// reloading is set from a SIGHUP until the reload it asked for has
	// called back, when systemd is told the daemon is ready again. (A
	// change of the file being applied as the SIGHUP comes calls back
	// first, and ends the reloading state a little early.)
	var reloading atomic.Bool
	if *path == "" {
		cfg = config.Default()
	} else {
		// The watcher's first load must succeed; later loads call back.
		w, err := daemon.Watch(ctx, *path, func(c *config.Config, err error) {
			dm := d.Load()
			switch {
			case dm == nil:
			case err != nil:
				dm.ReloadFailed(err)
			case c == nil:
				dm.Logger().Info("configuration unchanged", "file", *path)
			default:
				_ = dm.Apply(c)
				releaseLoad()
			}
			if dm != nil && reloading.Swap(false) {
				notify(dm.Logger(), sdnotify.Ready)
			}
		})
		if err != nil {
			fmt.Fprintf(stderr, "floodgate: %v\n", err)
			return 1
		}
		cfg, reload = w.Config(), w.Reload
	}
	dm, err := daemon.New(cfg, daemon.Options{LogOutput: stderr})
	if err != nil {
		fmt.Fprintf(stderr, "floodgate: %v\n", err)
		return 1
	}
	d.Store(dm)
	releaseLoad()
	if err := dm.Start(); err != nil {
		dm.Close()
		fmt.Fprintf(stderr, "floodgate: %v\n", err)
		return 1
	}
	log := dm.Logger()
	banner(stderr, dm, *path)
	// Every listener is bound (and accepts into its backlog): a unit of
	// Type=notify is started now.
	notify(log, sdnotify.Ready)
	if *path == "" {
		log.Warn("running on the built-in defaults: memory engine, the demo upstream, the proxy on every interface; give a configuration file to serve yours",
			"usage", "floodgate serve FILE")
	}

	// drain shuts down within the configured time: shutdown_delay with
	// readiness off and the listeners still serving, then
	// shutdown_timeout for what is in flight.
	drain := func() error {
		c := dm.Config()
		sctx, cancel := context.WithTimeout(context.Background(), c.ShutdownDelay.D()+c.ShutdownTimeout.D())
		defer cancel()
		return dm.Shutdown(sctx)
	}
	for {
		select {
		case <-hup:
			if reload == nil {
				log.Info("SIGHUP: running on the built-in defaults, nothing to reload")
				notify(log, sdnotify.Reloading())
				notify(log, sdnotify.Ready)
				continue
			}
			log.Info("SIGHUP: reading the configuration again", "file", *path)
			reloading.Store(true)
			notify(log, sdnotify.Reloading())
			reload()
		case err := <-dm.Failed():
			log.Error("a listener failed; shutting down", "error", err)
			notify(log, sdnotify.Stopping)
			drain()
			return 1
		case <-ctx.Done():
			notify(log, sdnotify.Stopping)
			c := dm.Config()
			log.Info("stopping: readiness off, draining the listeners", "delay", c.ShutdownDelay.D(), "timeout", c.ShutdownTimeout.D())
			if err := drain(); err != nil {
				log.Warn("shutdown: requests still in flight were cut off", "error", err)
			} else {
				log.Info("stopped")
			}
			return 0
		}
	}
}

// notify tells the service manager that started the daemon (systemd, for
// a unit of Type=notify) its state; without one it does nothing. A failure
// is logged: the daemon serves on, and systemd, which waits for READY=1,
// gives up on the unit after its start timeout.
func notify(log *slog.Logger, state string) {
	if _, err := sdnotify.Notify(state); err != nil {
		log.Warn("could not tell the service manager", "state", strings.ReplaceAll(state, "\n", " "), "error", err)
	}
}

// banner says what is listening and how to try it.
func banner(w io.Writer, d *daemon.Daemon, path string) {
	cfg := d.Config()
	a := d.Addrs()
	src := "built-in defaults (floodgate serve FILE to use yours)"
	if path != "" {
		src = path
	}
	fmt.Fprintf(w, "floodgate %s\nconfiguration: %s\n", buildinfo.Read(), src)
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
		fmt.Fprintf(w, "admin:         http://%s (the status page; /metrics /healthz /readyz /v1/config /v1/keys /v1/overrides /v1/explain)\n", local(a.Admin))
	}
	if a.Proxy != nil {
		if try := tryLine(cfg, local(a.Proxy)); try != "" {
			fmt.Fprintf(w, "try:           %s\n", try)
		}
	}
}

// tryLine is a command that shows the first limited route's limit: enough
// requests to it to reach a 429 (two more than the smallest capacity among
// its limits), or "" when no route refuses (none has limits, or only
// shadow routes do, which never refuse).
func tryLine(cfg *config.Config, addr string) string {
	policies, err := cfg.FloodgatePolicies()
	if err != nil || cfg.Proxy == nil {
		return ""
	}
	for _, r := range cfg.Proxy.Routes {
		if len(r.Limits) == 0 || r.Shadow {
			continue
		}
		n := int64(-1)
		for _, rl := range r.Limits {
			for _, l := range policies[rl.Policy].Limits {
				if c := l.Capacity(); n < 0 || c < n {
					n = c
				}
			}
		}
		if n < 0 {
			n = 10
		}
		m := r.Match
		path := "/"
		switch {
		case m.Path != "":
			path = strings.NewReplacer("{$}", "", "...}", "}").Replace(m.Path)
			path = regexp.MustCompile(`\{[^}]*\}`).ReplaceAllString(path, "1")
		case len(m.PathPrefix) > 0:
			path = m.PathPrefix[0]
		}
		opts := ""
		if len(m.Methods) > 0 && m.Methods[0] != http.MethodGet {
			opts += " -X " + m.Methods[0]
		}
		if m.Host != "" {
			opts += " -H 'Host: " + strings.Replace(m.Host, "*.", "www.", 1) + "'"
		}
		return fmt.Sprintf("for i in $(seq %d); do curl -si%s http://%s%s | head -1; done   # route %q", n+2, opts, addr, path, r.Name)
	}
	return ""
}

func validate(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("validate", stderr)
	path := fs.String("config", "", "the configuration `file` to check (or give it as the argument; - reads it from standard input)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	switch rest := fs.Args(); {
	case len(rest) == 1 && *path == "":
		*path = rest[0]
	case len(rest) > 0 || *path == "":
		fs.Usage()
		return 2
	}
	name := *path
	var n int
	var warnings []string
	var err error
	if name == "-" {
		name = "(stdin)"
		var data []byte
		if data, err = yamlpos.ReadAll(os.Stdin); err == nil {
			n, warnings, err = checkConfig(config.Parse(name, data))
		}
	} else {
		n, warnings, err = checkFile(name)
	}
	for _, w := range warnings {
		fmt.Fprintf(stderr, "%s: warning: %s\n", name, w)
	}
	if err != nil {
		var errs config.Errors
		if errors.As(err, &errs) {
			for _, e := range errs {
				fmt.Fprintln(stderr, e)
			}
			fmt.Fprintf(stderr, "%s: %d error(s)\n", name, len(errs))
		} else {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
		}
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok (%d policies, those of postgres and envoy rules included)\n", name, n)
	return 0
}

// releaseLoad gives the memory of a configuration's loading back to the
// system. Decoding a large file (an Envoy file of thousands of
// descriptors) takes several times the memory of what is built from it;
// without this, a daemon that then sits idle keeps that peak until the
// runtime's next forced collection, minutes later, and a memory-limited
// container counts it all along.
func releaseLoad() { debug.FreeOSMemory() }

// checkFile runs what serve runs on the file at path, short of binding the
// listeners: the configuration is loaded and the daemon built (engine,
// limiters, routes, front ends, TLS files) and released again. A file it
// passes is one serve starts with; every error serve could give before
// listening, it gives. It returns the number of policies built, and the
// daemon's warnings (daemon.Daemon.Warnings: a Redis that cannot be
// reached), which do not fail the file.
func checkFile(path string) (int, []string, error) { return checkConfig(config.Load(path)) }

// checkConfig builds the daemon of a loaded configuration and releases it.
func checkConfig(cfg *config.Config, err error) (int, []string, error) {
	if err != nil {
		return 0, nil, err
	}
	d, err := daemon.New(cfg, daemon.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return 0, nil, err
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return d.Policies(), d.Warnings(ctx), nil
}

// errUsage marks a request that could not even be made (a malformed
// -addr): a usage error, not an unreachable daemon.
var errUsage = errors.New("usage")

// adminFlags defines -addr and -token for a command that talks to the
// admin listener: by default the listener's default address and the token
// in $FLOODGATE_ADMIN_TOKEN.
func adminFlags(fs *flag.FlagSet) (addr, token *string) {
	return adminAddrFlag(fs), fs.String("token", os.Getenv("FLOODGATE_ADMIN_TOKEN"), "the admin `token` (default $FLOODGATE_ADMIN_TOKEN)")
}

// adminAddrFlag defines -addr, the admin listener's URL.
func adminAddrFlag(fs *flag.FlagSet) *string {
	return fs.String("addr", "http://"+config.DefaultAdminListen, "the daemon's admin listener `URL`")
}

// answerError is the message of an error answer from the daemon: the
// "error" of its JSON body, or the body itself.
func answerError(b []byte) string {
	var e struct{ Error string }
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		return e.Error
	}
	return string(bytes.TrimSpace(b))
}

// callDaemon makes one request to a running daemon, with its token when
// given, and returns the response with its body (at most 1 MiB), giving up
// after 10 seconds.
func callDaemon(method, url string, body []byte, token string) (*http.Response, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return callDaemonContext(ctx, method, url, body, token)
}

// callDaemonContext is callDaemon within ctx.
func callDaemonContext(ctx context.Context, method, url string, body []byte, token string) (*http.Response, []byte, error) {
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
	fs := newFlagSet("check", stderr)
	policy := fs.String("policy", "", "policy `name`")
	key := fs.String("key", "", "the `key` to decide for, e.g. user:42")
	cost := fs.Int64("cost", 1, "units to charge; 0 peeks without charging")
	addr := fs.String("addr", "http://"+config.DefaultCheckListen, "the daemon's check API `URL`")
	token := fs.String("token", os.Getenv("FLOODGATE_CHECK_TOKEN"), "the check API's `token` (check.token), default $FLOODGATE_CHECK_TOKEN")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *policy == "" || *key == "" {
		fmt.Fprint(stderr, "floodgate check: -policy and -key are required, e.g. floodgate check -policy api -key user:42\n")
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
