package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// A command is one of floodgate's subcommands. The table of them
// (commandTable) is the one place that documents them: the top-level
// usage, each command's help (floodgate CMD -h) and the shell completion
// scripts (floodgate completion) are made from it, and the flags from the
// flag set the command itself defines (see flagsOf).
type command struct {
	name     string
	verbs    []string // words the command takes first (key: show, reset)
	synopsis []string // the usage lines, each after "floodgate "
	summary  string   // one line, for the command list
	desc     string   // the DESCRIPTION section, paragraphs of text
	examples []string // the EXAMPLES section: a command line, then "# what it does" on the next
	exit     string   // the EXIT STATUS section
	files    bool     // its arguments are files (completion offers them)
	run      func(args []string, stdout, stderr io.Writer) int
}

// commandTable is every command, in the order the usage lists them. It is
// a function, not a variable: the commands' flag sets read it for their
// help, which a variable's initialisation could not refer to.
func commandTable() []*command {
	return []*command{
		{
			name:     "serve",
			synopsis: []string{"serve [-config] [FILE]"},
			summary:  "run the daemon (without a file: the built-in defaults)",
			desc: `Runs the daemon on the configuration FILE: the listeners it configures
(the rate-limiting reverse proxy, the check API, Envoy's rate limit
service, the PostgreSQL proxy, the admin listener) and the storage engine.
The file is watched and applied again when it changes, and on SIGHUP; a
file that does not validate is refused and the daemon serves on with the
one in service. Without a file it runs on the built-in defaults: the
memory engine and a demo upstream, to try it with. SIGTERM or SIGINT
drains the listeners (shutdown_delay, then shutdown_timeout) and stops.
Under systemd with Type=notify it reports READY=1, RELOADING=1 and
STOPPING=1. See docs/daemon.md.`,
			examples: []string{
				"floodgate serve",
				"# the built-in defaults: try curl -i localhost:8080/",
				"floodgate serve /etc/floodgate/floodgate.yaml",
				"# your configuration, reloaded when it changes",
			},
			exit:  "0 after a clean shutdown, 1 when the configuration or a listener fails, 2 for a usage error.",
			files: true,
			run: func(args []string, _, stderr io.Writer) int {
				return serve(args, stderr)
			},
		},
		{
			name:     "validate",
			synopsis: []string{"validate [-config] FILE | -"},
			summary:  "check a configuration file (- reads standard input) and print every error",
			desc: `Builds everything serve would from the file, short of listening (the
engine, the limiters, routes, front ends and TLS files), and prints every
error as file:line:column: field: message. A file it passes is one serve
starts with. A Redis that cannot be reached is a warning, not an error.`,
			examples: []string{
				"floodgate validate floodgate.yaml",
				"# check a file before deploying it",
				"kubectl get cm floodgate -o jsonpath='{.data.floodgate\\.yaml}' | floodgate validate -",
				"# check what standard input holds",
			},
			exit:  "0 valid, 1 invalid, 2 for a usage error.",
			files: true,
			run:   validate,
		},
		{
			name:     "check",
			synopsis: []string{"check -policy P -key K [-cost N] [-addr URL] [-token T]"},
			summary:  "ask a running daemon's check API for a decision",
			desc: `Asks a running daemon's check API (POST /v1/check) to decide -cost units
for -key under -policy, and prints the answer: the status, then the JSON
body with the remaining units and when to retry. -cost 0 peeks without
charging.`,
			examples: []string{
				"floodgate check -policy api -key user:42",
				"# charge one unit to user:42 under the policy api",
				"floodgate check -policy api -key user:42 -cost 0",
				"# see where user:42 stands without charging it",
			},
			exit: "0 allowed, 1 denied, 2 for a usage error or a daemon that cannot be reached.",
			run:  check,
		},
		{
			name:  "key",
			verbs: []string{"show", "reset"},
			synopsis: []string{
				"key show|reset -policy P -key K [-any-shape] [-addr URL] [-token T]",
				"key show REQUEST (as floodgate explain describes it: -http, -pg-user or -envoy-domain)",
			},
			summary: "inspect a key without charging it, or reset (forgive) it",
			desc: `Reads a key's state under a policy from a running daemon's admin listener
(/v1/keys) without charging it, or resets it (forgives it: the key meets
full capacity again). key show also takes a request as floodgate explain
describes it and shows the state of every key that request is checked
against; the request flags (-http, -host, -H, -peer, -pg-user,
-envoy-domain, -descriptor, -hits) are show's only.`,
			examples: []string{
				"floodgate key show -policy api -key user:42",
				"# the state of user:42 under api",
				"floodgate key reset -policy login -key ip:203.0.113.7",
				"# forgive an address its failed logins",
				"floodgate key show -http 'GET /api/orders' -H 'X-API-Key: k1'",
				"# the keys that request is checked against, and their state",
			},
			exit: "0 on an answer, 1 when the daemon refuses or cannot be reached, 2 for a usage error.",
			run:  key,
		},
		{
			name:  "override",
			verbs: []string{"set", "delete", "list"},
			synopsis: []string{
				"override set -policy P (-key K | -tier T) (-rate R [-burst N] [-algorithm A] | -multiplier M) -ttl D [-by WHO] [-reason TEXT] [-addr URL] [-token T]",
				"override delete -policy P (-key K | -tier T) [-addr URL] [-token T]",
				"override list [-policy P] [-addr URL] [-token T]",
			},
			summary: "change a key's or a tier's limits at runtime, for a time, without a reload",
			desc: `Sets, deletes or lists runtime overrides through a running daemon's admin
listener (/v1/overrides): limits of their own (-rate) or a multiple of the
limits it would get otherwise (-multiplier) for one key or every key of a
tier, until -ttl has passed. With the redis and hybrid engines the override
is kept in Redis and every instance on it applies it within a second; with
the memory engine it is this daemon's. It survives reloads; a runtime
override of a key wins over the file's override of the key, which wins over
a runtime override of its tier. Every change is logged with -by and
-reason; the status page, floodgate key show and floodgate explain show
the override that applies. See docs/overrides.md.`,
			examples: []string{
				"floodgate override set -policy api -key user:42 -rate 500/s -ttl 2h -reason 'INC-4411 batch import'",
				"# raise one customer's limit for two hours",
				"floodgate override set -policy api -tier free -multiplier 0.5 -ttl 30m",
				"# halve every free-tier key's limits during an incident",
				"floodgate override list",
				"floodgate override delete -policy api -key user:42",
			},
			exit: "0 on success, 1 when the daemon refuses or cannot be reached, 2 for a usage error.",
			run:  override,
		},
		{
			name: "explain",
			synopsis: []string{
				"explain [-addr URL] [-token T] [-json] -http 'METHOD /path?query' [-host HOST] [-H 'Name: value']... [-peer ADDRESS]",
				"explain [-addr URL] [-token T] [-json] -pg-user USER [-peer ADDRESS]",
				"explain [-addr URL] [-token T] [-json] -envoy-domain DOMAIN -descriptor 'k=v,k2=v2'... [-hits N]",
			},
			summary: "what the running daemon would do with a request, charging nothing",
			desc: `Shows which route or rule the request meets and why the others do not, the
exact keys, the limits and overrides that apply and each key's state, read
from the running daemon (the admin listener's /v1/explain) without
charging anything.`,
			examples: []string{
				"floodgate explain -http 'POST /login' -peer 203.0.113.7",
				"# the route a login from that address meets, and its keys",
				"floodgate explain -envoy-domain edge -descriptor 'remote_address=10.0.0.1'",
				"# the rule an Envoy call meets",
			},
			exit: "0 on an explanation, 1 when the daemon refuses or cannot be reached, 2 for a usage error.",
			run:  explain,
		},
		{
			name:     "replay",
			synopsis: []string{"replay -config CANDIDATE [-against CURRENT | -against none] [flags] LOG | -"},
			summary:  "decide an access log's requests with a configuration file, on the log's clock, and report",
			desc: `Runs the requests of an access log through the candidate configuration as
floodgate serve would decide them (its routes, key functions, policies,
overrides and tiers, on a memory engine whose clock is the log's own
timestamps) and reports per route and per policy how many would be allowed
and denied, and what changes against CURRENT: the counts' difference and the
keys whose requests flip. Nothing is forwarded and no listener is opened.

CURRENT defaults to what floodgate serve runs without a file (the built-in
defaults); give the file in service. LOG is JSON lines, nginx's combined
format or Envoy's default format (-format; detected by default), gzip when
it ends in .gz, or - for standard input. Lines that are not requests are
counted and quoted in the report, never fatal. See docs/replay.md.`,
			examples: []string{
				"floodgate replay -config new.yaml -against floodgate.yaml access.log.gz",
				"# what the new file would change over yesterday's traffic",
				"floodgate replay -config new.yaml -against none -json access.log",
				"# the new file's decisions alone, as JSON",
			},
			exit:  "0 after a report, 1 when a configuration or the log cannot be read, 2 for a usage error.",
			files: true,
			run:   replayCmd,
		},
		{
			name:     "health",
			synopsis: []string{"health [-addr URL] [-ready] [-timeout D]"},
			summary:  "probe a running daemon's admin listener: /healthz, or /readyz with -ready",
			desc: `Asks a running daemon's admin listener whether it is alive (/healthz) or,
with -ready, ready for traffic (/readyz), and prints one line saying so or
why not. The probes need no token. It is the container image's
healthcheck, which has no shell and no curl to ask with.`,
			examples: []string{
				"floodgate health",
				"# is the daemon on the default admin address alive?",
				"floodgate health -ready -addr http://10.0.0.5:9090",
				"# is that one ready for traffic?",
			},
			exit: "0 on 200, 1 on anything else, a bad flag included: a container runtime's healthcheck reads 1 as unhealthy (2 is reserved there).",
			run:  health,
		},
		{
			name:     "version",
			synopsis: []string{"version [-json]"},
			summary:  "print the version, the commit, its time and the Go version",
			desc: `Prints what the binary's build information holds: the module version, the
commit and whether the tree had uncommitted changes, the commit's time, the
Go version and the platform. The first line is "floodgate VERSION", as the
daemon's banner starts.`,
			examples: []string{
				"floodgate version",
				"# one field a line",
				"floodgate version -json",
				"# one JSON object, for scripts",
			},
			exit: "0, or 2 for a usage error.",
			run:  versionCmd,
		},
		{
			name:     "completion",
			synopsis: []string{"completion bash|zsh|fish"},
			verbs:    completionShells,
			summary:  "print a shell completion script for the commands and their flags",
			desc: `Prints a completion script for bash, zsh or fish, made from the same table
as this help: every command, the words they take first, and their flags.`,
			examples: []string{
				"source <(floodgate completion bash)",
				"# complete floodgate in this bash; put it in ~/.bashrc to keep it",
				"floodgate completion zsh > \"${fpath[1]}/_floodgate\"",
				"# install it for zsh",
				"floodgate completion fish > ~/.config/fish/completions/floodgate.fish",
				"# install it for fish",
			},
			exit: "0, or 2 for a usage error (no shell, or one it has no script for).",
			run:  completionCmd,
		},
		{
			name:     "help",
			synopsis: []string{"help [COMMAND]"},
			summary:  "print the command list, or a command's help (as floodgate COMMAND -h)",
			desc:     `Without a command, prints the command list; with one, that command's help.`,
			examples: []string{
				"floodgate help serve",
				"# the daemon's help",
			},
			exit: "0, or 2 for a command it does not know.",
			run:  helpCmd,
		},
	}
}

