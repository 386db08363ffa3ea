package redisstore

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
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
func ruleArgs(r *floodgate.Rule, atNs int64) (alg, a, capacity, span int64) {
	capacity = r.Capacity()
	switch r.Algorithm {
	case floodgate.GCRA, floodgate.TokenBucket:
		iv := intervalMicros(r.Limit)
		return algGCRA, iv, capacity, capacity * iv
	case floodgate.FixedWindow:
		return algFixed, zoneOffsetMicros(r.Location, atNs), capacity, periodMicros(r.Limit)
	case floodgate.SlidingWindow:
		return algSliding, 0, capacity, periodMicros(r.Limit)
	default:
		return algLog, 0, capacity, periodMicros(r.Limit)
	}
}

// intervalMicros is GCRA's interval in whole microseconds: Period/Rate
// rounded up, computed exactly from Period and Rate. Rounding up never
// admits more than the limit's rate; validateLimit rejects the limits for
// which it would admit noticeably less.
func intervalMicros(l floodgate.Limit) int64 {
	if l.Rate <= 0 || l.Period <= 0 {
		return 0
	}
	// ceil(P/(R·1000)) = ceil(ceil(P/R)/1000), without the product R·1000
	// that could overflow.
	ns := int64(l.Period) / l.Rate
	if int64(l.Period)%l.Rate != 0 {
		ns++
	}
	return (ns + 999) / 1000
}

func periodMicros(l floodgate.Limit) int64 { return int64(l.Period / time.Microsecond) }

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
var keyTags = [...]byte{
	floodgate.GCRA:          'g',
	floodgate.TokenBucket:   'g',
	floodgate.FixedWindow:   'f',
	floodgate.SlidingWindow: 's',
	floodgate.SlidingLog:    'l',
}
