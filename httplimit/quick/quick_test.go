package quick_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/httplimit/quick"
	"github.com/floodgate-go/floodgate/testkit"
	"github.com/redis/go-redis/v9"
)

// client is the address of the client most tests send from.
const client = "203.0.113.7:4711"

// getFrom sends GET / with the header pairs to h and returns the answer.
func getFrom(h http.Handler, remote string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = remote
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// Two instances of a service, each with its own one-liner on one Redis,
// share each key's limit; while Redis is down each limits alone on the same
// numbers (LocalFallback), neither unlimited nor refusing everything.
func TestLimitByHeaderRedis(t *testing.T) {
	srv := testkit.Redis(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer client.Close()
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	a := quick.LimitByHeader("X-API-Key", 3, time.Hour, quick.Redis(client))(ok)
	b := quick.LimitByHeader("X-API-Key", 3, time.Hour, quick.Redis(client))(ok)
	var got []int
	for _, h := range []http.Handler{a, b, a, b, a} {
		got = append(got, getFrom(h, "192.0.2.1:1", "X-API-Key", "k1").Code)
	}
	want := []int{200, 200, 200, 429, 429}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("shared key across two instances: %v, want %v", got, want)
		}
	}
	if c := getFrom(b, "192.0.2.1:1", "X-API-Key", "k2").Code; c != 200 {
		t.Errorf("another key: %d, want 200", c)
	}

	srv.Kill()
	got = got[:0]
	for range 4 {
		got = append(got, getFrom(a, "192.0.2.1:1", "X-API-Key", "k3").Code)
	}
	if want := []int{200, 200, 200, 429}; !equalInts(got, want) {
		t.Errorf("with Redis down, one instance: %v, want %v (its own limit, in memory)", got, want)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TrustProxies reads X-Forwarded-For from the named proxies only.
func TestOneLinerTrustProxies(t *testing.T) {
	h := quick.LimitByIP(1, time.Hour, quick.TrustProxies("10.0.0.0/8"))(http.NotFoundHandler())
	for _, tt := range []struct {
		remote, xff string
		want        int
	}{
		{"10.0.0.1:1", "198.51.100.1", 404},
		{"10.0.0.2:1", "198.51.100.2", 404},    // another client behind the proxy
		{"10.0.0.2:1", "198.51.100.1", 429},    // the first one again
		{"203.0.113.5:1", "198.51.100.9", 404}, // not a proxy: keyed by its address
		{"203.0.113.5:1", "198.51.100.8", 429}, // a new spoofed address changes nothing
	} {
		if c := getFrom(h, tt.remote, "X-Forwarded-For", tt.xff).Code; c != tt.want {
			t.Errorf("%s claiming %s: %d, want %d", tt.remote, tt.xff, c, tt.want)
		}
	}
	if _, err := quick.ByIP(1, time.Hour, quick.TrustProxies("not a prefix")); !errors.Is(err, httplimit.ErrInvalidConfig) {
		t.Errorf("a bad proxy prefix: %v, want httplimit.ErrInvalidConfig", err)
	}
	if _, err := quick.ByIP(1, time.Hour, quick.Redis(nil)); err == nil {
		t.Error("Redis(nil) was accepted")
	}
}

// Each one-liner limits its own key, with the headers, and panics on bad
// numbers with a message naming the call.
func TestOneLiners(t *testing.T) {
	user := func(r *http.Request) string { return r.Header.Get("X-Test-User") }
	for _, tc := range []struct {
		name string
		mw   func(http.Handler) http.Handler
		a, b []string // header pairs of two clients that share an address
	}{
		{"LimitByIP", quick.LimitByIP(2, time.Minute), nil, nil},
		{"LimitByHeader", quick.LimitByHeader("X-API-Key", 2, time.Minute), []string{"X-API-Key", "a"}, []string{"X-API-Key", "b"}},
		{"LimitByUser", quick.LimitByUser(user, 2, time.Minute), []string{"X-Test-User", "alice"}, []string{"X-Test-User", "bob"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			for i, want := range []int{200, 200, 429} {
				if rec := getFrom(h, client, tc.a...); rec.Code != want || rec.Header().Get("X-RateLimit-Limit") != "2" {
					t.Fatalf("request %d: %d %v, want %d with headers", i+1, rec.Code, rec.Header(), want)
				}
			}
			other := getFrom(h, "198.51.100.9:1", tc.b...)
			if tc.b != nil {
				// Another key from the same address.
				other = getFrom(h, client, tc.b...)
			}
			if other.Code != 200 {
				t.Fatalf("another client: %d, want its own limit", other.Code)
			}
		})
	}
	if _, err := quick.ByIP(0, time.Minute); !errors.Is(err, floodgate.ErrInvalidLimit) {
		t.Errorf("ByIP(0, time.Minute): %v, want floodgate.ErrInvalidLimit", err)
	}
	for _, bad := range []func(){
		func() { quick.LimitByIP(0, time.Minute) },
		func() { quick.LimitByIP(10, 0) },
		func() { quick.LimitByHeader("X-Key", -1, time.Second) },
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "quick: LimitBy") {
					t.Errorf("recover() = %v, want a panic naming the call", r)
				}
			}()
			bad()
		}()
	}
}
