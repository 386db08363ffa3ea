package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// completionShells are the shells floodgate completion writes a script for.
var completionShells = []string{"bash", "zsh", "fish"}

// completionCmd is `floodgate completion bash|zsh|fish`: a completion
// script made from the command table, so it offers what the binary has.
func completionCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("completion", stderr)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	switch fs.Arg(0) {
	case "bash":
		writeBash(stdout)
	case "zsh":
		writeZsh(stdout)
	case "fish":
		writeFish(stdout)
	default:
		fmt.Fprintf(stderr, "floodgate completion: no script for %q; the shells are %s\n", fs.Arg(0), strings.Join(completionShells, ", "))
		return 2
	}
	return 0
}

// completionWords is what a completion script offers for one command: the
// words it takes first (key: show, reset; help: the commands), and its
// flags, by verb for a command with verbs (key show takes a request's
// flags, key reset does not), under "" for one without.
type completionWords struct {
	c     *command
	words []string
	verbs []string // c.verbs, or "" alone
	flags map[string][]*flag.Flag
}

func completionTable() []completionWords {
	var t []completionWords
	for _, c := range commandTable() {
		w := completionWords{c: c, words: c.verbs, verbs: c.verbs, flags: map[string][]*flag.Flag{}}
		if len(w.verbs) == 0 {
			w.verbs = []string{""}
		}
		for _, v := range w.verbs {
			w.flags[v] = c.flagsOf(v)
		}
		if c.name == "help" {
			for _, o := range commandTable() {
				w.words = append(w.words, o.name)
			}
		}
		t = append(t, w)
	}
	return t
}

func flagNames(flags []*flag.Flag, prefix string) string {
	var names []string
	for _, f := range flags {
		names = append(names, prefix+f.Name)
	}
	return strings.Join(names, " ")
}

// takesValue reports whether f needs an argument (every flag but a bool).
func takesValue(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return !ok || !b.IsBoolFlag()
}

// plain is a one-line description safe inside single quotes and zsh's
// [...] descriptions: the usage's first clause, letters and simple
// punctuation only (an apostrophe is a typographic one).
func plain(s string) string {
	for _, sep := range []string{"; ", ": ", " ("} {
		if i := strings.Index(s, sep); i > 0 {
			s = s[:i]
		}
	}
	s = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		case strings.ContainsRune(" ,./-_+=", r):
			return r
		case r == ':':
			return ' '
		case r == '\'':
			return '’'
		}
		return -1
	}, s)
	return strings.TrimSpace(s)
}

func writeBash(w io.Writer) {
	t := completionTable()
	var names []string
	for _, c := range t {
		names = append(names, c.c.name)
	}
	fmt.Fprintf(w, `# bash completion for floodgate: source <(floodgate completion bash)
_floodgate() {
	local cur=${COMP_WORDS[COMP_CWORD]} verbs="" flags="" prev=""
	COMPREPLY=()
	if [ "$COMP_CWORD" -eq 1 ]; then
		COMPREPLY=($(compgen -W %q -- "$cur"))
		return
	fi
	[ "$COMP_CWORD" -gt 2 ] && prev=${COMP_WORDS[2]}
	case ${COMP_WORDS[1]} in
`, strings.Join(names, " "))
	for _, c := range t {
		fmt.Fprintf(w, "\t%s)\n", c.c.name)
		if len(c.words) > 0 {
			fmt.Fprintf(w, "\t\tverbs=%q\n", strings.Join(c.words, " "))
		}
		if c.verbs[0] == "" {
			fmt.Fprintf(w, "\t\tflags=%q\n", flagNames(c.flags[""], "-"))
		} else {
			fmt.Fprintf(w, "\t\tcase $prev in\n")
			for _, v := range c.verbs {
				fmt.Fprintf(w, "\t\t%s) flags=%q ;;\n", v, flagNames(c.flags[v], "-"))
			}
			fmt.Fprintf(w, "\t\tesac\n")
		}
		fmt.Fprintf(w, "\t\t;;\n")
	}
	fmt.Fprint(w, `	esac
	if [ "$COMP_CWORD" -eq 2 ] && [ -n "$verbs" ] && [[ $cur != -* ]]; then
		COMPREPLY=($(compgen -W "$verbs" -- "$cur"))
	elif [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$flags" -- "$cur"))
	fi
}
complete -o default -F _floodgate floodgate
`)
}

