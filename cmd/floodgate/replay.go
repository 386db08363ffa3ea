package main

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/replay"
)

// replayCmd is `floodgate replay`.
func replayCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("replay", stderr)
	cand := fs.String("config", "", "the candidate configuration `file` (required)")
	against := fs.String("against", "", "the configuration `file` to compare with (default: the built-in defaults, as floodgate serve without a file; none: no comparison)")
	format := fs.String("format", "auto", "the log's `format`: auto, json, nginx or envoy")
	peer := fs.String("peer", "", "the peer `address` of requests whose line names none (an Envoy line without X-Forwarded-For)")
	host := fs.String("host", "", "the `Host` of requests whose line names none (nginx's combined format logs none)")
	headers := fs.String("headers", "", "comma-separated header `names` of quoted fields appended to an nginx or Envoy line, in order (e.g. X-Forwarded-For,X-Api-Key)")
	top := fs.Int("top", 10, "how many flipping `keys` to list")
	asJSON := fs.Bool("json", false, "write the report as JSON")
	rawKeys := fs.Bool("raw-keys", false, "show keys as they are (default: redacted stand-ins, as floodgate logs them; stable within one report)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *cand == "" || fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	f, err := replay.ParseFormat(*format)
	if err != nil {
		fmt.Fprintf(stderr, "floodgate replay: -format: %v\n", err)
		return 2
	}
	o := replay.RunOptions{Format: f, Peer: *peer, Host: *host, Top: *top, RawKeys: *rawKeys}
	if *headers != "" {
		for _, h := range strings.Split(*headers, ",") {
			if h = strings.TrimSpace(h); h != "" {
				o.Parse.ExtraHeaders = append(o.Parse.ExtraHeaders, h)
			}
		}
	}

	candidate, err := config.Load(*cand)
	if err != nil {
		printConfigErr(stderr, *cand, err)
		return 1
	}
	var current *config.Config
	switch *against {
	case "none":
	case "":
		current = config.Default()
		current.File = "built-in defaults (floodgate serve without a file; give -against FILE for the file in service)"
	default:
		if current, err = config.Load(*against); err != nil {
			printConfigErr(stderr, *against, err)
			return 1
		}
	}

	log, closeLog, err := openLog(fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "floodgate replay: %v\n", err)
		return 1
	}
	defer closeLog()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := replay.Run(ctx, log, candidate, current, o)
	if err != nil {
		printConfigErr(stderr, "floodgate replay", err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(stderr, "floodgate replay: %v\n", err)
			return 1
		}
		return 0
	}
	rep.WriteText(stdout)
	return 0
}

// printConfigErr prints every error of a configuration, one a line, as
// floodgate validate does.
func printConfigErr(w io.Writer, name string, err error) {
	var errs config.Errors
	if errors.As(err, &errs) {
		for _, e := range errs {
			fmt.Fprintln(w, e)
		}
		fmt.Fprintf(w, "%s: %d error(s)\n", name, len(errs))
		return
	}
	fmt.Fprintf(w, "%s: %v\n", name, err)
}

// openLog opens the log at path: standard input for "-", decompressed
// when the name ends in .gz.
func openLog(path string) (io.Reader, func(), error) {
	if path == "-" {
		return os.Stdin, func() {}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	if !strings.HasSuffix(path, ".gz") {
		return f, func() { f.Close() }, nil
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %v", path, err)
	}
	return zr, func() { zr.Close(); f.Close() }, nil
}
