package envoydiff

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-go/floodgate/testkit"
)

// The binaries every test here runs: floodgate as built from this tree and
// the reference as built from its source.
var (
	floodgateBin string
	reference    *Reference
)

func TestMain(m *testing.M) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "envoydiff-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		if floodgateBin, err = BuildFloodgate(ctx, dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		// A reference that cannot be built fails the suite: the
		// comparison is the point of this package.
		if reference, err = BuildReference(ctx); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// A call is one ShouldRateLimit request, sent Times times (at least once).
type call struct {
	descs []*commonrl.RateLimitDescriptor
	hits  uint32
	times int
	// domain overrides the setup's domain.
	domain string
}

// d builds a descriptor from "key=value" entries.
func d(entries ...string) *commonrl.RateLimitDescriptor {
	out := &commonrl.RateLimitDescriptor{}
	for _, e := range entries {
		k, v, _ := strings.Cut(e, "=")
		out.Entries = append(out.Entries, &commonrl.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return out
}

// dh is d with the descriptor's own hits_addend.
func dh(hits uint64, entries ...string) *commonrl.RateLimitDescriptor {
	out := d(entries...)
	out.HitsAddend = wrapperspb.UInt64(hits)
	return out
}

func req(times int, descs ...*commonrl.RateLimitDescriptor) call {
	return call{descs: descs, times: times}
}

func reqHits(times int, hits uint32, descs ...*commonrl.RateLimitDescriptor) call {
	return call{descs: descs, times: times, hits: hits}
}

// A sequence is calls sent in order to both servers, on fresh state, inside
// one window of every limit involved.
type sequence struct {
	name  string
	calls []call
	// differs, when set, names the difference of docs/envoy.md that this
	// sequence shows: the answers must differ (so a difference that goes
	// away is noticed and its entry dropped).
	differs string
}

// A setup is the configuration both servers get and the sequences sent to
// them.
type setup struct {
	domain string
	files  []File
	// floodgate holds lines of floodgate's envoy section; ref the
	// reference's settings.
	floodgate string
	ref       ReferenceOptions
	// engine is floodgate's storage: redis (the default) or hybrid.
	engine string
	seqs   []sequence
}

// parity is the envoy section that makes floodgate count as the reference
// does.
const parity = "charge_denied: true\ndescriptors: independent"

// answer is one response in comparable form.
type answer struct {
	err      string // the gRPC status code of a failed call
	overall  rlsv3.RateLimitResponse_Code
	statuses []descStatus
}

type descStatus struct {
	code      rlsv3.RateLimitResponse_Code
	remaining uint32
	limit     string        // "10/SECOND" (×multiplier) and its name; "" when absent
	reset     time.Duration // -1 when absent
}

func (s descStatus) String() string {
	r := "-"
	if s.reset >= 0 {
		r = s.reset.String()
	}
	return fmt.Sprintf("{%s rem=%d limit=%q reset=%s}", s.code, s.remaining, s.limit, r)
}

func (a answer) String() string {
	if a.err != "" {
		return "error " + a.err
	}
	var b strings.Builder
	b.WriteString(a.overall.String())
	for _, s := range a.statuses {
		b.WriteString(" " + s.String())
	}
	return b.String()
}

func toAnswer(resp *rlsv3.RateLimitResponse, err error) answer {
	if err != nil {
		return answer{err: status.Code(err).String()}
	}
	a := answer{overall: resp.OverallCode}
	for _, st := range resp.Statuses {
		ds := descStatus{code: st.Code, remaining: st.LimitRemaining, reset: -1}
		if cl := st.CurrentLimit; cl != nil {
			ds.limit = fmt.Sprintf("%d/%s", cl.RequestsPerUnit, cl.Unit)
			if m := cl.UnitMultiplier; m != nil {
				ds.limit += fmt.Sprintf("×%d", m.Value)
			}
			if cl.Name != "" {
				ds.limit += " " + cl.Name
			}
		}
		if st.DurationUntilReset != nil {
			ds.reset = st.DurationUntilReset.AsDuration()
		}
		a.statuses = append(a.statuses, ds)
	}
	return a
}

// resetTolerance is how far the two servers' duration_until_reset may be
// apart: the reference counts whole seconds of its own clock.
const resetTolerance = time.Second

// diff describes how a and b differ, "" when they agree.
func diff(a, b answer) string {
	if a.err != b.err || a.overall != b.overall || len(a.statuses) != len(b.statuses) {
		return "differ"
	}
	for i := range a.statuses {
		x, y := a.statuses[i], b.statuses[i]
		if x.code != y.code || x.remaining != y.remaining || x.limit != y.limit || (x.reset < 0) != (y.reset < 0) {
			return fmt.Sprintf("descriptor %d differs", i)
		}
		if x.reset >= 0 && (x.reset-y.reset > resetTolerance || y.reset-x.reset > resetTolerance) {
			return fmt.Sprintf("descriptor %d: duration_until_reset more than %s apart", i, resetTolerance)
		}
	}
	return ""
}

// a pair is the two servers of one setup, each on its own redis-server.
type pair struct {
	ref, fg   rlsv3.RateLimitServiceClient
	refRedis  *testkit.RedisServer
	fgRedis   *testkit.RedisServer
	refServer *Server
	fgServer  *Server
	// fresh starts another pair of the same setup, for state FLUSHALL does
	// not reach (the hybrid engine's local filter lives in the process).
	fresh func(*testing.T) *pair
}

func startPair(t *testing.T, s setup) *pair {
	t.Helper()
	ctx := context.Background()
	p := &pair{refRedis: testkit.Redis(t), fgRedis: testkit.Redis(t)}
	if s.engine == "hybrid" {
		p.fresh = func(t *testing.T) *pair { return startPair(t, s) }
	}
	var err error
	p.refServer, err = StartReference(ctx, reference, t.TempDir(), p.refRedis.Addr, s.files, s.ref)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.refServer.Close)
	engine := s.engine
	if engine == "" {
		engine = "redis"
	}
	p.fgServer, err = StartFloodgateStorage(ctx, floodgateBin, t.TempDir(), p.fgRedis.Addr, s.files, s.floodgate, engine)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.fgServer.Close)
	p.ref = client(t, p.refServer.Addr)
	p.fg = client(t, p.fgServer.Addr)
	return p
}

