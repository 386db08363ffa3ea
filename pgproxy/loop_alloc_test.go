//go:build linux && !race

package pgproxy

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/testkit"
)

// TestLoopAllocs: the loop relays charged queries, decided inline, with no
// allocation per message: pipelined extended-protocol cycles (Bind,
// Execute, Sync) under three scopes, and their answers. The race detector
// changes allocation counts, so this runs without it.
func TestLoopAllocs(t *testing.T) {
	pg := testkit.Postgres(t)
	store := memstore.New(memstore.Options{SweepInterval: -1})
	t.Cleanup(func() { store.Close() })
	scope := func(name string) Scope {
		lim, err := floodgate.New(store, floodgate.Policy{Name: name, Limits: []floodgate.Limit{floodgate.PerSecond(1_000_000_000).WithBurst(1 << 40)}})
		if err != nil {
			t.Fatal(err)
		}
		return Scope{Limiter: lim}
	}
	obs := &relayCounts{}
	_, addr := startLoopProxy(t, Config{Upstream: pg.Addr, Observer: obs,
		Limits: Limits{Global: scope("g"), PerUser: scope("u"), PerIP: scope("i"), Local: true}})
	s := openSession(t, addr)
	s.send(append(frame('P', "s\x00SELECT 1\x00\x00\x00"), frame('S', "")...))
	if code := s.answer(); code != "" {
		t.Fatal(code)
	}
	const cycles = 100
	batch := bytes.Repeat(bytes.Join([][]byte{frame('B', "\x00s\x00\x00\x00\x00\x00\x00\x00"), frame('E', "\x00\x00\x00\x00\x00"), frame('S', "")}, nil), cycles)
	buf := make([]byte, 64<<10)
	run := func() {
		s.send(batch)
		readys, have := 0, 0
		for readys < cycles {
			n, err := s.r.Read(buf[have:])
			if err != nil {
				t.Fatal(err)
			}
			have += n
			pos := 0
			for have-pos >= 5 {
				size := 1 + int(binary.BigEndian.Uint32(buf[pos+1:]))
				if have-pos < size {
					break
				}
				switch buf[pos] {
				case 'Z':
					readys++
				case 'E':
					t.Fatalf("error from the server: %q", buf[pos:pos+size])
				}
				pos += size
			}
			have = copy(buf, buf[pos:have])
		}
	}
	run() // warm up: the keys, the buffers
	allocs := testing.AllocsPerRun(5, run)
	if got := obs.queries[scopeIP][Allowed].Load(); got != 7*cycles {
		t.Fatalf("%d cycles charged to the ip scope, want %d", got, 7*cycles)
	}
	t.Logf("%.0f allocations per %d cycles", allocs, cycles)
	if allocs > cycles/10 {
		t.Errorf("%.0f allocations relaying %d cycles each way, want none per message", allocs, cycles)
	}
}
