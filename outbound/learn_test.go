package outbound_test

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/outbound"
)

// lyingServer advertises advertised requests a second and admits
// enforced: a token bucket of its own (burst burst) on the wall clock. A
// refusal is a 429 that says, as Discord does, how long until a token is
// back (X-RateLimit-Reset-After, fractional seconds) and nothing else.
type lyingServer struct {
	*upstream
	mu       sync.Mutex
	tokens   float64
	last     time.Time
	refused  int
	enforced float64
}

func newLyingServer(t *testing.T, advertised, enforced, burst int) *lyingServer {
	t.Helper()
	s := &lyingServer{tokens: float64(burst), last: time.Now(), enforced: float64(enforced)}
	s.upstream = newUpstream(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if advertised > 0 {
			w.Header().Set("Ratelimit-Policy", fmt.Sprintf(`"api";q=%d;w=1`, advertised))
			w.Header().Set("X-Ratelimit-Limit", strconv.Itoa(advertised))
		}
		s.mu.Lock()
		now := time.Now()
		s.tokens = math.Min(float64(burst), s.tokens+now.Sub(s.last).Seconds()*s.enforced)
		s.last = now
		if s.tokens < 1 {
			s.refused++
			after := (1 - s.tokens) / s.enforced
			s.mu.Unlock()
			w.Header().Set("X-Ratelimit-Remaining", "0")
			w.Header().Set("X-Ratelimit-Reset-After", strconv.FormatFloat(after, 'f', 3, 64))
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		s.tokens--
		s.mu.Unlock()
		io.WriteString(w, "ok")
	})
	return s
}

func (s *lyingServer) refusals() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused
}

// Against a server that advertises 40/s and admits 20/s, the Transport
// learns: after a few refusals it sends at what the server admits and pays
// (almost) no more. Without learning it paid a refusal for about every
// second request, as many as a hand-written x/time/rate loop at the
// advertised rate. With and without a budget of the client's own at the
// advertised rate.
func TestLearnsWhatTheServerAdmits(t *testing.T) {
	const advertised, enforced, calls = 40, 20, 60
	for _, tc := range []struct {
		name      string
		budget    bool
		advertise bool
	}{{"advertised budget", true, true}, {"no budget", false, true}, {"nothing advertised", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			adv := 0
			if tc.advertise {
				adv = advertised
			}
			srv := newLyingServer(t, adv, enforced, 4)
			o := outbound.Options{}
			if tc.budget {
				o.Limiter = floodgatetest.MemLimiter(t, "upstream", floodgate.PerSecond(advertised))
			}
			tr := newTransport(t, o)
			c := tr.Client()
			ctx := within(t, 60*time.Second)
			lastHalf := 0
			for i := range calls {
				before := srv.refusals()
				if code, _ := do(t, c, get(t, ctx, srv.URL)); code != 200 {
					t.Logf("call %d: %d", i, code)
				}
				if i >= calls/2 {
					lastHalf += srv.refusals() - before
				}
			}
			total := srv.refusals()
			rate, ok := tr.LearnedRate(strings.TrimPrefix(srv.URL, "http://"))
			t.Logf("refusals: %d in all, %d in the last %d calls; learned %.1f/s", total, lastHalf, calls-calls/2, rate)
			if !ok || rate > advertised {
				t.Errorf("learned rate %.1f/s, %v; want one, at most the advertised %d/s", rate, ok, advertised)
			}
			if total > 10 || lastHalf > 2 {
				t.Errorf("the server refused %d requests (%d in the last %d calls); want at most 10, and 2 once learned", total, lastHalf, calls-calls/2)
			}
		})
	}
}

// A refused request is one signal, not one per caller in flight: three
// callers at once against the same lying server converge as one does.
func TestLearnsWithCallersInFlight(t *testing.T) {
	const advertised, enforced, workers, calls = 40, 20, 3, 20
	srv := newLyingServer(t, advertised, enforced, 4)
	c := newTransport(t, outbound.Options{Limiter: floodgatetest.MemLimiter(t, "upstream", floodgate.PerSecond(advertised))}).Client()
	ctx := within(t, 60*time.Second)
	var wg sync.WaitGroup
	var mu sync.Mutex
	lastHalf := 0
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				before := srv.refusals()
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
				resp, err := c.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if i >= calls/2 {
					mu.Lock()
					lastHalf += srv.refusals() - before
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	total := srv.refusals()
	t.Logf("refusals: %d in all, %d seen in the callers' last halves", total, lastHalf)
	if total > 12 || lastHalf > 3 {
		t.Errorf("the server refused %d requests (%d in the callers' last halves); want at most 12, and 3 once learned", total, lastHalf)
	}
}
