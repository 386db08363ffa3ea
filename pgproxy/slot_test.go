package pgproxy_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/pgproxy"
	"github.com/floodgate-go/floodgate/testkit"
	"github.com/jackc/pgx/v5"
)

// extendedQuery frames sql as one extended-protocol cycle:
// Parse/Bind/Execute/Sync on the unnamed statement and portal.
func extendedQuery(sql string) []byte {
	b := msg('P', "\x00"+sql+"\x00\x00\x00")                       // statement "", sql, no parameter types
	b = append(b, msg('B', "\x00\x00\x00\x00\x00\x00\x00\x00")...) // portal "", statement "", no formats, parameters or result formats
	b = append(b, msg('E', "\x00\x00\x00\x00\x00")...)             // portal "", all rows
	return append(b, msg('S', "")...)
}

// answer reads the answer to one query (or cycle) up to its ReadyForQuery
// and returns the SQLSTATE of its ErrorResponse ("" when it has none) and
// the transaction status the ReadyForQuery reports.
func (s *rawSession) answer() (code string, status byte) {
	s.t.Helper()
	code, status, err := s.tryAnswer()
	if err != nil {
		s.t.Fatal(err)
	}
	return code, status
}

// tryAnswer is answer returning an error instead of failing the test, for
// reading from another goroutine.
func (s *rawSession) tryAnswer() (code string, status byte, err error) {
	for {
		typ, body, err := s.tryRead()
		if err != nil {
			return code, 0, err
		}
		switch typ {
		case 'E':
			code = errorField(body, 'C')
		case 'Z':
			return code, body[0], nil
		}
	}
}

// errorField returns the field of type f of an ErrorResponse's body.
func errorField(body []byte, f byte) string {
	for len(body) > 1 {
		typ := body[0]
		end := 1
		for end < len(body) && body[end] != 0 {
			end++
		}
		if typ == f {
			return string(body[1:end])
		}
		body = body[min(end+1, len(body)):]
	}
	return ""
}