// lookup is the command of that name, or nil.
func lookup(name string) *command {
	for _, c := range commandTable() {
		if c.name == name {
			return c
		}
	}
	return nil
}

// flagProbe is the standard error a command is run with by flagsOf: the
// flag set the command makes with newFlagSet is kept here.
type flagProbe struct {
	io.Writer
	fs *flag.FlagSet
}

// newFlagSet is the flag set of the command name: a usage error prints its
// synopsis to stderr, -h (which run answers before the command is reached)
// its help.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	if p, ok := stderr.(*flagProbe); ok {
		p.fs = fs
		fs.SetOutput(io.Discard)
		fs.Usage = func() {}
		return fs
	}
	fs.SetOutput(stderr)
	fs.Usage = func() {
		if c := lookup(strings.Fields(name)[0]); c != nil {
			c.writeSynopsis(fs.Output(), "usage: ")
			fmt.Fprintf(fs.Output(), "run floodgate %s -h for the flags and examples\n", c.name)
		}
	}
	return fs
}

// flagsOf returns the flags command c defines after its first word verb
// ("" for a command that takes none). The command is run on "-h" with a
// flagProbe for standard error: it defines its flags on the set newFlagSet
// gives it, and the parse stops at -h, before the command does anything.
func (c *command) flagsOf(verb string) []*flag.Flag {
	args := []string{"-h"}
	if verb != "" {
		args = []string{verb, "-h"}
	}
	p := &flagProbe{Writer: io.Discard}
	c.run(args, io.Discard, p)
	var flags []*flag.Flag
	if p.fs != nil {
		p.fs.VisitAll(func(f *flag.Flag) { flags = append(flags, f) })
	}
	return flags
}

