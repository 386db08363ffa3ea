package testkit

import (
	"strconv"
	"testing"
)

func TestPgBouncer(t *testing.T) {
	pg := Postgres(t)
	for _, mode := range []string{"session", "transaction"} {
		b := PgBouncer(t, pg, mode)
		out, err := pg.Psql(b.DSN(PostgresTrustUser, "postgres"), "SELECT current_user, current_setting('port');")
		if err != nil {
			t.Fatal(err)
		}
		if want := PostgresTrustUser + "|" + strconv.Itoa(pg.Port); out != want {
			t.Errorf("%s mode: %q through pgbouncer, want %q", mode, out, want)
		}
	}
	if _, err := pg.Psql(PgBouncer(t, pg, "session").DSN("no_such_role", "postgres"), "SELECT 1;"); err == nil {
		t.Error("pgbouncer let an unknown role in")
	}
}
