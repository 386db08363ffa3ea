package testkit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Roles every PostgresServer has. The superuser and PostgresTrustUser log in
// without a password over TCP; the others must authenticate with
// PostgresPassword by the method in their name, so a proxy's handling of each
// authentication flow can be tested.
const (
	PostgresSuperuser     = "postgres"
	PostgresTrustUser     = "floodgate_trust"
	PostgresSCRAMUser     = "floodgate_scram"     // scram-sha-256
	PostgresMD5User       = "floodgate_md5"       // md5, with an md5-hashed password
	PostgresCleartextUser = "floodgate_cleartext" // password (sent in clear)
	PostgresPassword      = "floodgate-test-password"
)

// pgHBA: the password users must authenticate; everyone else is trusted, as
// befits a throwaway server reachable only from loopback.
const pgHBA = `# written by floodgate testkit
local all all                                  trust
host  all ` + PostgresSCRAMUser + `     127.0.0.1/32 scram-sha-256
host  all ` + PostgresMD5User + `       127.0.0.1/32 md5
host  all ` + PostgresCleartextUser + ` 127.0.0.1/32 password
host  all all                   127.0.0.1/32 trust
`

// pgSetup creates the roles above. The md5 role's password is stored as an
// md5 hash, because an md5 pg_hba line silently switches to SCRAM for a role
// whose password is stored as SCRAM.
const pgSetup = `
CREATE ROLE ` + PostgresTrustUser + ` LOGIN;
SET password_encryption = 'scram-sha-256';
CREATE ROLE ` + PostgresSCRAMUser + ` LOGIN PASSWORD '` + PostgresPassword + `';
CREATE ROLE ` + PostgresCleartextUser + ` LOGIN PASSWORD '` + PostgresPassword + `';
SET password_encryption = 'md5';
CREATE ROLE ` + PostgresMD5User + ` LOGIN PASSWORD '` + PostgresPassword + `';
`

// PostgresServer is a PostgreSQL server started for one test, with its own
// data directory. It is stopped and its files removed when the test ends.
type PostgresServer struct {
	// Addr is "127.0.0.1:port". It stays the same across Kill and Restart.
	Addr string
	// Port is the port of Addr.
	Port int
	// Dir holds the data directory (Dir/data), the socket directory and the
	// log, postgres.log.
	Dir string

	binDir string
	cred   *syscall.Credential
	server
}

