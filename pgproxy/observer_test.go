package pgproxy

import (
	"sync/atomic"
	"time"
)

// counts is an Observer that counts what the internal tests read.
type counts struct {
	nopObserver
	queries [numScopes][3]atomic.Uint64
	waits   [numScopes][3]atomic.Uint64
	waiting atomic.Int64
}

func (o *counts) QueryChecked(l Level, d QueryOutcome) { o.queries[l][d].Add(1) }
func (o *counts) WaitStarted()                         { o.waiting.Add(1) }
func (o *counts) WaitEnded(l Level, w WaitOutcome, _ time.Duration) {
	o.waits[l][w].Add(1)
	o.waiting.Add(-1)
}
