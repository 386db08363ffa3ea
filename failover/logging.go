package failover

import (
	"context"
	"log/slog"
)

// LogTransitions returns a function for GuardOptions.OnTransition that logs
// the breaker's transitions on log, so that an operator learns that the
// remote store went away, why the breaker thinks so and what decides
// meanwhile, once per outage: the opening at Warn, with Transition.Reason
// and what mode does ("limiting per instance until Redis is back" for
// LocalFallback); the probes of the outage, and each that fails, at Debug;
// the closing at Info. remote names the remote store in the lines
// ("Redis"); args are further attributes of every line, as slog.Logger.Log
// takes them.
func LogTransitions(log *slog.Logger, remote string, mode Mode, args ...any) func(Transition) {
	meanwhile := mode.meanwhile() + " until " + remote + " is back"
	return func(t Transition) {
		level, what := slog.LevelDebug, meanwhile
		switch {
		case t.From == Closed && t.To == Open:
			level = slog.LevelWarn
		case t.To == HalfOpen:
			what = "one call probes " + remote + "; " + meanwhile
		case t.To == Closed:
			level, what = slog.LevelInfo, remote+" decides again"
		}
		if !log.Enabled(context.Background(), level) {
			return
		}
		attrs := append([]any{"from", t.From.String(), "to", t.To.String(), "reason", t.Reason}, args...)
		log.Log(context.Background(), level, "circuit breaker "+t.To.String(), append(attrs, "detail", what)...)
	}
}

// meanwhile says what the mode decides while the remote store is down.
func (p Mode) meanwhile() string {
	switch p {
	case FailOpen:
		return "allowing every request"
	case FailClosed:
		return "refusing every request"
	}
	return "limiting per instance"
}