// Postgres initializes a fresh PostgreSQL cluster (initdb, UTF8, C locale)
// and starts it on a free 127.0.0.1 port, waiting until it accepts
// connections. See the package doc for running as root.
//
// fsync and full_page_writes are off: test data need not survive an OS crash
// or a power cut, and skipping the disk flushes makes writes fast. Every
// committed transaction still survives Kill, a crash of the server alone:
// synchronous_commit stays on, so a commit is acknowledged only once its WAL
// is written to the kernel, where it outlives the server's processes. (With
// fsync off, that costs a write system call per commit, not a disk flush;
// synchronous_commit=off would acknowledge commits still held in the
// server's memory, and Kill would lose those of the last wal_writer_delay.)
func Postgres(t testing.TB) *PostgresServer {
	t.Helper()
	binDir := postgresBinDir(t)
	s, err := startPostgres(t, binDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// StartPostgres starts a PostgreSQL server as Postgres does, for programs
// that have no *testing.T: Examples, the demo. Close stops it and removes
// its files. Exec and Restart belong to tests; programs call Psql.
func StartPostgres() (*PostgresServer, error) {
	binDir, err := findPostgresBinDir()
	if err != nil {
		return nil, err
	}
	return startPostgres(nil, binDir)
}

// Close kills the server and removes its files. Postgres's servers are
// closed when their test ends.
func (s *PostgresServer) Close() {
	s.kill()
	_ = os.RemoveAll(s.Dir)
}

// startPostgres initializes and starts a server; t, when not nil, is the
// test it belongs to (for Restart and Exec).
func startPostgres(t testing.TB, binDir string) (*PostgresServer, error) {
	cred, err := postgresCredential()
	if err != nil {
		return nil, err
	}

	// Not t.TempDir: when running as root, the postgres user needs to reach
	// the directory, and t.TempDir's parent is private to root.
	sweepPostgresDirs()
	dir, err := os.MkdirTemp("", pgDirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return nil, fmt.Errorf("testkit: create a directory for PostgreSQL: %v", err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(dir)
		}
	}()
	if err := os.Mkdir(filepath.Join(dir, "sock"), 0o700); err != nil {
		return nil, err
	}
	if cred != nil {
		for _, d := range []string{dir, filepath.Join(dir, "sock")} {
			if err := os.Chown(d, int(cred.Uid), int(cred.Gid)); err != nil {
				return nil, fmt.Errorf("testkit: chown %s to the user postgres runs as: %v", d, err)
			}
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	initdb := exec.CommandContext(ctx, filepath.Join(binDir, "initdb"),
		"-D", filepath.Join(dir, "data"),
		"-U", PostgresSuperuser,
		"--auth=trust",
		"--encoding=UTF8",
		"--locale=C",
		"--no-sync", // the directory is deleted after the test
		"--no-instructions",
	)
	initdb.Dir = dir
	initdb.Env = append(os.Environ(), "TZ=UTC")
	initdb.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("testkit: initdb: %v\n%s", err, tail(string(out), 30))
	}
	if err := os.WriteFile(filepath.Join(dir, "data", "pg_hba.conf"), []byte(pgHBA), 0o600); err != nil {
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(filepath.Join(dir, "data", "pg_hba.conf"), int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}

	var s *PostgresServer
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(1)
		if err != nil {
			return nil, err
		}
		s = newPostgresServer(t, binDir, cred, ports[0], dir)
		err = s.start()
		if err == nil {
			break
		}
		if errors.Is(err, errPortInUse) && attempt < startAttempts {
			if t != nil {
				t.Logf("testkit: %s lost a race for its port, retrying with a new port", s.name)
			}
			continue
		}
		return nil, err
	}
	if _, err := s.Psql(s.DSN(PostgresSuperuser, "postgres"), pgSetup); err != nil {
		s.kill()
		return nil, fmt.Errorf("testkit: create test roles: %v", err)
	}
	ok = true
	return s, nil
}

// pgDirPrefix starts the name of each server's directory, followed by the
// pid of the test binary that owns it.
const pgDirPrefix = "floodgate-pg-"

// sweepPostgresDirs removes the directories of test binaries that died
// without running their cleanups (interrupted with ^C, killed on timeout):
// each holds a ~40 MB data directory. A directory whose owner still runs, or
// whose pid was reused, is left alone.
func sweepPostgresDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), pgDirPrefix+"*"))
	for _, d := range dirs {
		pidStr, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(d), pgDirPrefix), "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(d)
		}
	}
}

// postgresBinDir finds the directory holding initdb, postgres and psql,
// failing t (or skipping it, as RequireBinary does) when there is none.
func postgresBinDir(t testing.TB) string {
	t.Helper()
	d, err := findPostgresBinDir()
	if errors.Is(err, errNoPostgres) {
		missing(t, "PostgreSQL server binaries (initdb, postgres, psql in /usr/lib/postgresql/*/bin, on PATH, or in $FLOODGATE_PG_BINDIR)", "postgresql")
	} else if err != nil {
		t.Fatal(err)
	}
	return d
}

var errNoPostgres = errors.New("testkit: PostgreSQL server binaries not found (initdb, postgres, psql in /usr/lib/postgresql/*/bin, on PATH, or in $FLOODGATE_PG_BINDIR): install the Debian package postgresql (make test does it)")

