// Command modtool does the module bookkeeping of floodgate's release: it
// lists the published modules, checks their go.mod files, and writes a
// module proxy directory (GOPROXY=file://DIR) holding them at one version,
// made either from a tag, as a proxy serves a release, or from the work
// tree, to check a release before it is tagged.
//
//	modtool modules                     the published module directories, one a line
//	modtool check                       every go.mod as a release needs it
//	modtool version                     the version the modules require of one another
//	modtool setversion -version V       make every such requirement, and go.work, name V
//	modtool proxy -version V -out DIR [-rev REV]
//	modtool sbom -out FILE -name NAME BINARY   an SPDX JSON SBOM of a Go binary
//
// It runs in the repository's root directory (-root to name another). It
// is a module of its own so that golang.org/x/mod, which builds module zips
// exactly as the go command reads them, is no requirement of floodgate's.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	root := fs.String("root", ".", "the repository's root directory")
	version := fs.String("version", "", "the version of every module in the proxy")
	out := fs.String("out", "", "the proxy directory to write")
	rev := fs.String("rev", "", "the git revision to make the modules from; empty: the work tree")
	name := fs.String("name", "", "the SBOM's name (sbom)")
	fs.Parse(os.Args[2:])
	if os.Args[1] == "sbom" {
		if *out == "" || *name == "" || fs.NArg() != 1 {
			usage()
		}
		created, err := sourceDate()
		if err == nil {
			err = writeSBOM(*out, fs.Arg(0), *name, created)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "modtool:", err)
			os.Exit(1)
		}
		return
	}
	r, err := openRepo(*root)
	if err == nil {
		switch os.Args[1] {
		case "modules":
			for _, m := range r.published {
				fmt.Println(m.dir)
			}
		case "version":
			var v string
			if v, err = r.version(); err == nil {
				fmt.Println(v)
			}
		case "setversion":
			if *version == "" {
				usage()
			}
			err = r.setVersion(*version)
		case "check":
			err = r.check()
		case "proxy":
			if *version == "" || *out == "" {
				usage()
			}
			err = r.writeProxy(*out, *version, *rev)
		default:
			usage()
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "modtool:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: modtool modules | check | version | setversion -version V | proxy -version V -out DIR [-rev REV] | sbom -out FILE -name NAME BINARY   [-root DIR]")
	os.Exit(2)
}

// sourceDate is SOURCE_DATE_EPOCH, the time of what is built; the zero
// Unix time when it is not set.
func sourceDate() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want a whole number of seconds since 1970", s)
	}
	return time.Unix(n, 0), nil
}
