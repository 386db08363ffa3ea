package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/testkit"
	"github.com/redis/go-redis/v9"
)

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
	a := httplimit.LimitByHeader("X-API-Key", 3, time.Hour, httplimit.Redis(client))(ok)
	b := httplimit.LimitByHeader("X-API-Key", 3, time.Hour, httplimit.Redis(client))(ok)
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
	h := httplimit.LimitByIP(1, time.Hour, httplimit.TrustProxies("10.0.0.0/8"))(http.NotFoundHandler())
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
	if _, err := httplimit.ByIP(1, time.Hour, httplimit.TrustProxies("not a prefix")); err == nil {
		t.Error("a bad proxy prefix was accepted")
	}
	if _, err := httplimit.ByIP(1, time.Hour, httplimit.Redis(nil)); err == nil {
		t.Error("Redis(nil) was accepted")
	}
}
