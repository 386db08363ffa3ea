package testkit

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

func TestPostgres(t *testing.T) {
	t.Parallel()
	start := time.Now()
	pg := Postgres(t)
	t.Logf("PostgreSQL ready in %v at %s", time.Since(start), pg.Addr)

	if got := pg.Exec("SELECT 1 + 1"); got != "2" {
		t.Fatalf("SELECT 1 + 1 = %q", got)
	}
	if got := pg.Exec("SHOW listen_addresses"); got != "127.0.0.1" {
		t.Fatalf("listen_addresses = %q", got)
	}
	pg.Exec("CREATE TABLE t (id int PRIMARY KEY, v text); INSERT INTO t VALUES (1, 'a'), (2, 'b')")
	if got := pg.Exec("SELECT id, v FROM t ORDER BY id"); got != "1|a\n2|b" {
		t.Fatalf("rows = %q", got)
	}
	if _, err := pg.Psql(pg.DSN(PostgresSuperuser, "postgres"), "SELECT * FROM nosuchtable"); err == nil || !strings.Contains(err.Error(), "nosuchtable") {
		t.Fatalf("error for a missing table = %v, want psql's message", err)
	}

	// Each role authenticates the way its name says.
	if got, err := pg.Psql(pg.DSN(PostgresTrustUser, "postgres"), "SELECT current_user"); err != nil || got != PostgresTrustUser {
		t.Fatalf("trust user: %q, %v", got, err)
	}
	for _, u := range []string{PostgresSCRAMUser, PostgresMD5User, PostgresCleartextUser} {
		if got, err := pg.Psql(pg.DSNWithPassword(u, PostgresPassword, "postgres"), "SELECT current_user"); err != nil || got != u {
			t.Errorf("%s with the right password: %q, %v", u, got, err)
		}
		if _, err := pg.Psql(pg.DSNWithPassword(u, "wrong", "postgres"), "SELECT 1"); err == nil || !strings.Contains(err.Error(), "password authentication failed") {
			t.Errorf("%s with a wrong password: err = %v, want password authentication failed", u, err)
		}
	}
	if got := pg.Exec("SELECT rolname, split_part(rolpassword, '$', 1) FROM pg_authid WHERE rolname LIKE 'floodgate%' ORDER BY 1"); !strings.Contains(got, PostgresMD5User+"|md5") ||
		!strings.Contains(got, PostgresSCRAMUser+"|SCRAM-SHA-256") {
		t.Fatalf("stored password kinds:\n%s\nwant md5 for %s and SCRAM for %s", got, PostgresMD5User, PostgresSCRAMUser)
	}

	// Kill is a crash; committed data survives it (the WAL is replayed) and
	// the server comes back on the same address.
	addr := pg.Addr
	pg.Kill()
	if pg.Running() {
		t.Fatal("Running after Kill")
	}
	if err := pgPing(pg.Addr); err == nil {
		t.Fatal("server answers after Kill")
	}
	pg.Restart()
	if pg.Addr != addr {
		t.Fatalf("Addr changed on Restart: %s -> %s", addr, pg.Addr)
	}
	if got := pg.Exec("SELECT count(*) FROM t"); got != "2" {
		t.Fatalf("rows after crash and restart = %q, want 2", got)
	}
	pg.Stop()
	pg.Restart()
	pg.Exec("SELECT 1")
}

func TestPostgresPortTaken(t *testing.T) {
	t.Parallel()
	pg := Postgres(t)
	pg.Stop()
	l, err := net.Listen("tcp", pg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pg.mu.Lock()
	err = pg.start()
	pg.mu.Unlock()
	if !errors.Is(err, errPortInUse) {
		t.Fatalf("start on a taken port: err = %v, want errPortInUse", err)
	}
	l.Close()
	pg.Restart()
	pg.Exec("SELECT 1")
}

// TestPostgresKillKeepsCommits checks what Kill promises: every commit
// acknowledged before the crash is there after Restart. The commits are many
// small ones, each acknowledged right before the next and the last one right
// before Kill, so a server that acknowledges commits before writing their WAL
// (synchronous_commit=off) loses the last of them.
func TestPostgresKillKeepsCommits(t *testing.T) {
	t.Parallel()
	pg := Postgres(t)
	const n = 50
	var sql strings.Builder
	sql.WriteString("CREATE TABLE commits (id int PRIMARY KEY);\n")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&sql, "INSERT INTO commits VALUES (%d);\n", i)
	}
	pg.Exec(sql.String())
	pg.Kill()
	pg.Restart()
	if got, want := pg.Exec("SELECT count(*), coalesce(max(id), 0) FROM commits"), fmt.Sprintf("%d|%d", n, n); got != want {
		t.Fatalf("after Kill and Restart: count|max = %q, want %q: acknowledged commits were lost", got, want)
	}
}
