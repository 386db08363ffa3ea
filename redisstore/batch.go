package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/algo"
	"github.com/floodgate-go/floodgate/internal/chargedenied"
	"github.com/redis/go-redis/v9"
)

// A request is one call of Decide, Refund or Reset on its way through the
// queue. The caller fills it and waits on done; a flusher takes it, sends
// it, fills the answer and signals done.
type request struct {
	set      *algo.Set
	key      string
	cost     int64
	op       uint8
	plain    bool      // counted with INCRBY, no script (see plainDecide)
	deadline time.Time // zero: none

	// state moves from stateQueued to stateTaken (by a flusher) or to
	// stateAbandoned (by a caller whose context ended first), once.
	state atomic.Uint32
	done  chan struct{} // capacity 1: finish never blocks

	// timer bounds the wait of a caller whose context has no deadline
	// (Options.Timeout); it stays with the request through the pool.
	timer *time.Timer

	err error
	ds  [algo.MaxTransitions]algo.Decision
}

const (
	stateQueued = iota
	stateTaken
	stateAbandoned
)

// finish hands the outcome to the waiting caller, if it still waits.
func (r *request) finish(err error) {
	r.err = err
	r.done <- struct{}{}
}

var requestPool = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &request{done: make(chan struct{}, 1), timer: t}
}}

// release returns a completed request to the pool. Only a request whose
// caller received its outcome is released: an abandoned one may still be
// referenced by the queue or a flusher, and is left to the collector.
func (s *Store) release(r *request) {
	r.timer.Stop()
	r.set, r.key, r.err, r.plain = nil, "", nil, false
	requestPool.Put(r)
}

// do queues a request and waits until a flusher completes it, ctx ends or,
// when ctx has no deadline, Options.Timeout passes.
func (s *Store) do(ctx context.Context, op uint8, set *algo.Set, key string, cost int64) (*request, error) {
	if err := ctx.Err(); err != nil {
		return nil, &Error{Op: opNames[op], Err: err}
	}
	r := requestPool.Get().(*request)
	r.set, r.key, r.cost, r.op = set, key, cost, op
	r.plain = op == opDecide && plainSet(set) && chargedenied.On(ctx)
	// The wait is bounded by the deadline on the request's own timer, not
	// only by ctx.Done: a context that carries a deadline without a
	// channel closing at it (package internal/deadline, which the failover
	// Guard and the Envoy service give their calls) is bounded all the
	// same, and no context needs deriving for it.
	var expired <-chan time.Time
	deadline, ok := ctx.Deadline()
	if !ok && s.timeout > 0 {
		deadline = time.Now().Add(s.timeout)
	}
	if !deadline.IsZero() {
		r.timer.Reset(time.Until(deadline))
		expired = r.timer.C
	}
	r.deadline = deadline
	r.state.Store(stateQueued)
	if err := s.enqueue(r); err != nil {
		s.release(r)
		return nil, &Error{Op: opNames[op], Err: err}
	}
	select {
	case <-r.done:
		r.timer.Stop()
	case <-ctx.Done():
		r.timer.Stop()
		if err := s.giveUp(r, op, ctx.Err()); err != nil {
			return nil, err
		}
	case <-expired:
		cause := context.DeadlineExceeded
		if !ok {
			cause = fmt.Errorf("Options.Timeout (%s) passed; check redis's health and latency, or give the call a context deadline: %w", s.timeout, context.DeadlineExceeded)
		}
		if err := s.giveUp(r, op, cause); err != nil {
			return nil, err
		}
	}
	if r.err != nil {
		err := &Error{Op: opNames[op], Err: r.err}
		s.release(r)
		return nil, err
	}
	return r, nil
}

// giveUp abandons r, whose caller stops waiting because of cause, and
// returns the caller's error; or nil when r was completed meanwhile and its
// answer stands.
func (s *Store) giveUp(r *request, op uint8, cause error) error {
	if r.state.CompareAndSwap(stateQueued, stateAbandoned) {
		s.abandoned.Add(1)
		return &Error{Op: opNames[op], Err: fmt.Errorf("gave up waiting to be sent to redis: %w", cause)}
	}
	select {
	case <-r.done:
		return nil
	default:
		return &Error{Op: opNames[op], Err: fmt.Errorf("gave up waiting for redis's answer: %w", cause)}
	}
}

