package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
)

// Reservations are script calls of their own, one per reservation, not
// batched: a waiting caller is about to sleep, and one round trip decides
// its place in the line of every instance sharing the Redis. The keys of
// one set share a hash tag, so on a Cluster the call goes to one node.
const (
	opReserve = 1
	opCancel  = 2
)

// errLate is the answer of a reservation script that Redis ran after the
// caller's context had ended, and that charged nothing.
var errLate = errors.New("the reservation ran in Redis after the request's deadline, by Redis's clock, and charged nothing")

// Reserve implements floodgate.Store: one atomic script call books cost
// units under every limit of set for the earliest instant they all fit,
// on Redis's clock, if it is at most maxWait away (algo.Set.Reserve's
// twin, in microseconds). Waiting callers of every instance share one
// line.
//
// The script also carries the instant the call's context ends (its
// deadline, or Options.Timeout), and charges nothing when Redis runs it at
// or after that instant on its clock: a call that Redis held (a long
// script, a stall) until its caller gave up is not charged when Redis gets
// to it. That error wraps floodgate.ErrWaitDeadline and
// context.DeadlineExceeded (only the latter for Options.Timeout). The
// instant is this process's wall clock, so it is as exact as the two
// clocks agree: with Redis's clock δ ahead, a call arriving within δ of
// the deadline is refused so; δ behind, one running up to δ after the
// deadline is charged. A call whose answer was on its way back when the
// deadline came has been charged.
func (s *Store) Reserve(ctx context.Context, set *algo.Set, key string, cost int64, maxWait time.Duration) (algo.Verdict, algo.Ticket, error) {
	w := set.MaxWait(int64(maxWait)) / int64(time.Microsecond)
	_, caller := ctx.Deadline()
	vals, err := s.runReserve(ctx, "reserve", set, key, opReserve, cost, w, nil)
	if err != nil {
		return algo.Verdict{}, algo.Ticket{}, err
	}
	if len(vals) == 2 && toInt(vals[1]) == 2 {
		if caller {
			return algo.Verdict{}, algo.Ticket{}, &Error{Op: "reserve", Err: fmt.Errorf("%w: %w (%w)", floodgate.ErrWaitDeadline, errLate, context.DeadlineExceeded)}
		}
		return algo.Verdict{}, algo.Ticket{}, &Error{Op: "reserve", Err: fmt.Errorf("%w (Options.Timeout): %w", errLate, context.DeadlineExceeded)}
	}
	n := set.Len()
	if len(vals) != 2+5*n {
		return algo.Verdict{}, algo.Ticket{}, &Error{Op: "reserve", Err: fmt.Errorf("%w (%d values, want %d)", errBadReply, len(vals), 2+5*n)}
	}
	now := toInt(vals[0])
	allowed := toInt(vals[1]) == 1
	var ds [algo.MaxTransitions]algo.Decision
	var t algo.Ticket
	for i := range n {
		o := 2 + 5*i
		ds[i] = algo.Decision{
			Allowed:    allowed,
			Remaining:  toInt(vals[o]),
			ResetAfter: time.Duration(toInt(vals[o+1])) * time.Microsecond,
			RetryAfter: time.Duration(toInt(vals[o+2])) * time.Microsecond,
		}
		t.Next[i], t.Prev[i] = toInt(vals[o+3])*1e3, toInt(vals[o+4])*1e3
	}
	v := set.CombineReserve(ds[:n], Source)
	if allowed {
		t.At = now*1e3 + int64(v.RetryAfter)
	}
	return v, t, nil
}

// Cancel implements floodgate.Store (algo.Transition.Unreserve's twin).
func (s *Store) Cancel(ctx context.Context, set *algo.Set, key string, cost int64, t algo.Ticket) error {
	n := set.Len()
	states := make([]int64, 0, 2*n)
	for i := range n {
		states = append(states, t.Next[i], t.Prev[i])
	}
	_, err := s.runReserve(ctx, "cancel", set, key, opCancel, cost, t.At/1e3, states)
	return err
}

// runReserve makes one reservation script call and returns its reply.
func (s *Store) runReserve(ctx context.Context, op string, set *algo.Set, key string, code, cost, w int64, nexts []int64) ([]any, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, &Error{Op: op, Err: ErrClosed}
	}
	if !set.Reservable() {
		return nil, &Error{Op: op, Err: fmt.Errorf("policy %s has a window limit, which cannot be reserved ahead; decide it", set.Policy())}
	}
	if _, ok := ctx.Deadline(); !ok && s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	// deadline: the instant (µs, the script's clock) from which the script
	// charges nothing, the context's end; 0 for none and for a cancel.
	var deadline int64
	if d, ok := ctx.Deadline(); ok && code == opReserve {
		deadline = max(d.UnixMicro(), 1)
		if s.clock != nil {
			// A pinned clock's now is taken here, so the script runs on time.
			deadline = max(s.clock.UnixNano()/1e3+time.Until(d).Microseconds(), 1)
		}
	}
	n := set.Len()
	args := make([]any, 0, 3+n+6+3*n+len(nexts))
	args = append(args, "evalsha", reserveScript.sha, n)
	for i := range n {
		args = append(args, Key(s.prefix, set, key, i))
	}
	var now any = ""
	if s.clock != nil {
		now = s.clock.UnixNano() / 1e3
	}
	args = append(args, now, code, cost, w, deadline, n)
	for i := range n {
		r := set.At(i)
		iv := intervalMicros(r.Spec())
		args = append(args, iv, r.Capacity(), r.Capacity()*iv)
	}
	for _, nx := range nexts {
		args = append(args, nx/1e3)
	}
	cmd := redis.NewCmd(ctx, args...)
	_ = s.client.Process(ctx, scriptCmd{cmd})
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		args[0], args[1] = "eval", reserveScript.src
		cmd = redis.NewCmd(ctx, args...)
		_ = s.client.Process(ctx, scriptCmd{cmd})
	}
	if err := cmd.Err(); err != nil {
		return nil, &Error{Op: op, Err: err}
	}
	switch v := cmd.Val().(type) {
	case []any:
		return v, nil
	case int64:
		return nil, nil
	case string:
		return nil, &Error{Op: op, Err: s.corruptKey(set, key, v)}
	}
	return nil, &Error{Op: op, Err: fmt.Errorf("%w (%T)", errBadReply, cmd.Val())}
}

// corruptKey turns the script's answer "<rule index> <problem>" into a
// *CorruptStateError.
func (s *Store) corruptKey(set *algo.Set, key, msg string) error {
	idx, problem, _ := strings.Cut(msg, " ")
	i, err := strconv.Atoi(idx)
	if err != nil || i < 0 || i >= set.Len() || problem == "" {
		return fmt.Errorf("%w (%q)", errBadReply, msg)
	}
	return &CorruptStateError{
		Key:      Key(s.prefix, set, key, i),
		Problem:  problem,
		redacted: string(appendKey(nil, s.prefix, set, "…", i)),
	}
}