// allFlags is the union of c's flags over its verbs, by name.
func (c *command) allFlags() []*flag.Flag {
	verbs := c.verbs
	if len(verbs) == 0 {
		verbs = []string{""}
	}
	var all []*flag.Flag
	for _, v := range verbs {
		for _, f := range c.flagsOf(v) {
			if !slices.ContainsFunc(all, func(g *flag.Flag) bool { return g.Name == f.Name }) {
				all = append(all, f)
			}
		}
	}
	slices.SortFunc(all, func(a, b *flag.Flag) int { return strings.Compare(a.Name, b.Name) })
	return all
}

func (c *command) writeSynopsis(w io.Writer, prefix string) {
	for i, s := range c.synopsis {
		if i > 0 {
			prefix = strings.Repeat(" ", len(prefix))
		}
		fmt.Fprintf(w, "%sfloodgate %s\n", prefix, s)
	}
}

// writeHelp writes c's help as a manual page does: NAME, SYNOPSIS,
// DESCRIPTION, FLAGS (each with its default), EXAMPLES, EXIT STATUS.
func (c *command) writeHelp(w io.Writer) {
	fmt.Fprintf(w, "NAME\n    floodgate %s - %s\n\nSYNOPSIS\n", c.name, c.summary)
	c.writeSynopsis(w, "    ")
	fmt.Fprintf(w, "\nDESCRIPTION\n%s\n", indent(c.desc, "    "))
	if flags := c.allFlags(); len(flags) > 0 {
		fmt.Fprintf(w, "\nFLAGS\n")
		for _, f := range flags {
			arg, usage := flag.UnquoteUsage(f)
			line := "    -" + f.Name
			if arg != "" {
				line += " " + arg
			}
			// The default, unless the usage says it (a default read from
			// the environment, a token, is never printed) or it is a
			// switch's false.
			if def := f.DefValue; def != "" && !(def == "false" && !takesValue(f)) && !strings.Contains(usage, "default") {
				usage += fmt.Sprintf(" (default %s)", def)
			}
			fmt.Fprintf(w, "%s\n%s\n", line, indent(wrap(usage, 68), "        "))
		}
	}
	fmt.Fprintf(w, "\nEXAMPLES\n")
	for _, e := range c.examples {
		if strings.HasPrefix(e, "# ") {
			fmt.Fprintf(w, "        %s\n", strings.TrimPrefix(e, "# "))
		} else {
			fmt.Fprintf(w, "    %s\n", e)
		}
	}
	fmt.Fprintf(w, "\nEXIT STATUS\n%s\n", indent(wrap(c.exit, 72), "    "))
}

