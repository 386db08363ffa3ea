package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// health is `floodgate health`: the admin listener's /healthz or /readyz
// for a container image, which has no shell and no curl to ask with.
func health(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("health", stderr)
	addr := adminAddrFlag(fs)
	ready := fs.Bool("ready", false, "probe /readyz (ready for traffic) instead of /healthz (alive)")
	timeout := fs.Duration("timeout", 2*time.Second, "give up after `D` without an answer")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 1
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "floodgate health: unexpected arguments %q\n", fs.Args())
		fs.Usage()
		return 1
	}
	if *timeout <= 0 {
		fmt.Fprintf(stderr, "floodgate health: -timeout %s: want a positive duration\n", *timeout)
		return 1
	}
	probe := "/healthz"
	if *ready {
		probe = "/readyz"
	}
	u := strings.TrimSuffix(*addr, "/") + probe
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	resp, b, err := callDaemonContext(ctx, http.MethodGet, u, nil, "")
	switch {
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "floodgate health: -addr %q: %v\n", *addr, err)
		return 1
	case ctx.Err() != nil:
		fmt.Fprintf(stderr, "floodgate health: %s: no answer within %s\n", u, *timeout)
		return 1
	case err != nil:
		fmt.Fprintf(stderr, "floodgate health: %v (is the daemon's admin listener on %s?)\n", err, *addr)
		return 1
	}
	// The body is the probe's one-line reason ("ok", "ready", "not ready:
	// redis …"), cut short in case something else answers.
	msg := string(bytes.TrimSpace(b))
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i] + " …"
	}
	if len(msg) > 200 {
		msg = strings.ToValidUTF8(msg[:200], "") + " …"
	}
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "floodgate health: %s: %s: %s\n", u, resp.Status, msg)
		return 1
	}
	fmt.Fprintf(stdout, "%s: %s\n", u, msg)
	return 0
}
