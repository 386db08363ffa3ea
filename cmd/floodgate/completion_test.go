package main

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// completionScript writes floodgate completion SHELL, as the binary
// prints it, to a file.
func completionScript(t *testing.T, shell string) string {
	t.Helper()
	out, err := exec.Command(binary, "completion", shell).Output()
	if err != nil {
		t.Fatalf("floodgate completion %s: %v", shell, err)
	}
	f := filepath.Join(t.TempDir(), "floodgate."+shell)
	if err := os.WriteFile(f, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// flagWords is "-a -b …": the flags command name defines after verb.
func flagWords(name, verb string) []string {
	var w []string
	for _, f := range lookup(name).flagsOf(verb) {
		w = append(w, "-"+f.Name)
	}
	return w
}

// The bash script registers a completion function for floodgate, and that
// function, called as bash calls it (COMP_WORDS, COMP_CWORD), completes the
// commands, a command's first words and every flag each command defines.
func TestBashCompletion(t *testing.T) {
	script := completionScript(t, "bash")
	type tc struct {
		words []string // the command line, the word being completed last
		want  []string
	}
	var names []string
	for _, c := range commandTable() {
		names = append(names, c.name)
	}
	cases := []tc{
		{[]string{"floodgate", ""}, names},
		{[]string{"floodgate", "ser"}, []string{"serve"}},
		{[]string{"floodgate", "check", "-po"}, []string{"-policy"}},
		{[]string{"floodgate", "check", "-policy", "api", "-"}, flagWords("check", "")},
		{[]string{"floodgate", "key", ""}, []string{"show", "reset"}},
		{[]string{"floodgate", "key", "show", "-ht"}, []string{"-http"}},
		{[]string{"floodgate", "key", "reset", "-ht"}, nil},
		{[]string{"floodgate", "completion", "z"}, []string{"zsh"}},
		{[]string{"floodgate", "help", "ver"}, []string{"version"}},
		{[]string{"floodgate", "replay", "-ag"}, []string{"-against"}},
	}
	for _, c := range commandTable() {
		verb := ""
		words := []string{"floodgate", c.name}
		if len(c.verbs) > 0 {
			verb = c.verbs[0]
			words = append(words, verb)
		}
		cases = append(cases, tc{append(words, "-"), flagWords(c.name, verb)})
	}
	var prog strings.Builder
	prog.WriteString("source " + script + "\ncomplete -p floodgate\n")
	prog.WriteString(`comp() { COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=(); _floodgate; echo "${COMPREPLY[*]}"; }` + "\n")
	for _, c := range cases {
		prog.WriteString("comp")
		for _, w := range c.words {
			prog.WriteString(" '" + w + "'")
		}
		prog.WriteString("\n")
	}
	cmd := exec.Command("bash", "--norc", "--noprofile", "-c", prog.String())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || stderr.Len() > 0 {
		t.Fatalf("bash: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(cases)+1 {
		t.Fatalf("bash printed %d lines, want %d:\n%s", len(lines), len(cases)+1, out)
	}
	if lines[0] != "complete -o default -F _floodgate floodgate" {
		t.Errorf("complete -p floodgate: %q", lines[0])
	}
	for i, c := range cases {
		got := strings.Fields(lines[i+1])
		if !slices.Equal(got, c.want) {
			t.Errorf("%q: completions %q, want %q", strings.Join(c.words, " "), got, c.want)
		}
	}
	if len(flagWords("key", "show")) <= len(flagWords("key", "reset")) || len(flagWords("check", "")) == 0 {
		t.Errorf("the flags read from the commands: key show %v, key reset %v, check %v",
			flagWords("key", "show"), flagWords("key", "reset"), flagWords("check", ""))
	}
}

// fish completes from the script as a user's fish does (complete -C); the
// script passes fish -n.
func TestFishCompletion(t *testing.T) {
	script := completionScript(t, "fish")
	if out, err := exec.Command("fish", "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("fish -n: %v\n%s", err, out)
	}
	cases := map[string][]string{
		"floodgate ser":           {"serve"},
		"floodgate check -po":     {"-policy"},
		"floodgate key ":          {"reset", "show"},
		"floodgate key show -ht":  {"-http"},
		"floodgate key reset -ht": nil,
		"floodgate health -":      flagWords("health", ""),
	}
	for line, want := range cases {
		out, err := exec.Command("fish", "--no-config", "-c", "source "+script+"; complete -C '"+line+"'").Output()
		if err != nil {
			t.Fatalf("fish: %v", err)
		}
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if l != "" {
				got = append(got, strings.SplitN(l, "\t", 2)[0])
			}
		}
		slices.Sort(got)
		want = slices.Sorted(slices.Values(want))
		if !slices.Equal(got, want) {
			t.Errorf("%q: fish completes %q, want %q", line, got, want)
		}
	}
}

// The zsh script passes zsh -n, and names every command and each
// command's flags.
func TestZshCompletion(t *testing.T) {
	script := completionScript(t, "zsh")
	if out, err := exec.Command("zsh", "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("zsh -n: %v\n%s", err, out)
	}
	text, _ := os.ReadFile(script)
	if !strings.HasPrefix(string(text), "#compdef floodgate\n") {
		t.Errorf("the script does not start with #compdef floodgate")
	}
	for _, c := range commandTable() {
		if !strings.Contains(string(text), "\t\t'"+c.name+":") || !strings.Contains(string(text), "\t"+c.name+")\n") {
			t.Errorf("the script does not name %s", c.name)
		}
		for _, f := range c.allFlags() {
			_, usage := flag.UnquoteUsage(f)
			if !strings.Contains(string(text), "'-"+f.Name+"["+plain(usage)+"]") {
				t.Errorf("the script does not offer %s -%s", c.name, f.Name)
			}
		}
	}
}

// An unknown shell or none is a usage error.
func TestCompletionUsage(t *testing.T) {
	for _, args := range [][]string{{"completion"}, {"completion", "tcsh"}, {"completion", "bash", "zsh"}} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != 2 || out.Len() > 0 || errOut.Len() == 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out.String(), errOut.String())
		}
	}
}