// TestTransactionNotSplit checks that neither the concurrent-query limit
// (53300) nor the rate limit (53400) refuses a statement inside a
// transaction block, which the client would see fail while the server's
// transaction goes on: a client that carries on after the error (psql
// without ON_ERROR_STOP, a retrying ORM) would then commit half its work.
// Connection A runs BEGIN; INSERT 1, connection B of the same user then
// uses up the limit, and A runs INSERT 2; COMMIT: the table must hold both
// rows (a transaction holds its slot from BEGIN to its end, and statements
// inside it are not charged), in the simple and the extended protocol and
// with the statements pipelined.
func TestTransactionNotSplit(t *testing.T) {
	pg := testkit.Postgres(t)
	ctx := ctxT(t)
	admin, err := pgx.Connect(ctx, pg.DSN(testkit.PostgresSuperuser, "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })

	protocols := []struct {
		name  string
		frame func(string) []byte
		pipe  bool // each pair of statements sent in one write before reading either answer
	}{
		{"Simple", func(sql string) []byte { return msg('Q', sql+"\x00") }, false},
		{"Extended", extendedQuery, false},
		{"PipelinedSimple", func(sql string) []byte { return msg('Q', sql+"\x00") }, true},
		{"PipelinedExtended", extendedQuery, true},
	}
	n := 0
	for _, limit := range []string{"53300", "53400"} {
		for _, proto := range protocols {
			n++
			lock := 100 + n
			table := "txsplit_" + strconv.Itoa(n)
			t.Run(limit+"/"+proto.name, func(t *testing.T) {
				if _, err := admin.Exec(ctx, fmt.Sprintf("CREATE TABLE %s (v int); GRANT SELECT, INSERT ON %[1]s TO %s", table, testkit.PostgresTrustUser), pgx.QueryExecModeSimpleProtocol); err != nil {
					t.Fatal(err)
				}
				var limits pgproxy.Limits
				if limit == "53300" {
					conc, err := concurrency.New(concurrency.NewLocal(), concurrency.Options{Limit: 1})
					if err != nil {
						t.Fatal(err)
					}
					limits.ConcurrentQueries = conc
				} else {
					rate, _ := memLimiter(t, floodgate.Policy{Name: "u", Limits: []floodgate.Limit{burst(2)}})
					limits.PerUser = pgproxy.Scope{Limiter: rate}
				}
				tp := startProxy(t, pg, pgproxy.Config{Limits: limits})
				a := rawConnect(t, tp.Addr, testkit.PostgresTrustUser)
				// run sends two statements on A, pipelined or one by one,
				// and returns their answers.
				type result struct {
					code   string
					status byte
				}
				run := func(sql1, sql2 string) [2]result {
					var r [2]result
					if proto.pipe {
						a.write(append(proto.frame(sql1), proto.frame(sql2)...))
						r[0].code, r[0].status = a.answer()
						r[1].code, r[1].status = a.answer()
						return r
					}
					a.write(proto.frame(sql1))
					r[0].code, r[0].status = a.answer()
					a.write(proto.frame(sql2))
					r[1].code, r[1].status = a.answer()
					return r
				}
				if r := run("BEGIN", "INSERT INTO "+table+" VALUES (1)"); r != [2]result{{"", 'T'}, {"", 'T'}} {
					t.Fatalf("BEGIN; INSERT 1: %q, want both to pass in a transaction", r)
				}

				// B, the same user, meets the limit while A's transaction
				// is open.
				b := rawConnect(t, tp.Addr, testkit.PostgresTrustUser)
				if limit == "53300" {
					// A's transaction holds the only slot. (Before the fix,
					// B's query took it and held it on the advisory lock.)
					if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock($1::bigint)", lock); err != nil {
						t.Fatal(err)
					}
					b.write(msg('Q', "SELECT pg_advisory_lock_shared("+strconv.Itoa(lock)+")\x00"))
					got := make(chan string, 1)
					go func() {
						code, _, err := b.tryAnswer()
						if err != nil {
							code = err.Error()
						}
						got <- code
					}()
					var code string
					testkit.Eventually(t, 20*time.Second, "B's query to be refused or to hold the slot", func() bool {
						select {
						case code = <-got:
							return true
						default:
						}
						v, err := query(ctx, admin, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = $1 AND NOT granted", lock)
						return err == nil && v == "1"
					})
					t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "SELECT pg_advisory_unlock_all()") })
					r := run("INSERT INTO "+table+" VALUES (2)", "COMMIT")
					if _, err := admin.Exec(ctx, "SELECT pg_advisory_unlock($1::bigint)", lock); err != nil {
						t.Fatal(err)
					}
					if code == "" {
						code = <-got
					}
					checkNotSplit(t, ctx, admin, a, table, r[0].code, r[0].status, r[1].code, r[1].status)
					if code != "53300" {
						t.Errorf("B's query while A's transaction holds the only slot: %q, want 53300", code)
					}
					return
				}
				// B spends what is left of the limit (a pipelined INSERT 1
				// may have taken a unit: its status was not known yet).
				for i := 0; ; i++ {
					b.write(msg('Q', "SELECT 1\x00"))
					code, _ := b.answer()
					if code == "53400" {
						break
					}
					if code != "" || i == 2 {
						t.Fatalf("B's query %d: %q, want it to pass or 53400", i+1, code)
					}
				}
				r := run("INSERT INTO "+table+" VALUES (2)", "COMMIT")
				checkNotSplit(t, ctx, admin, a, table, r[0].code, r[0].status, r[1].code, r[1].status)
			})
		}
	}
}

