package main

import (
	"bytes"
	"flag"
	"regexp"
	"strings"
	"testing"
)

// The command list names each command of the table once (explain was
// listed twice when the list was a copy of its own).
func TestHelpListsEachCommandOnce(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"--help"}, &out, &out); code != 0 {
		t.Fatalf("exit %d", code)
	}
	seen := map[string]int{}
	for _, line := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "floodgate" {
			seen[f[1]]++
		}
	}
	table := commandTable()
	for _, c := range table {
		if seen[c.name] != 1 {
			t.Errorf("%s is listed %d times:\n%s", c.name, seen[c.name], out.String())
		}
	}
	if len(seen) != len(table) {
		t.Errorf("commands listed: %v", seen)
	}
	for _, cmd := range []string{"serve", "validate", "check", "key", "explain", "replay", "health", "version", "completion"} {
		if lookup(cmd) == nil {
			t.Errorf("the table has no %s", cmd)
		}
	}
}

// Every command's -h, --help and floodgate help COMMAND print, on
// standard output with exit 0, a manual page: its sections in order, the
// synopsis, every flag the command defines with its default, examples
// that run floodgate and the exit status.
func TestEveryCommandHasAManualPage(t *testing.T) {
	sections := []string{"NAME", "SYNOPSIS", "DESCRIPTION", "FLAGS", "EXAMPLES", "EXIT STATUS"}
	for _, c := range commandTable() {
		var pages []string
		for _, args := range [][]string{{c.name, "-h"}, {c.name, "--help"}, {"help", c.name}} {
			var out, errOut bytes.Buffer
			if code := run(args, &out, &errOut); code != 0 || errOut.Len() > 0 {
				t.Errorf("%q: exit %d, stderr %q", args, code, errOut.String())
			}
			pages = append(pages, out.String())
		}
		if pages[0] != pages[1] || pages[0] != pages[2] {
			t.Errorf("%s: -h, --help and help %s differ", c.name, c.name)
		}
		page := "\n" + pages[0]
		flags := c.allFlags()
		pos := 0
		for _, s := range sections {
			if s == "FLAGS" && len(flags) == 0 {
				continue
			}
			i := strings.Index(page[pos:], "\n"+s+"\n")
			if i < 0 {
				t.Errorf("%s: no %s section after byte %d:\n%s", c.name, s, pos, page)
				break
			}
			pos += i + 1
			// Each section has content: an indented line after its title.
			if rest := page[pos+len(s)+1:]; !strings.HasPrefix(rest, "    ") || strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0]) == "" {
				t.Errorf("%s: section %s is empty", c.name, s)
			}
		}
		if !strings.Contains(page, "    floodgate "+c.name) {
			t.Errorf("%s: the synopsis does not name the command:\n%s", c.name, page)
		}
		for _, f := range flags {
			m := regexp.MustCompile(`(?m)^    -` + regexp.QuoteMeta(f.Name) + `( \S+)?\n((        .*\n)+)`).FindStringSubmatch(page)
			if m == nil {
				t.Errorf("%s: flag -%s is not listed:\n%s", c.name, f.Name, page)
				continue
			}
			_, usage := flag.UnquoteUsage(f)
			isBool := !takesValue(f)
			if f.DefValue != "" && !(isBool && f.DefValue == "false") && !strings.Contains(usage, "default") &&
				!strings.Contains(strings.Join(strings.Fields(m[2]), " "), "(default "+f.DefValue+")") {
				t.Errorf("%s: flag -%s does not show its default %q:\n%s", c.name, f.Name, f.DefValue, m[0])
			}
		}
		if !regexp.MustCompile(`(?m)^EXAMPLES\n    (\S+ )*floodgate `+c.name).MatchString(page) &&
			!regexp.MustCompile(`(?m)^EXAMPLES\n    \S+ <\(floodgate `+c.name).MatchString(page) {
			t.Errorf("%s: the first example does not run floodgate %s:\n%s", c.name, c.name, page)
		}
		if !regexp.MustCompile(`(?m)^EXIT STATUS\n    .*\b0\b`).MatchString(page) {
			t.Errorf("%s: the exit status does not say what 0 means:\n%s", c.name, page)
		}
	}
}

// A flag the table's commands define is in their help: the help is made
// from the flag set, not from a copy. check defines -cost.
func TestHelpFlagsComeFromTheFlagSet(t *testing.T) {
	var out bytes.Buffer
	run([]string{"check", "-h"}, &out, &out)
	if !strings.Contains(out.String(), "    -cost int\n        units to charge; 0 peeks without charging (default 1)\n") {
		t.Errorf("check -h:\n%s", out.String())
	}
	// A usage error names the synopsis on standard error, with exit 2.
	var so, se bytes.Buffer
	if code := run([]string{"check", "-nosuchflag"}, &so, &se); code != 2 || !strings.Contains(se.String(), "usage: floodgate check -policy P -key K") {
		t.Errorf("check -nosuchflag: exit %d, stderr %q", code, se.String())
	}
}