// enqueue appends r to the queue and wakes an idle flusher.
func (s *Store) enqueue(r *request) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	n := len(s.pending) - s.head
	if ab := int(s.abandoned.Load()); ab > s.maxBatch && 2*ab > n {
		s.sweep()
		n = len(s.pending) - s.head
	}
	if n-int(s.abandoned.Load()) >= s.maxPending {
		return ErrOverloaded
	}
	s.pending = append(s.pending, r)
	if s.idle > 0 {
		s.wake.Signal()
	}
	return nil
}

// sweep drops abandoned requests from the queue. The caller holds mu.
func (s *Store) sweep() {
	live := s.pending[:0]
	dropped := 0
	for _, r := range s.pending[s.head:] {
		if r.state.Load() == stateAbandoned {
			dropped++
			continue
		}
		live = append(live, r)
	}
	clear(s.pending[len(live):])
	s.pending, s.head = live, 0
	s.abandoned.Add(-int64(dropped))
}

// take waits for requests and moves up to maxBatch of them, oldest first,
// from the queue to dst. It returns false once the Store is closed.
func (s *Store) take(dst []*request) ([]*request, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		for len(s.pending) == s.head {
			if s.closed {
				return dst, false
			}
			s.idle++
			s.wake.Wait()
			s.idle--
		}
		i := s.head
		for ; i < len(s.pending) && len(dst) < s.maxBatch; i++ {
			r := s.pending[i]
			s.pending[i] = nil
			if r.state.CompareAndSwap(stateQueued, stateTaken) {
				dst = append(dst, r)
			} else {
				s.abandoned.Add(-1)
			}
		}
		s.head = i
		if s.head == len(s.pending) {
			s.pending, s.head = s.pending[:0], 0
		} else if s.head > len(s.pending)/2 {
			n := copy(s.pending, s.pending[s.head:])
			clear(s.pending[n:])
			s.pending, s.head = s.pending[:n], 0
		}
		if len(dst) > 0 {
			return dst, true
		}
	}
}

// groupMode says which requests one script call may combine: Redis Cluster
// runs a script only on keys of one slot.
type groupMode uint8

const (
	groupAll  groupMode = iota // one server: every request of a batch
	groupSlot                  // Redis Cluster: requests whose keys share a slot
	groupTag                   // other clients (Ring): requests whose keys share a hash tag
)

func groupModeOf(c redis.UniversalClient) groupMode {
	switch c.(type) {
	case *redis.Client:
		return groupAll
	case *redis.ClusterClient:
		return groupSlot
	}
	return groupTag
}

// A flusher owns the scratch space of one goroutine that sends batches.
type flusher struct {
	s     *Store
	batch []*request
	calls []*call
	slots map[int]int    // slot → index in calls (groupSlot)
	tags  map[string]int // hash tag → index in calls (groupTag)
	sets  map[*algo.Set]int
	order []*algo.Set
	buf   []byte
	ends  []int

	scripted []*request  // the batch's requests that run in the script
	plain    []plainCall // and those counted without it
}

// A call is one script call: the requests it decides and its command.
type call struct {
	reqs []*request
	cmd  *redis.Cmd
}

// A plainCall is one request counted without a script: its INCRBY and
// its PEXPIRE NX, and the window they count in.
type plainCall struct {
	r            *request
	incr, expire *redis.Cmd
	now, end     int64 // ns
}

func (s *Store) flush() {
	defer s.flushers.Done()
	f := &flusher{s: s, slots: map[int]int{}, tags: map[string]int{}, sets: map[*algo.Set]int{}}
	for {
		batch, ok := s.take(f.batch[:0])
		if !ok {
			return
		}
		f.batch = batch
		f.run(batch)
		clear(batch)
	}
}

