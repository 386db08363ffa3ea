package pgproxy

import (
	"bufio"
	"bytes"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
)

// TestRelayAllocs checks that relaying costs no allocation per message once
// a connection is set up: a stream of charged extended-protocol cycles
// through clientToServer (three scopes deciding each), and the server's
// answers through serverToClient.
func TestRelayAllocs(t *testing.T) {
	// No janitor: AllocsPerRun counts the whole process's allocations, and
	// a sweep that falls in a slow run would be counted as the relay's.
	store := memstore.New(memstore.Options{SweepInterval: -1})
	defer store.Close()
	scope := func(name string) Scope {
		lim, err := floodgate.New(store, floodgate.Policy{Name: name, Limits: []floodgate.Limit{floodgate.PerSecond(1_000_000_000).WithBurst(1 << 40)}})
		if err != nil {
			t.Fatal(err)
		}
		return Scope{Limiter: lim}
	}
	obs := &counts{}
	p, err := New(Config{Upstream: "127.0.0.1:1", Limits: Limits{Global: scope("g"), PerUser: scope("u"), PerIP: scope("i")}, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	const cycles = 2000
	cycle := bytes.Join([][]byte{frame('B', "\x00s\x00\x00\x00\x00\x00\x00\x00"), frame('E', "\x00\x00\x00\x00\x00"), frame('S', "")}, nil)
	in := bytes.Repeat(cycle, cycles)
	answer := bytes.Join([][]byte{frame('2', ""), frame('D', "\x00\x01\x00\x00\x00\x011"), frame('C', "SELECT 1\x00"), frame('Z', "I")}, nil)
	out := bytes.Repeat(answer, cycles)

	up := &fakeConn{}
	c := newConn(p, &fakeConn{})
	c.params.User, c.adm.user, c.adm.ipKey = "alice", "alice", "192.0.2.1"
	c.uw = bufio.NewWriterSize(up, bufSize)
	c.status.Store('I')
	c.started = true
	clientRd, serverRd := bytes.NewReader(nil), bytes.NewReader(nil)
	c.cr = bufio.NewReaderSize(clientRd, bufSize)
	c.up = &fakeConn{r: serverRd}
	run := func() {
		clientRd.Reset(in)
		c.cr.Reset(clientRd)
		up.w.Reset()
		// Every cycle's answer is in: the server owes nothing.
		c.expected.Store(0)
		c.received.Store(0)
		if err := c.clientToServer(); err == nil {
			t.Fatal("clientToServer ended without EOF")
		}
		serverRd.Reset(out)
		c.client.(*fakeConn).w.Reset()
		if err := c.serverToClient(); err == nil {
			t.Fatal("serverToClient ended without EOF")
		}
	}
	run() // warm up: the key entries, the buffers
	allocs := testing.AllocsPerRun(5, run)
	if got := obs.queries[scopeIP][Allowed].Load(); got != 7*cycles { // our warm-up, AllocsPerRun's, and 5 runs
		t.Fatalf("%d cycles charged to the ip scope, want %d", got, 7*cycles)
	}
	// serverToClient's buffer is its one allocation per connection.
	t.Logf("%.0f allocations per run", allocs)
	if allocs > 2 {
		t.Errorf("%.0f allocations relaying %d cycles each way, want at most 2", allocs, cycles)
	}
}