// findPostgresBinDir finds the directory holding initdb, postgres and psql.
func findPostgresBinDir() (string, error) {
	has := func(dir string) bool {
		for _, b := range []string{"initdb", "postgres", "psql"} {
			if st, err := os.Stat(filepath.Join(dir, b)); err != nil || st.IsDir() {
				return false
			}
		}
		return true
	}
	if d := os.Getenv("FLOODGATE_PG_BINDIR"); d != "" {
		if !has(d) {
			return "", fmt.Errorf("testkit: FLOODGATE_PG_BINDIR=%s does not contain initdb, postgres and psql", d)
		}
		return d, nil
	}
	if d := "/usr/lib/postgresql/15/bin"; has(d) {
		return d, nil
	}
	// Debian installs each major version side by side; take the newest.
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	for _, d := range dirs {
		if has(d) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil && has(filepath.Dir(p)) {
		return filepath.Dir(p), nil
	}
	return "", errNoPostgres
}

// postgresCredential returns whom to run initdb and postgres as: nil (the
// caller) unless the caller is root, which they refuse; then the "postgres"
// user, or "nobody" where there is none.
func postgresCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New(`testkit: running as root, and PostgreSQL refuses to run as root, but there is no "postgres" or "nobody" user to run it as: create one (the Debian package postgresql does) or run the tests as a normal user`)
}

func newPostgresServer(t testing.TB, binDir string, cred *syscall.Credential, port int, dir string) *PostgresServer {
	s := &PostgresServer{Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, Dir: dir, binDir: binDir, cred: cred}
	s.t, s.name = t, fmt.Sprintf("postgres on %d", port)
	s.spawn = func() (*process, error) {
		args := []string{
			"-D", filepath.Join(s.Dir, "data"),
			"-p", strconv.Itoa(s.Port),
			"-k", filepath.Join(s.Dir, "sock"),
			"-c", "listen_addresses=127.0.0.1",
			"-c", "fsync=off",
			"-c", "full_page_writes=off",
			"-c", "logging_collector=off",
		}
		return startProcess(s.name, filepath.Join(s.binDir, "postgres"), args, s.Dir, filepath.Join(s.Dir, "postgres.log"), s.cred)
	}
	pidFile := filepath.Join(s.Dir, "data", "postmaster.pid")
	s.ready = func(p *process) error {
		// postmaster.pid says "ready" once the server accepts connections
		// (pg_ctl waits for the same line); checking the pid in it makes
		// sure it is our server answering, not another one that grabbed the
		// port while ours was failing to bind it.
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return err
		}
		lines := strings.Split(string(b), "\n")
		if len(lines) < 8 || strings.TrimSpace(lines[0]) != strconv.Itoa(p.cmd.Process.Pid) || strings.TrimSpace(lines[7]) != "ready" {
			return fmt.Errorf("postmaster.pid does not say pid %d is ready yet", p.cmd.Process.Pid)
		}
		return pgPing(s.Addr)
	}
	// SIGQUIT is PostgreSQL's immediate shutdown (what pg_ctl stop -m
	// immediate sends): no checkpoint, backends end at once. SIGINT is its
	// fast shutdown: sessions end cleanly and a checkpoint is written. The
	// postmaster is a direct child, so the signals are sent to it rather
	// than through pg_ctl, which would have to run as the postgres user.
	s.crash = shutdown{sig: syscall.SIGQUIT, grace: 5 * time.Second}
	s.halt = shutdown{sig: syscall.SIGINT, grace: 30 * time.Second}
	return s
}

// Kill shuts the server down immediately (SIGQUIT, as pg_ctl stop -m
// immediate): clients lose their sessions and nothing is flushed, as in a
// crash, and the next start runs crash recovery. Every transaction whose
// commit was acknowledged before Kill is there after Restart, unless its
// session turned synchronous_commit off.
func (s *PostgresServer) Kill() { s.kill() }

// Stop shuts the server down in fast mode (SIGINT, as pg_ctl stop -m fast):
// sessions are ended cleanly and a checkpoint is written.
func (s *PostgresServer) Stop() { s.stop() }

// Running reports whether the postmaster is alive.
func (s *PostgresServer) Running() bool { return s.running() }

// Restart starts the server again on the same port with the same data,
// stopping it immediately first if it is running, and waits until it accepts
// connections. Call it from the test goroutine.
func (s *PostgresServer) Restart() { s.restart() }