// run sends one batch and completes its requests.
func (f *flusher) run(batch []*request) {
	s := f.s
	ctx, cancel := batchContext(s.ctx, batch)
	defer cancel()

	var now any = ""
	var zoneAt int64
	if s.clock != nil {
		ns := s.clock.UnixNano()
		now, zoneAt = ns/1e3, ns
	} else {
		zoneAt = time.Now().UnixNano()
	}
	scripted := f.scripted[:0]
	f.plain = f.plain[:0]
	for _, r := range batch {
		if r.plain {
			f.plain = append(f.plain, f.plainCall(ctx, r, zoneAt))
		} else {
			scripted = append(scripted, r)
		}
	}
	f.scripted = scripted
	var calls []*call
	if len(scripted) > 0 {
		calls = f.group(scripted)
	}
	for _, c := range calls {
		c.cmd = redis.NewCmd(ctx, f.args(c.reqs, now, zoneAt)...)
	}
	s.exec(ctx, calls, f.plain)
	for _, c := range calls {
		f.complete(c)
		clear(c.reqs)
		c.reqs = c.reqs[:0]
		c.cmd = nil
	}
	for i := range f.plain {
		s.completePlain(ctx, &f.plain[i])
		f.plain[i] = plainCall{}
	}
	clear(scripted)
}

// batchContext returns the context of a round trip: it ends when the last
// of the batch's callers would stop waiting, or when the Store closes.
func batchContext(base context.Context, batch []*request) (context.Context, context.CancelFunc) {
	var last time.Time
	for _, r := range batch {
		if r.deadline.IsZero() {
			return base, func() {}
		}
		if r.deadline.After(last) {
			last = r.deadline
		}
	}
	return context.WithDeadline(base, last)
}

// group splits batch into script calls, keeping arrival order within each.
func (f *flusher) group(batch []*request) []*call {
	if f.s.group == groupAll {
		c := f.call(0)
		c.reqs = append(c.reqs, batch...)
		return f.calls[:1]
	}
	clear(f.slots)
	clear(f.tags)
	n := 0
	for _, r := range batch {
		f.buf = appendKey(f.buf[:0], f.s.prefix, r.set, r.key, 0)
		var i int
		var ok bool
		if f.s.group == groupSlot {
			slot := slotOf(f.buf)
			if i, ok = f.slots[slot]; !ok {
				i = n
				f.slots[slot] = i
			}
		} else {
			tag := hashTag(f.buf)
			if i, ok = f.tags[string(tag)]; !ok {
				i = n
				f.tags[string(tag)] = i
			}
		}
		if !ok {
			f.call(i)
			n++
		}
		f.calls[i].reqs = append(f.calls[i].reqs, r)
	}
	return f.calls[:n]
}

// call returns the scratch call i, growing the list as needed.
func (f *flusher) call(i int) *call {
	for len(f.calls) <= i {
		f.calls = append(f.calls, &call{})
	}
	return f.calls[i]
}

// args builds the EVALSHA command of one script call (see
// scripts/prologue.lua for the layout).
func (f *flusher) args(reqs []*request, now any, zoneAt int64) []any {
	s := f.s
	clear(f.sets)
	f.order = f.order[:0]
	f.buf, f.ends = f.buf[:0], f.ends[:0]
	for _, r := range reqs {
		if _, ok := f.sets[r.set]; !ok {
			f.order = append(f.order, r.set)
			f.sets[r.set] = len(f.order)
		}
		for i := range r.set.Len() {
			f.buf = appendKey(f.buf, s.prefix, r.set, r.key, i)
			f.ends = append(f.ends, len(f.buf))
		}
	}
	nkeys := len(f.ends)
	size := 3 + nkeys + 2 + 3*len(reqs)
	for _, set := range f.order {
		size += 1 + 4*set.Len()
	}
	sc := leanScript
	for _, set := range f.order {
		if !lean(set) {
			sc = batchScript
			break
		}
	}
	args := make([]any, 0, size)
	args = append(args, "evalsha", sc.sha, nkeys)
	keys := string(f.buf) // one allocation; the keys are slices of it
	start := 0
	for _, end := range f.ends {
		args = append(args, keys[start:end])
		start = end
	}
	args = append(args, now, len(f.order))
	for _, set := range f.order {
		args = append(args, set.Len())
		for i := range set.Len() {
			args = appendRuleArgs(args, set.At(i), zoneAt)
		}
	}
	for _, r := range reqs {
		args = append(args, r.op, f.sets[r.set], r.cost)
	}
	return args
}