func client(t *testing.T, addr string) rlsv3.RateLimitServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return rlsv3.NewRateLimitServiceClient(cc)
}

// waitForWindow returns at the start of a fresh second that is not among
// the last two of a minute, so that a sequence of a few hundred
// milliseconds stays inside one window of every unit (the reference's
// windows are aligned to the Unix epoch, and minutes, hours, days, weeks
// and its 30-day months all begin on a minute). The clock only chooses
// when a sequence starts; run checks afterwards that it did not straddle.
func waitForWindow() time.Time {
	for {
		now := time.Now()
		next := now.Truncate(time.Second).Add(time.Second)
		time.Sleep(time.Until(next) + 2*time.Millisecond)
		if s := next.Unix() % 60; s < 58 {
			return next
		}
	}
}

// run sends seq to both servers of p, one call to each in turn, and
// returns their answers. A sequence that ran past the second it started
// in is sent again on fresh state, at most three times.
func (p *pair) run(t *testing.T, domain string, seq sequence) (ref, fg []answer) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		if attempt > 1 && p.fresh != nil {
			*p = *p.fresh(t)
		}
		for _, r := range []*testkit.RedisServer{p.refRedis, p.fgRedis} {
			if _, err := r.Do("FLUSHALL"); err != nil {
				t.Fatal(err)
			}
		}
		start := waitForWindow()
		ref, fg = nil, nil
		for _, c := range seq.calls {
			dom := domain
			if c.domain != "" {
				dom = c.domain
			}
			rq := &rlsv3.RateLimitRequest{Domain: dom, Descriptors: c.descs, HitsAddend: c.hits}
			for range max(c.times, 1) {
				// The two servers are independent: asked at once, a
				// sequence takes half the time, so that it fits in its
				// second on a busy machine too.
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				var r answer
				done := make(chan struct{})
				go func() {
					defer close(done)
					r = toAnswer(p.ref.ShouldRateLimit(ctx, rq))
				}()
				fg = append(fg, toAnswer(p.fg.ShouldRateLimit(ctx, rq)))
				<-done
				ref = append(ref, r)
				cancel()
			}
		}
		if time.Now().Before(start.Add(time.Second)) {
			return ref, fg
		}
		if attempt == 3 {
			t.Fatalf("%s: three attempts ran past the second they started in; the machine is too busy to compare windows", seq.name)
		}
		t.Logf("%s: ran past its window; sending it again on fresh state", seq.name)
	}
}

// compare runs every sequence of s against both servers.
func compare(t *testing.T, s setup) {
	t.Helper()
	p := startPair(t, s)
	for i, seq := range s.seqs {
		t.Run(seq.name, func(t *testing.T) {
			if s.engine == "hybrid" && i > 0 {
				// The local filter's state lives in the process, which
				// FLUSHALL does not reach: fresh state is a fresh pair.
				p = startPair(t, s)
			}
			ref, fg := p.run(t, s.domain, seq)
			var lines []string
			first := ""
			for i := range ref {
				why := diff(ref[i], fg[i])
				mark := "  "
				if why != "" {
					mark = "≠ "
					if first == "" {
						first = fmt.Sprintf("call %d: %s", i+1, why)
					}
				}
				lines = append(lines, fmt.Sprintf("%scall %d\n      reference %s\n      floodgate %s", mark, i+1, ref[i], fg[i]))
			}
			switch {
			case seq.differs == "" && first != "":
				t.Errorf("floodgate answers differently from the reference (%s):\n%s", first, strings.Join(lines, "\n"))
			case seq.differs != "" && first == "":
				t.Errorf("floodgate now answers as the reference does; the difference %q is gone, drop it from docs/envoy.md and from this test:\n%s", seq.differs, strings.Join(lines, "\n"))
			case seq.differs != "":
				t.Logf("the documented difference %q (%s):\n%s", seq.differs, first, strings.Join(lines, "\n"))
			}
		})
	}
}

// sourceFile reads one of the reference's own files from its source.
func sourceFile(t *testing.T, path string) File {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(reference.Source, path))
	if err != nil {
		t.Fatal(err)
	}
	return File{Name: filepath.Base(path), Data: data}
}

func inline(name, yaml string) File { return File{Name: name, Data: []byte(yaml)} }
