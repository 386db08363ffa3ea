package failover

import (
	"context"
	"log/slog"
)

// LogTransitions returns a function for BreakerOptions.OnTransition (of a
// Breaker, or of a Guard through GuardOptions) that logs the breaker's
// transitions on log, so that an operator learns that the
// remote store went away, why the breaker thinks so and what decides
// meanwhile, once per outage: the opening at Warn, with Transition.Reason
// and what mode does ("limiting per instance until Redis is back" for
// LocalFallback); the probes of the outage, and each that fails, at Debug;
// the closing at Info. remote names the remote store in the lines
// ("Redis"); args are attributes of every line, written first, as
// slog.Logger.Log takes them.
func LogTransitions(log *slog.Logger, remote string, mode Mode, args ...any) func(Transition) {
	meanwhile := OutageText(remote, mode)
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
		attrs := append(args[:len(args):len(args)], "from", t.From.String(), "to", t.To.String(), "reason", t.Reason, "detail", what)
		log.Log(context.Background(), level, "circuit breaker "+t.To.String(), attrs...)
	}
}

// OutageText says what mode decides while the remote store named remote
// is down: "limiting per instance until Redis is back" for LocalFallback,
// "allowing every request ..." for FailOpen, "refusing every request ..."
// for FailClosed.
func OutageText(remote string, mode Mode) string {
	what := "limiting per instance"
	switch mode {
	case FailOpen:
		what = "allowing every request"
	case FailClosed:
		what = "refusing every request"
	}
	return what + " until " + remote + " is back"
}