// exec runs the calls and the plain ones, pipelined when there are
// several, and runs again as EVAL (which loads the script) any that met a
// server without the script.
func (s *Store) exec(ctx context.Context, calls []*call, plain []plainCall) {
	s.process(ctx, calls, plain)
	var again []*call
	for _, c := range calls {
		if redis.HasErrorPrefix(c.cmd.Err(), "NOSCRIPT") {
			args := append([]any(nil), c.cmd.Args()...)
			sha, _ := args[1].(string)
			args[0], args[1] = "eval", scriptOf(sha).src
			c.cmd = redis.NewCmd(ctx, args...)
			again = append(again, c)
		}
	}
	if len(again) > 0 {
		s.process(ctx, again, nil)
	}
	if cc, ok := s.client.(*redis.ClusterClient); ok {
		failed := false
		for _, c := range calls {
			failed = failed || c.cmd.Err() != nil && !isReply(c.cmd.Err())
		}
		for _, p := range plain {
			failed = failed || p.incr.Err() != nil && !isReply(p.incr.Err())
		}
		if failed {
			// A node did not answer: it may have failed over. go-redis
			// only reloads its slot map on MOVED or once a minute; ask
			// now, so decisions find a promoted replica in about a
			// second. Reloads are asynchronous and coalesced.
			cc.ReloadState(ctx)
		}
	}
}

// isReply reports whether err is an error reply from Redis, rather than a
// failure to reach it.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

func (s *Store) process(ctx context.Context, calls []*call, plain []plainCall) {
	if len(calls) == 1 && len(plain) == 0 {
		_ = s.client.Process(ctx, scriptCmd{calls[0].cmd})
		return
	}
	_, _ = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range calls {
			_ = p.Process(ctx, scriptCmd{c.cmd})
		}
		for _, c := range plain {
			_ = p.Process(ctx, scriptCmd{c.incr})
			_ = p.Process(ctx, scriptCmd{c.expire})
		}
		return nil
	})
}

// A scriptCmd is a script call that go-redis must not send again after a
// failure (its MaxRetries): a call whose reply was lost to a timeout or a
// broken connection may have run, and running it again would charge its
// decisions twice. go-redis still resends a command it knows it never
// wrote. Marking the command, rather than asking for a client with
// MaxRetries -1, keeps the user's client as it is for their other
// commands.
type scriptCmd struct{ *redis.Cmd }

// NoRetry implements redis.Cmder.
func (scriptCmd) NoRetry() bool { return true }

// errBadReply reports a reply that does not match the script's layout:
// Redis runs a different script under the same SHA-1, or a proxy altered
// the reply.
var errBadReply = errors.New("unexpected reply from the script; is a proxy between the client and redis rewriting replies?")

// complete decodes a call's reply into its requests and hands them back.
func (f *flusher) complete(c *call) {
	vals, err := c.cmd.Slice()
	if err == nil {
		// Check the layout (see scripts/prologue.lua) before handing out
		// any answer.
		o := 0
		for _, r := range c.reqs {
			switch _, failed := at(vals, o).(string); {
			case failed:
				o++
			case r.op == opDecide:
				o += 4 * r.set.Len()
			default:
				o++
			}
		}
		if o != len(vals) {
			err = fmt.Errorf("%w (%d values, want %d)", errBadReply, len(vals), o)
		}
	}
	if err != nil {
		for _, r := range c.reqs {
			r.finish(err)
		}
		return
	}
	o := 0
	for _, r := range c.reqs {
		if msg, failed := vals[o].(string); failed {
			o++
			r.finish(f.s.corrupt(r, msg))
			continue
		}
		if r.op != opDecide {
			o++
			r.finish(nil)
			continue
		}
		for i := range r.set.Len() {
			r.ds[i] = algo.Decision{
				Allowed:    toInt(vals[o]) == 1,
				Remaining:  toInt(vals[o+1]),
				ResetAfter: time.Duration(toInt(vals[o+2])) * time.Microsecond,
				RetryAfter: time.Duration(toInt(vals[o+3])) * time.Microsecond,
			}
			o += 4
		}
		r.finish(nil)
	}
}

// at returns vals[i], or nil past its end.
func at(vals []any, i int) any {
	if i < len(vals) {
		return vals[i]
	}
	return nil
}

// corrupt turns the script's answer "<rule index> <problem>" for r into a
// *CorruptStateError.
func (s *Store) corrupt(r *request, msg string) error {
	return s.corruptKey(r.set, r.key, msg)
}

func toInt(v any) int64 {
	n, _ := v.(int64)
	return n
}
