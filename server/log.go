package server

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
)

// A sampler logs denials: every one at debug level, and at info level at
// most one a second with the number left out since the previous line, so a
// flood of denied requests cannot flood the log. Keys are always written
// redacted (floodgate.RedactKey): they are API keys and addresses.
type sampler struct {
	log        *slog.Logger
	last       atomic.Int64
	suppressed atomic.Uint64
}

func newSampler(l *slog.Logger) *sampler {
	if l == nil {
		l = slog.Default()
	}
	return &sampler{log: l}
}

// denied logs one denial by front end (proxy, check, envoy) of key under
// res; shadow marks a denial that was not enforced.
func (s *sampler) denied(ctx context.Context, front, key string, res *floodgate.Result, shadow bool) {
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

func (s *sampler) attrs(front, key string, res *floodgate.Result, shadow bool) []slog.Attr {
	return []slog.Attr{
		slog.String("front", front),
		slog.String("policy", res.Policy),
		slog.String("key", floodgate.RedactKey(key)),
		slog.String("source", string(res.Source)),
		slog.Duration("retry_after", res.RetryAfter),
		slog.Bool("shadow", shadow),
	}
}

// errorf logs an error at most once a second per sampler, at error level.
type errorLog struct {
	log        *slog.Logger
	last       atomic.Int64
	suppressed atomic.Uint64
}

func (e *errorLog) error(ctx context.Context, msg string, attrs ...slog.Attr) {
	now := time.Now().UnixNano()
	last := e.last.Load()
	if now-last < int64(time.Second) || !e.last.CompareAndSwap(last, now) {
		e.suppressed.Add(1)
		return
	}
	attrs = append(attrs, slog.Uint64("suppressed", e.suppressed.Swap(0)))
	e.log.LogAttrs(ctx, slog.LevelError, msg, attrs...)
}