// usageText is the command list: floodgate without a command, or -h.
func usageText() string {
	var b strings.Builder
	b.WriteString("usage: floodgate COMMAND [flags] [arguments]\n\ncommands:\n")
	for _, c := range commandTable() {
		fmt.Fprintf(&b, "  floodgate %-12s %s\n", c.name, c.summary)
	}
	b.WriteString("\nRun floodgate COMMAND -h (or floodgate help COMMAND) for its synopsis, flags, examples and exit status.\n")
	return b.String()
}

// helpCmd is `floodgate help [COMMAND]`.
func helpCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("help", stderr)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	switch {
	case fs.NArg() == 0:
		fmt.Fprint(stdout, usageText())
		return 0
	case fs.NArg() == 1 && lookup(fs.Arg(0)) != nil:
		lookup(fs.Arg(0)).writeHelp(stdout)
		return 0
	}
	fmt.Fprintf(stderr, "floodgate help: no command %q\n%s", strings.Join(fs.Args(), " "), usageText())
	return 2
}

// wantsHelp reports whether args (a command's) ask for its help: -h,
// -help or --help before any "--".
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// indent puts prefix before every non-empty line of s.
func indent(s, prefix string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = prefix + l
		}
	}
	return strings.Join(lines, "\n")
}

// wrap breaks s into lines of at most width characters, at spaces.
func wrap(s string, width int) string {
	var b strings.Builder
	n := 0
	for _, w := range strings.Fields(s) {
		switch {
		case n == 0:
		case n+1+len(w) > width:
			b.WriteByte('\n')
			n = 0
		default:
			b.WriteByte(' ')
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}
