package redisstore

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate/algo"
)

//go:embed scripts/*.lua
var scriptFS embed.FS

// scriptParts are the files of the script Redis runs, in the order they
// are joined: each part uses the functions of the parts before it.
var scriptParts = []string{
	"prologue.lua",
	"lib.lua",
	"gcra.lua",
	"fixedwindow.lua",
	"slidingwindow.lua",
	"slidinglog.lua",
	"batch.lua",
}

// leanParts are the parts a batch of GCRA, token bucket and fixed window
// limits needs: the script without the sliding algorithms, whose functions
// every script call would otherwise define, for nothing. The driver's
// calls of them are never reached in such a batch.
var leanParts = []string{
	"prologue.lua",
	"lib.lua",
	"gcra.lua",
	"fixedwindow.lua",
	"batch.lua",
}

// batchScript is the script and its SHA-1, under which EVALSHA finds it;
// leanScript is the script of leanParts, which a batch without sliding
// limits runs.
var (
	batchScript = joinScript(scriptParts)
	leanScript  = joinScript(leanParts)
)

// reserveParts are the files of the reservation script: the batch's
// prologue and GCRA, and a driver of its own.
var reserveParts = []string{"prologue.lua", "lib.lua", "gcra.lua", "reserve.lua"}

// reserveScript reserves and cancels (see scripts/reserve.lua).
var reserveScript = joinScript(reserveParts)

type script struct{ src, sha string }

// scriptOf returns the script whose SHA-1 is sha.
func scriptOf(sha string) script {
	if sha == leanScript.sha {
		return leanScript
	}
	return batchScript
}

// lean reports whether every limit of set runs in leanScript.
func lean(set *algo.Set) bool {
	for i := range set.Len() {
		if k := set.At(i).Kind(); k != algo.GCRA && k != algo.FixedWindow {
			return false
		}
	}
	return true
}

func joinScript(parts []string) script {
	var b strings.Builder
	for _, name := range parts {
		src, err := scriptFS.ReadFile("scripts/" + name)
		if err != nil {
			panic("redisstore: embedded script missing: " + name)
		}
		b.Write(src)
		b.WriteByte('\n')
	}
	src := b.String()
	sum := sha1.Sum([]byte(src))
	return script{src: src, sha: hex.EncodeToString(sum[:])}
}

// Operations of a request, as the script numbers them.
const (
	opDecide = 0
	opRefund = 1
	opReset  = 2
)

var opNames = [...]string{opDecide: "decide", opRefund: "refund", opReset: "reset"}

// Algorithm codes of the script.
const (
	algGCRA    = 1
	algFixed   = 2
	algSliding = 3
	algLog     = 4
	// algCalendar is a fixed window of calendar days; see appendRuleArgs.
	algCalendar = 5
)

// appendRuleArgs appends the script's description of r: its algorithm
// code, a parameter (the interval for GCRA, the zone offset for fixed
// windows), its capacity and its span (capacity × interval for GCRA, the
// period for windows), all in microseconds. A fixed window of calendar days
// in a zone is sent as the days themselves, since Lua knows no zones: code
// algCalendar, the start, the capacity and the end of the window holding
// atNs, then the previous window's start and the next one's end. atNs is
// the instant (this process's clock) whose zone offset or day is used.
func appendRuleArgs(args []any, r *algo.Transition, atNs int64) []any {
	capacity := r.Capacity()
	switch r.Kind() {
	case algo.GCRA:
		iv := intervalMicros(r.Spec())
		return append(args, algGCRA, iv, capacity, capacity*iv)
	case algo.FixedWindow:
		if r.Calendar() {
			start, end := r.Window(atNs)
			prev, _ := r.Window(start - 1)
			_, next := r.Window(end)
			return append(args, algCalendar, start/1e3, capacity, end/1e3, prev/1e3, next/1e3)
		}
		return append(args, algFixed, zoneOffsetMicros(r.Spec().Location, atNs), capacity, periodMicros(r.Spec()))
	case algo.SlidingWindow:
		return append(args, algSliding, 0, capacity, periodMicros(r.Spec()))
	default:
		return append(args, algLog, 0, capacity, periodMicros(r.Spec()))
	}
}

// intervalMicros is GCRA's interval in whole microseconds, Redis's tick:
// Period/Rate rounded up (algo.Interval), so Redis never admits more than
// the rate. It is 0 for a limit the tick cannot keep within 1%, which
// ValidateLimit rejects.
func intervalMicros(l algo.Spec) int64 {
	iv, err := algo.Interval(l, time.Microsecond)
	if err != nil {
		return 0
	}
	return iv
}

func periodMicros(l algo.Spec) int64 { return int64(l.Period / time.Microsecond) }

// zoneOffsetMicros is the offset of loc from UTC at atNs, in microseconds
// (0 for a nil loc).
func zoneOffsetMicros(loc *time.Location, atNs int64) int64 {
	if loc == nil {
		return 0
	}
	_, secs := time.Unix(0, atNs).In(loc).Zone()
	return int64(secs) * 1e6
}

// keyTags names the kind of state a key holds, so that a limit whose
// algorithm changes (a configuration reload) finds a fresh key rather than
// state of another shape. GCRA and TokenBucket share their state.
var keyTags = [algo.Kinds]byte{
	algo.GCRA:          'g',
	algo.FixedWindow:   'f',
	algo.SlidingWindow: 's',
	algo.SlidingLog:    'l',
}