// DSN returns a postgres:// URL for user and database db over TCP, without
// TLS (the server has none). For the password roles use DSNWithPassword.
func (s *PostgresServer) DSN(user, db string) string {
	return s.dsn(url.User(user), db)
}

// DSNWithPassword is DSN with a password, for PostgresSCRAMUser,
// PostgresMD5User and PostgresCleartextUser (password PostgresPassword).
func (s *PostgresServer) DSNWithPassword(user, password, db string) string {
	return s.dsn(url.UserPassword(user, password), db)
}

func (s *PostgresServer) dsn(u *url.Userinfo, db string) string {
	return (&url.URL{
		Scheme:   "postgres",
		User:     u,
		Host:     s.Addr,
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}).String()
}

// Exec runs sql as the superuser in database "postgres" and returns the
// output rows, one per line with columns separated by "|". It fails the test
// on any error. Call it from the test goroutine.
func (s *PostgresServer) Exec(sql string) string {
	s.t.Helper()
	out, err := s.Psql(s.DSN(PostgresSuperuser, "postgres"), sql)
	if err != nil {
		s.t.Fatal(err)
	}
	return out
}

// Psql runs sql with psql against dsn (any server, not only this one),
// stopping at the first error, and returns the output rows, one per line
// with columns separated by "|", without headers or a trailing newline. The
// error includes psql's message, such as the SQLSTATE-bearing ERROR line. It
// is safe from any goroutine.
func (s *PostgresServer) Psql(dsn, sql string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(s.binDir, "psql"),
		"-X", // ignore ~/.psqlrc
		"--no-align", "--tuples-only", "--quiet",
		"--set", "ON_ERROR_STOP=1",
		"--file", "-",
		dsn,
	)
	cmd.Stdin = strings.NewReader(sql)
	cmd.Env = append(os.Environ(), "PGCONNECT_TIMEOUT=5", "PGAPPNAME=floodgate-testkit")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("testkit: psql %s: %v: %s", redactDSN(dsn), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimRight(stdout.String(), "\n"), nil
}

func redactDSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable DSN)"
	}
	return u.Redacted()
}

// pgPing succeeds once the server completes a startup handshake as the
// superuser. "The database system is starting up" (SQLSTATE 57P03) and
// refused connections count as not ready.
func pgPing(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))

	var params []byte
	for _, kv := range []string{"user", PostgresSuperuser, "database", "postgres"} {
		params = append(append(params, kv...), 0)
	}
	params = append(params, 0)
	msg := binary.BigEndian.AppendUint32(nil, uint32(8+len(params)))
	msg = binary.BigEndian.AppendUint32(msg, 3<<16) // protocol 3.0
	msg = append(msg, params...)
	if _, err := conn.Write(msg); err != nil {
		return err
	}

	r := bufio.NewReader(conn)
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return fmt.Errorf("read startup reply: %w", err)
		}
		n := int(binary.BigEndian.Uint32(hdr[1:])) - 4
		if n < 0 || n > 1<<20 {
			return fmt.Errorf("bad message length %d", n)
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			return fmt.Errorf("read startup reply: %w", err)
		}
		switch hdr[0] {
		case 'R': // authentication request: 0 means done
			if len(body) < 4 || binary.BigEndian.Uint32(body) != 0 {
				return errors.New("server asks the superuser for a password; pg_hba.conf should trust it")
			}
		case 'E':
			return fmt.Errorf("server error: %s", pgErrorText(body))
		case 'Z': // ReadyForQuery
			_, _ = conn.Write([]byte{'X', 0, 0, 0, 4}) // Terminate
			return nil
		}
	}
}

// pgErrorText renders an ErrorResponse's SQLSTATE and message.
func pgErrorText(body []byte) string {
	var code, msg string
	for len(body) > 0 && body[0] != 0 {
		field := body[0]
		v, rest, _ := bytes.Cut(body[1:], []byte{0})
		body = rest
		switch field {
		case 'C':
			code = string(v)
		case 'M':
			msg = string(v)
		}
	}
	return code + " " + msg
}
