// Package testkit starts real servers for tests, Examples and demos: a standalone
// redis-server, a Redis Cluster, a Redis Sentinel group and PostgreSQL.
//
// floodgate's promises (exact limits shared by many instances, graceful
// degradation when Redis dies or stalls, a PostgreSQL proxy that keeps the
// session alive) can only be checked against the real servers, so tests start
// them instead of mocking them. Every server:
//
//   - listens on 127.0.0.1 only, on a free port picked at start (a start that
//     loses a race for the port is retried with a new one);
//   - keeps its files in a temporary directory; Redis servers have no
//     persistence, while PostgreSQL keeps every committed transaction across
//     Kill and Restart (but not across an OS crash: fsync is off);
//   - runs in its own process group with a parent-death signal, so it dies
//     with the test binary even if the binary is killed;
//   - is killed and waited for by t.Cleanup.
//
// The package uses only the standard library: readiness is checked by
// speaking RESP or the PostgreSQL startup handshake over raw TCP, so it can be
// imported by any test without pulling in a client library.
//
// # Missing binaries
//
// A server whose binaries are not installed makes the test fail, with a
// message naming the Debian package to install (`make test` installs them).
// CI must never silently skip integration tests. A developer without the
// servers may opt in to skipping with FLOODGATE_ALLOW_SKIP=1; the opt-in is
// ignored when the CI environment variable is set (non-empty), as CI
// services do. Nothing else ever skips: a server that is installed but fails
// to start fails the test.
//
// Binaries are found as follows:
//
//   - redis-server and redis-cli on PATH (Debian package redis-server;
//     Redis 7.0 or newer, for --enable-debug-command and --cluster-port);
//   - PostgreSQL in $FLOODGATE_PG_BINDIR if set, else
//     /usr/lib/postgresql/15/bin, else the newest
//     /usr/lib/postgresql/*/bin, else initdb/postgres/psql on PATH (Debian
//     package postgresql).
//
// # Running as root
//
// postgres and initdb refuse to run as root. When the tests run as root (as
// in CI containers), the cluster's files live in a directory of their own,
// os.TempDir()/floodgate-pg-<pid>-*, rather than in t.TempDir, whose parent
// is private to root. The directory is chowned to the "postgres" OS user
// (or "nobody" if there is no such user), and initdb and postgres are
// started with that user's uid and gid through SysProcAttr.Credential. Using the credential directly, rather than
// runuser/su/setpriv, keeps postgres a direct child of the test binary: the
// parent-death signal is set after the uid switch, so it still applies, and
// Kill can wait for the process itself. psql, a client, runs as the caller.
// Directories left behind by a test binary that died before its cleanups
// (^C, timeout) are removed by the next Postgres call once that pid is gone.
//
// # Goroutines
//
// Methods that take no error return report failures with t.Fatalf, so call
// them from the test goroutine. Functions that return an error (Do,
// RedisDo, Psql) are safe from any goroutine.
package testkit
