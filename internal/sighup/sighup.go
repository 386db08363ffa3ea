// Package sighup ignores SIGHUP for floodgate serve from the start of the
// process, before the other packages initialise.
//
// A SIGHUP's default action ends the process, and Go's runtime takes it
// over as soon as it starts: until the program asks for the signal, the
// runtime ends the program on it. serve asks for it (reload) at the top of
// main, but the packages it links initialise first, which takes milliseconds
// (tens on a busy machine), and an operator's or a config manager's reload
// sent in that window would kill the daemon it meant to reload. Importing
// this package, which imports nothing heavier than os/signal, moves the
// start of that protection to the earliest point a Go program can run code
// of its own; serve's signal.Notify then takes the signal over (and a
// SIGHUP that came in between is dropped, as the configuration it asks
// for is being read anyway).
package sighup

import (
	"os"
	"os/signal"
	"syscall"
)

func init() {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		signal.Ignore(syscall.SIGHUP)
	}
}
