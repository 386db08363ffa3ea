// Package denylog is the front ends' logging of denials and errors: every
// denial at debug level, at most one a second at info level, and errors at
// most one a second, so that a flood of refused requests or a dead engine
// cannot flood the log.
package denylog

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
)

// A Sampler logs denials: every one at debug level, and at info level at
// most one a second with the number left out since the previous line, so a
// flood of denied requests cannot flood the log. Keys are written redacted
// (floodgate.RedactKey), since they are API keys and addresses, unless the
// operator asked for them as they are (admin.raw_keys).
type Sampler struct {
	log        *slog.Logger
	raw        bool
	last       atomic.Int64
	suppressed atomic.Uint64
}

// New returns a Sampler logging to l (slog.Default() when nil), keys as
// they are when raw, else redacted.
func New(l *slog.Logger, raw bool) *Sampler {
	if l == nil {
		l = slog.Default()
	}
	return &Sampler{log: l, raw: raw}
}

// Logger is the logger the Sampler writes to.
func (s *Sampler) Logger() *slog.Logger { return s.log }

// Denied logs one denial by front end (proxy, check, envoy) of key under
// res; shadow marks a denial that was not enforced.
func (s *Sampler) Denied(ctx context.Context, front, key string, res *floodgate.Result, shadow bool) {
	debug := s.log.Enabled(ctx, slog.LevelDebug)
	now := time.Now().UnixNano()
	last := s.last.Load()
	info := now-last >= int64(time.Second) && s.last.CompareAndSwap(last, now)
	if !info {
		if !debug {
			s.suppressed.Add(1)
			return
		}
		s.log.LogAttrs(ctx, slog.LevelDebug, "request denied", s.attrs(front, key, res, shadow)...)
		s.suppressed.Add(1)
		return
	}
	attrs := append(s.attrs(front, key, res, shadow), slog.Uint64("suppressed", s.suppressed.Swap(0)))
	s.log.LogAttrs(ctx, slog.LevelInfo, "request denied", attrs...)
}

func (s *Sampler) attrs(front, key string, res *floodgate.Result, shadow bool) []slog.Attr {
	if !s.raw {
		key = floodgate.RedactKey(key)
	}
	return []slog.Attr{
		slog.String("front", front),
		slog.String("policy", res.Policy),
		slog.String("key", key),
		slog.String("source", string(res.Source)),
		slog.Duration("retry_after", res.RetryAfter),
		slog.Bool("shadow", shadow),
	}
}

// An Errors logs errors at error level (or Level), at most one a second,
// with the number left out since the previous line. Its zero value is ready
// once Log is set.
type Errors struct {
	// Log receives the lines.
	Log *slog.Logger

	// Level is the lines' level; nil means slog.LevelError. The faults of
	// clients, which the operator cannot fix, are logged lower.
	Level slog.Leveler

	last       atomic.Int64
	suppressed atomic.Uint64
}

// Error logs msg unless another line was written within the last second.
func (e *Errors) Error(ctx context.Context, msg string, attrs ...slog.Attr) {
	now := time.Now().UnixNano()
	last := e.last.Load()
	if now-last < int64(time.Second) || !e.last.CompareAndSwap(last, now) {
		e.suppressed.Add(1)
		return
	}
	attrs = append(attrs, slog.Uint64("suppressed", e.suppressed.Swap(0)))
	level := slog.LevelError
	if e.Level != nil {
		level = e.Level.Level()
	}
	e.Log.LogAttrs(ctx, level, msg, attrs...)
}