// checkNotSplit checks A's answers to INSERT 2 and COMMIT and the rows
// committed. An error inside the transaction must leave it failed (status
// E), as the server's own errors do; a client that carries on then
// commits, and the table must not hold row 1 without row 2. With the
// proxy never refusing inside a transaction, both rows are there.
func checkNotSplit(t *testing.T, ctx context.Context, admin *pgx.Conn, a *rawSession, table string, code2 string, st2 byte, codeCommit string, stCommit byte) {
	t.Helper()
	if code2 != "" && st2 != 'E' {
		t.Errorf("INSERT 2 inside the transaction was refused %s with ReadyForQuery %c: the client's statement failed, the server's transaction did not", code2, st2)
	}
	if stCommit != 'I' {
		// The client carries on, as psql without ON_ERROR_STOP does.
		a.write(msg('Q', "COMMIT\x00"))
		a.answer()
	}
	v, err := query(ctx, admin, "SELECT string_agg(v::text, ',' ORDER BY v) FROM "+table, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	switch v {
	case "1,2":
	case "1":
		t.Fatalf("the table holds row 1 without row 2: the transaction was cut in half (INSERT 2: %q %c; COMMIT: %q %c)", code2, st2, codeCommit, stCommit)
	default:
		t.Fatalf("rows %q, want 1,2 (INSERT 2: %q %c; COMMIT: %q %c)", v, code2, st2, codeCommit, stCommit)
	}
	if code2 != "" || codeCommit != "" {
		t.Errorf("INSERT 2: %q, COMMIT: %q; want both to pass inside the transaction", code2, codeCommit)
	}
}

// TestTransactionHoldsSlot checks the slot of a transaction: held while
// it sits idle, through a failure (status E) to its ROLLBACK, and, when a
// reload adds the limit while a transaction is open, not needed by the
// statements left in that transaction, pipelined or not.
func TestTransactionHoldsSlot(t *testing.T) {
	pg := testkit.Postgres(t)
	ctx := ctxT(t)
	oneSlot := func(t *testing.T) *concurrency.Limiter {
		conc, err := concurrency.New(concurrency.NewLocal(), concurrency.Options{Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		return conc
	}
	expect := func(t *testing.T, s *rawSession, what, sql, wantCode string, wantStatus byte) {
		t.Helper()
		s.write(msg('Q', sql+"\x00"))
		if code, st := s.answer(); code != wantCode || st != wantStatus {
			t.Fatalf("%s: %q %c, want %q %c", what, code, st, wantCode, wantStatus)
		}
	}

	t.Run("FailedTransaction", func(t *testing.T) {
		tp := startProxy(t, pg, pgproxy.Config{Limits: pgproxy.Limits{ConcurrentQueries: oneSlot(t)}})
		a := rawConnect(t, tp.Addr, testkit.PostgresTrustUser)
		b := rawConnect(t, tp.Addr, testkit.PostgresTrustUser)
		expect(t, a, "A's BEGIN", "BEGIN", "", 'T')
		expect(t, b, "B's query while A's transaction is open", "SELECT 1", "53300", 'I')
		expect(t, a, "A's failing statement", "SELECT 1/0", "22012", 'E')
		expect(t, b, "B's query while A's transaction has failed", "SELECT 1", "53300", 'I')
		expect(t, a, "A's statement in the failed transaction", "SELECT 1", "25P02", 'E') // the server's answer
		expect(t, a, "A's ROLLBACK", "ROLLBACK", "", 'I')
		expect(t, b, "B's query after A's ROLLBACK", "SELECT 1", "", 'I')
		expect(t, a, "A's query after B's", "SELECT 1", "", 'I')
	})

	t.Run("LimitAddedMidTransaction", func(t *testing.T) {
		admin, err := pgx.Connect(ctx, pg.DSN(testkit.PostgresSuperuser, "postgres"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { admin.Close(context.Background()) })
		tp := startProxy(t, pg, pgproxy.Config{})
		a := rawConnect(t, tp.Addr, testkit.PostgresTrustUser)
		expect(t, a, "A's BEGIN", "BEGIN", "", 'T')
		expect(t, a, "A's CREATE", "CREATE TEMP TABLE t (v int)", "", 'T')
		if err := tp.SetLimits(pgproxy.Limits{ConcurrentQueries: oneSlot(t)}); err != nil {
			t.Fatal(err)
		}
		// B takes the only slot and keeps it on an advisory lock.
		const lock = 99
		if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock($1::bigint)", lock); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "SELECT pg_advisory_unlock_all()") })
		b := rawConnect(t, tp.Addr, testkit.PostgresTrustUser)
		b.write(msg('Q', "SELECT pg_advisory_lock_shared(99)\x00"))
		testkit.Eventually(t, 20*time.Second, "B's query to hold the slot", func() bool {
			v, err := query(ctx, admin, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = $1 AND NOT granted", lock)
			return err == nil && v == "1"
		})
		// The first INSERT runs in a transaction known to be open; the
		// second is pipelined behind it, its status not known when it
		// arrives; the SELECT is pipelined behind both.
		a.write(append(append(msg('Q', "INSERT INTO t VALUES (1)\x00"), extendedQuery("INSERT INTO t VALUES (2)")...), msg('Q', "SELECT count(*) FROM t\x00")...))
		for i := range 3 {
			if code, st := a.answer(); code != "" || st != 'T' {
				t.Fatalf("A's statement %d in the transaction that began without a slot: %q %c, want it to pass", i+1, code, st)
			}
		}
		expect(t, a, "A's COMMIT", "COMMIT", "", 'I')
		expect(t, a, "A's query out of the transaction, B holding the slot", "SELECT 1", "53300", 'I')
		if _, err := admin.Exec(ctx, "SELECT pg_advisory_unlock($1::bigint)", lock); err != nil {
			t.Fatal(err)
		}
		if code, _ := b.answer(); code != "" {
			t.Fatalf("B's query: %q", code)
		}
		expect(t, a, "A's query once B's ended", "SELECT 1", "", 'I')
	})
}

// TestSlotHandOff checks that a slot is back before the answer that ends
// its query reaches the client: with one slot per user, two connections
// taking turns, each sending its query once it has read the other's
// answer, are never refused. The slot used to be given back only after
// the ReadyForQuery was written to the client, and the other connection's
// query, sent on reading it, was refused now and then. The proxy's own
// answers hand the slot off the same way: a query the rate limit refuses
// after it took the slot gives it back before its 53400 is written.
func TestSlotHandOff(t *testing.T) {
	const turns = 1000
	pg := testkit.Postgres(t)
	for _, tc := range []struct {
		name  string
		frame []byte
		rate  bool
	}{
		{"Simple", msg('Q', "SELECT 1\x00"), false},
		{"Extended", extendedQuery("SELECT 1"), false},
		{"RateDenied", msg('Q', "SELECT 1\x00"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conc, err := concurrency.New(concurrency.NewLocal(), concurrency.Options{Limit: 1})
			if err != nil {
				t.Fatal(err)
			}
			limits := pgproxy.Limits{ConcurrentQueries: conc}
			want := ""
			if tc.rate {
				// No unit at all: every query takes the slot, is refused
				// 53400 and gives the slot back.
				rate, _ := memLimiter(t, floodgate.Policy{Name: "u", Limits: []floodgate.Limit{floodgate.PerHour(1).WithBurst(1)}})
				if _, err := floodgate.Allow(ctxT(t), rate, testkit.PostgresTrustUser); err != nil {
					t.Fatal(err)
				}
				limits.PerUser = pgproxy.Scope{Limiter: rate}
				want = "53400"
			}
			tp := startProxy(t, pg, pgproxy.Config{Limits: limits})
			s := [2]*rawSession{rawConnect(t, tp.Addr, testkit.PostgresTrustUser), rawConnect(t, tp.Addr, testkit.PostgresTrustUser)}
			wrong := map[string]int{}
			for i := range turns {
				s[i%2].write(tc.frame)
				if code, _ := s[i%2].answer(); code != want {
					wrong[code]++
				}
			}
			if len(wrong) > 0 {
				t.Fatalf("%d queries taking turns on one slot: answers other than %q: %v", turns, want, wrong)
			}
		})
	}
}
