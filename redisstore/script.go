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

// scriptParts are the files of the one script Redis runs, in the order they
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

// batchScript is the script and its SHA-1, under which EVALSHA finds it.
var batchScript = joinScript()

type script struct{ src, sha string }

func joinScript() script {
	var b strings.Builder
	for _, name := range scriptParts {
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
)

// ruleArgs returns the script's description of r: its algorithm code, a
// parameter (the interval for GCRA, the zone offset for fixed windows), its
// capacity and its span (capacity × interval for GCRA, the period for
// windows), all in microseconds. atNs is the instant whose zone offset
// aligns fixed windows.
func ruleArgs(r *algo.Transition, atNs int64) (alg, a, capacity, span int64) {
	capacity = r.Capacity()
	switch r.Kind() {
	case algo.GCRA:
		iv := intervalMicros(r.Spec())
		return algGCRA, iv, capacity, capacity * iv
	case algo.FixedWindow:
		return algFixed, zoneOffsetMicros(r.Spec().Location, atNs), capacity, periodMicros(r.Spec())
	case algo.SlidingWindow:
		return algSliding, 0, capacity, periodMicros(r.Spec())
	default:
		return algLog, 0, capacity, periodMicros(r.Spec())
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
