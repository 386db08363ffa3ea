package outbound_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/outbound"
)

// recorder is an Observer that keeps what it was told.
type recorder struct {
	mu      sync.Mutex
	waits   map[outbound.WaitCause][]time.Duration
	pauses  []time.Duration
	codes   []int // codes of the pauses
	retries []int
	changes [][2]failover.BreakerState
}

func newRecorder() *recorder { return &recorder{waits: map[outbound.WaitCause][]time.Duration{}} }

func (r *recorder) Waited(_ string, c outbound.WaitCause, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waits[c] = append(r.waits[c], d)
}

func (r *recorder) Paused(_ string, code int, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pauses = append(r.pauses, d)
	r.codes = append(r.codes, code)
}

func (r *recorder) Retried(_ string, code int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.retries = append(r.retries, code)
}

func (r *recorder) BreakerChanged(_ string, from, to failover.BreakerState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changes = append(r.changes, [2]failover.BreakerState{from, to})
}

func (r *recorder) snapshot() (pauses []time.Duration, retries []int, waits map[outbound.WaitCause]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	waits = map[outbound.WaitCause]int{}
	for c, ds := range r.waits {
		waits[c] = len(ds)
	}
	return append([]time.Duration(nil), r.pauses...), append([]int(nil), r.retries...), waits
}

// arrival is one request a test upstream saw.
type arrival struct {
	at     time.Time
	method string
	body   string
}

// upstream is a test server whose answers a function decides, from the
// number of the request (0 first), and that keeps every arrival.
type upstream struct {
	*httptest.Server
	mu       sync.Mutex
	arrivals []arrival
}

func newUpstream(t *testing.T, answer func(n int, w http.ResponseWriter, r *http.Request)) *upstream {
	t.Helper()
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		n := len(u.arrivals)
		u.arrivals = append(u.arrivals, arrival{at: time.Now(), method: r.Method, body: string(b)})
		u.mu.Unlock()
		answer(n, w, r)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) seen() []arrival {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]arrival(nil), u.arrivals...)
}

// do sends one request through c and returns its status and body.
func do(t *testing.T, c *http.Client, req *http.Request) (int, string) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func get(t *testing.T, ctx context.Context, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func newTransport(t *testing.T, o outbound.Options) *outbound.Transport {
	t.Helper()
	tr, err := outbound.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// within returns a context that ends after d, for tests that must not
// hang when the code under test does.
func within(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
