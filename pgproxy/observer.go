package pgproxy

import "time"

// An Observer is told what a Proxy does, for metrics (metrics.NewPostgres
// returns one that exports Prometheus metrics, so this package imports no
// Prometheus). Its methods run on the connections' goroutines, some for
// every query and every chunk relayed, and must be quick and safe for
// concurrent use. One Observer may watch several Proxies.
type Observer interface {
	// QueryChecked reports a query checked under level l: Allowed for
	// every level with a limiter when all passed it, Denied or Failed
	// (the check failed, and the query was refused) for the one level
	// that refused it.
	QueryChecked(l Level, o QueryOutcome)
	// QueryUncharged reports a query passed without a charge, and why.
	QueryUncharged(r UnchargedReason)
	// WaitStarted and WaitEnded bracket a query's wait under level l's
	// MaxWait. A query refused at once under a level with a MaxWait, as
	// it could not pass within it, is a WaitStarted followed by WaitEnded
	// with WaitRejected and no time waited.
	WaitStarted()
	WaitEnded(l Level, o WaitOutcome, waited time.Duration)
	// ClientConnected and ClientDisconnected bracket a client connection.
	ClientConnected()
	ClientDisconnected()
	// ConnectionDenied reports a new connection refused by a connection
	// limit of level l (LevelUser or LevelIP), or by its failure.
	ConnectionDenied(l Level)
	// UpstreamError reports a failure to connect (TLS included) or write
	// the startup to the upstream server, for a client or a
	// CancelRequest.
	UpstreamError()
	// Malformed reports a client connection closed for breaking the
	// protocol (a malformed or oversized message, a bad PROXY header).
	Malformed()
	// CancelRequest reports a CancelRequest received, by its result.
	CancelRequest(r CancelResult)
	// ConcurrentQueryRefused reports a query refused because its user had
	// Limits.ConcurrentQueries in flight (after any wait).
	ConcurrentQueryRefused()
	// Relayed reports n bytes relayed in direction d.
	Relayed(d Direction, n int)
}

// A Level is a level of limits, in the order the proxy checks them.
type Level uint8

// The levels.
const (
	LevelGlobal Level = iota // Limits.Global
	LevelUser                // Limits.PerUser, ConnLimits.PerUser
	LevelIP                  // Limits.PerIP, ConnLimits.PerIP
)

// String is the level's name in metrics and logs: global, user or ip.
func (l Level) String() string {
	switch l {
	case LevelGlobal:
		return "global"
	case LevelUser:
		return "user"
	case LevelIP:
		return "ip"
	}
	return "none"
}

// A QueryOutcome is what a level's check made of a query.
type QueryOutcome uint8

// The outcomes.
const (
	Allowed QueryOutcome = iota // every level passed the query
	Denied                      // this level refused it
	Failed                      // this level could not decide, and the query was refused
)

// String is the outcome's name in metrics (the decision label): allowed,
// denied or error.
func (o QueryOutcome) String() string {
	switch o {
	case Allowed:
		return "allowed"
	case Denied:
		return "denied"
	case Failed:
		return "error"
	}
	return "unknown"
}

// An UnchargedReason says why a query passed without a charge.
type UnchargedReason uint8

// The reasons.
const (
	UnchargedTransaction UnchargedReason = iota // inside a transaction block
	UnchargedEmpty                              // an empty query (a pool's ping)
	UnchargedReplication                        // a replication connection under ReplicationExempt
)

// String is the reason's name in metrics: transaction, empty or
// replication.
func (r UnchargedReason) String() string {
	switch r {
	case UnchargedTransaction:
		return "transaction"
	case UnchargedEmpty:
		return "empty"
	case UnchargedReplication:
		return "replication"
	}
	return "unknown"
}

// A WaitOutcome says how a query's wait under MaxWait ended.
type WaitOutcome uint8

// The outcomes.
const (
	WaitPassed   WaitOutcome = iota // the query passed
	WaitRejected                    // it could not pass within MaxWait
	WaitCanceled                    // a CancelRequest, or the client leaving, ended it
)

// String is the outcome's name in metrics: passed, rejected or canceled.
func (o WaitOutcome) String() string {
	switch o {
	case WaitPassed:
		return "passed"
	case WaitRejected:
		return "rejected"
	case WaitCanceled:
		return "canceled"
	}
	return "unknown"
}

// A CancelResult is what became of a CancelRequest.
type CancelResult uint8

// The results.
const (
	CancelForwarded  CancelResult = iota // sent to the server
	CancelUnknownKey                     // no connection holds its key
	CancelFailed                         // the server could not be reached
)

// String is the result's name in metrics: forwarded, unknown_key or
// failed.
func (r CancelResult) String() string {
	switch r {
	case CancelForwarded:
		return "forwarded"
	case CancelUnknownKey:
		return "unknown_key"
	case CancelFailed:
		return "failed"
	}
	return "unknown"
}

// A Direction is the way bytes are relayed.
type Direction uint8

// The directions.
const (
	ClientToServer Direction = iota
	ServerToClient
)

// String is the direction's name in metrics: client_to_server or
// server_to_client.
func (d Direction) String() string {
	if d == ClientToServer {
		return "client_to_server"
	}
	return "server_to_client"
}

// nopObserver is the Observer of a Config without one.
type nopObserver struct{}

func (nopObserver) QueryChecked(Level, QueryOutcome)            {}
func (nopObserver) QueryUncharged(UnchargedReason)              {}
func (nopObserver) WaitStarted()                                {}
func (nopObserver) WaitEnded(Level, WaitOutcome, time.Duration) {}
func (nopObserver) ClientConnected()                            {}
func (nopObserver) ClientDisconnected()                         {}
func (nopObserver) ConnectionDenied(Level)                      {}
func (nopObserver) UpstreamError()                              {}
func (nopObserver) Malformed()                                  {}
func (nopObserver) CancelRequest(CancelResult)                  {}
func (nopObserver) ConcurrentQueryRefused()                     {}
func (nopObserver) Relayed(Direction, int)                      {}
