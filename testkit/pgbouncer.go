package testkit

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// PgBouncerServer is a pgbouncer started for one test in front of a
// PostgresServer, for comparisons with floodgate's PostgreSQL proxy. It is
// stopped and its files removed when the test ends.
type PgBouncerServer struct {
	// Addr is "127.0.0.1:port".
	Addr string
	// Port is the port of Addr.
	Port int
	// Dir holds pgbouncer.ini, the auth file and the log, pgbouncer.log.
	Dir string

	proc *process
}

// PgBouncer starts pgbouncer on a free loopback port in front of pg, in
// poolMode ("session", "transaction" or "statement"), and waits until it
// relays a startup handshake. Every role of PostgresServer may connect
// without a password (auth_type trust; the server then authenticates the
// pooled connection as it would a direct one). Like PostgreSQL, pgbouncer
// refuses to run as root, so as root it runs as the user PostgreSQL runs as.
func PgBouncer(t testing.TB, pg *PostgresServer, poolMode string) *PgBouncerServer {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/pgbouncer"); serr != nil {
			missing(t, "pgbouncer (on PATH or /usr/sbin/pgbouncer)", "pgbouncer")
			return nil
		}
		bin = "/usr/sbin/pgbouncer"
	}
	cred, err := postgresCredential()
	if err != nil {
		t.Fatal(err)
	}
	// Not t.TempDir, for the same reason as the server's: the unprivileged
	// user must reach it.
	dir, err := os.MkdirTemp("", "floodgate-pgbouncer-")
	if err != nil {
		t.Fatalf("testkit: create a directory for pgbouncer: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })

	var userlist string
	for _, u := range []string{PostgresSuperuser, PostgresTrustUser, PostgresSCRAMUser, PostgresMD5User, PostgresCleartextUser} {
		userlist += strconv.Quote(u) + ` ""` + "\n"
	}
	files := map[string]string{"userlist.txt": userlist}
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(1)
		if err != nil {
			t.Fatal(err)
		}
		files["pgbouncer.ini"] = fmt.Sprintf(`; written by floodgate testkit
[databases]
* = host=127.0.0.1 port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
max_client_conn = 500
default_pool_size = 100
ignore_startup_parameters = extra_float_digits,options
server_login_retry = 1
`, pg.Port, ports[0], filepath.Join(dir, "userlist.txt"), poolMode)
		for name, content := range files {
			path := filepath.Join(dir, name)
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			if cred != nil {
				if err := os.Chown(path, int(cred.Uid), int(cred.Gid)); err != nil {
					t.Fatal(err)
				}
			}
		}
		if cred != nil {
			if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
				t.Fatal(err)
			}
		}
		s := &PgBouncerServer{Addr: "127.0.0.1:" + strconv.Itoa(ports[0]), Port: ports[0], Dir: dir}
		p, err := startProcess(fmt.Sprintf("pgbouncer on %d", ports[0]), bin, []string{filepath.Join(dir, "pgbouncer.ini")}, dir, filepath.Join(dir, "pgbouncer.log"), cred)
		if err != nil {
			t.Fatal(err)
		}
		err = p.waitReady(func() error { return pgPing(s.Addr) })
		if err == nil {
			s.proc = p
			t.Cleanup(func() { p.stop(syscall.SIGINT, 5*time.Second) })
			return s
		}
		p.kill()
		if errors.Is(err, errPortInUse) && attempt < startAttempts {
			continue
		}
		t.Fatal(err)
	}
}

// DSN returns a postgres:// URL for user and database db through
// pgbouncer.
func (s *PgBouncerServer) DSN(user, db string) string {
	return "postgres://" + user + "@" + s.Addr + "/" + db + "?sslmode=disable"
}

// Pid returns the process ID of pgbouncer, e.g. to read its CPU time in
// /proc.
func (s *PgBouncerServer) Pid() int { return s.proc.cmd.Process.Pid }
