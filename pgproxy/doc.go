// Package pgproxy is a PostgreSQL proxy that limits the rate of queries,
// globally, per user and per client address, on floodgate's engines: limits
// kept in Redis hold across every proxy that shares them.
//
// Each client connection is paired with a connection to one upstream
// server. Authentication (trust, password, md5, SCRAM-SHA-256) passes
// through untouched: the proxy forwards the raw messages and never decodes
// them. The proxy may terminate TLS for clients (Config.TLS), speak TLS to
// the server (Config.UpstreamTLS), or both; since SCRAM channel binding
// (scram-sha-256-plus) binds the client's TLS session to the server's, it
// cannot pass a proxy that terminates TLS, and clients must not require it
// (channel_binding=require fails; the default, prefer, falls back to plain
// SCRAM).
//
// # What is charged
//
// One unit per simple Query (and FunctionCall), and one per extended-protocol
// cycle (the messages up to a Sync) that holds an Execute, charged at the
// cycle's first message. A cycle without an Execute, such as a Prepare's
// Parse/Describe/Sync, is free; a cycle whose Sync the client has not sent
// yet when it starts is charged, as it almost always executes something.
// Queries inside a transaction block are never charged nor refused: the
// statement that opens the transaction is, so a transaction is never cut in
// half. Empty queries (the "-- ping" and ";" of connection pools) are free
// unless Config.ChargeEmptyQuery is set.
//
// The checks run in the order global → per user → per client address and
// are all or nothing (floodgate.AllowAll): a query refused per address is
// refunded to the global and per-user limits.
//
// # What clients see
//
// A refused query is answered, without reaching the server, with an
// ErrorResponse (severity ERROR, SQLSTATE 53400 configuration_limit_exceeded,
// message "rate limit exceeded", a detail naming the scope and when to
// retry, and a hint), then ReadyForQuery; the session goes on. A scope with
// a MaxWait makes a query wait in line instead: queries waiting under one
// limit are charged in arrival order, each when its turn comes, and one
// whose turn cannot come within MaxWait is refused. A CancelRequest ends
// such a wait (SQLSTATE 57014) as it would end a running query. A
// connection refused by ConnLimits gets FATAL 53300 before it
// authenticates. Queries are charged only once the server has
// authenticated the session.
//
// A client that breaks the protocol is answered FATAL 08P01 with what was
// wrong, then closed. Package pgwire holds the protocol's framing and the
// few messages the proxy reads and writes; package proxyproto reads the
// PROXY protocol header a trusted load balancer may send first.
//
// # Relaying
//
// On Linux, once the server has a plain-TCP session's StartupMessage, the
// session is relayed by an epoll loop (half of GOMAXPROCS, at least one)
// over non-blocking sockets: no goroutine per connection, one read and one write per
// readiness event, no allocation per message. A decision that may block (a
// limiter not declared Limits.Local, a wait under MaxWait or for a
// concurrent-query slot) parks the session while a goroutine decides;
// the loop goes on with the others. Sessions with TLS on either side, and
// every session on other platforms, are relayed by two goroutines each.
// Both relays frame and decide through the same code.
//
// # Operating
//
// SetLimits swaps the limits atomically without dropping a connection. The
// Proxy reports what it does to Config.Observer; metrics.NewPostgres is the
// Prometheus one, so this package imports no Prometheus. Idle
// per-key state is dropped by the engines, so the proxy keeps no registry
// of keys itself.
package pgproxy