func writeZsh(w io.Writer) {
	t := completionTable()
	fmt.Fprint(w, `#compdef floodgate
# zsh completion for floodgate: floodgate completion zsh > "${fpath[1]}/_floodgate"
_floodgate() {
	local -a commands
	commands=(
`)
	for _, c := range t {
		fmt.Fprintf(w, "\t\t'%s:%s'\n", c.c.name, plain(c.c.summary))
	}
	fmt.Fprint(w, `	)
	if (( CURRENT == 2 )); then
		_describe -t commands 'floodgate command' commands
		return
	fi
	local cmd=$words[2]
	shift words
	(( CURRENT-- ))
	case $cmd in
`)
	// zargs is the _arguments call for flags (and files), or _nothing.
	zargs := func(flags []*flag.Flag, files string) string {
		var specs []string
		for _, f := range flags {
			_, usage := flag.UnquoteUsage(f)
			spec := fmt.Sprintf("'-%s[%s]", f.Name, plain(usage))
			if takesValue(f) {
				spec += ":" + f.Name + ":_default"
			}
			specs = append(specs, spec+"'")
		}
		if files != "" {
			specs = append(specs, files)
		}
		if len(specs) == 0 {
			return "_nothing"
		}
		return "_arguments " + strings.Join(specs, " ")
	}
	for _, c := range t {
		fmt.Fprintf(w, "\t%s)\n", c.c.name)
		files := ""
		if c.c.files {
			files = "'*:file:_files'"
		}
		switch {
		case c.verbs[0] == "" && len(c.words) > 0:
			fmt.Fprintf(w, "\t\t_arguments '1:%s:(%s)'\n", c.c.name, strings.Join(c.words, " "))
		case c.verbs[0] != "":
			fmt.Fprintf(w, "\t\tif (( CURRENT == 2 )); then _values %s %s; return; fi\n\t\tlocal verb=$words[2]\n\t\tshift words\n\t\t(( CURRENT-- ))\n\t\tcase $verb in\n", c.c.name, strings.Join(c.verbs, " "))
			for _, v := range c.verbs {
				fmt.Fprintf(w, "\t\t%s) %s ;;\n", v, zargs(c.flags[v], files))
			}
			fmt.Fprintf(w, "\t\tesac\n")
		default:
			fmt.Fprintf(w, "\t\t%s\n", zargs(c.flags[""], files))
		}
		fmt.Fprintf(w, "\t\t;;\n")
	}
	fmt.Fprint(w, `	esac
}
if [ "$funcstack[1]" = _floodgate ]; then
	_floodgate "$@"
else
	compdef _floodgate floodgate
fi
`)
}

func writeFish(w io.Writer) {
	t := completionTable()
	fmt.Fprintf(w, "# fish completion for floodgate: floodgate completion fish > ~/.config/fish/completions/floodgate.fish\ncomplete -c floodgate -f\n")
	for _, c := range t {
		fmt.Fprintf(w, "complete -c floodgate -n '__fish_use_subcommand' -a %s -d '%s'\n", c.c.name, plain(c.c.summary))
	}
	for _, c := range t {
		seen := fmt.Sprintf("__fish_seen_subcommand_from %s", c.c.name)
		if c.c.files {
			fmt.Fprintf(w, "complete -c floodgate -n '%s' -F\n", seen)
		}
		if len(c.words) > 0 {
			fmt.Fprintf(w, "complete -c floodgate -n '%s; and not __fish_seen_subcommand_from %s' -a '%s'\n", seen, strings.Join(c.words, " "), strings.Join(c.words, " "))
		}
		for _, v := range c.verbs {
			flags := c.flags[v]
			cond := seen
			if v != "" {
				cond += "; and __fish_seen_subcommand_from " + v
			}
			for _, f := range flags {
				_, usage := flag.UnquoteUsage(f)
				opt := ""
				if takesValue(f) {
					opt = " -r -F"
				}
				fmt.Fprintf(w, "complete -c floodgate -n '%s' -o %s%s -d '%s'\n", cond, f.Name, opt, plain(usage))
			}
		}
	}
}
