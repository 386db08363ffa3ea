package checkapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/memstore"
)

// FuzzCheckBody feeds the check API arbitrary bodies: every answer is one
// of its documented statuses with a JSON body, never a panic, and a body
// that is refused charges nothing.
func FuzzCheckBody(f *testing.F) {
	for _, s := range []string{
		`{"policy":"api","key":"k"}`,
		`{"policy":"api","key":"k","cost":0}`,
		`{"policy":"api","key":"k","cost":-1}`,
		`{"policy":"api","key":"k","cost":99999999999999999999}`,
		`{"checks":[{"policy":"api","key":"a"},{"policy":"b","key":"b","cost":2}]}`,
		`{"checks":[]}`, `{"checks":null}`, `{"checks":{}}`, `[]`, `null`, `""`, `{`, ``,
		`{"policy":"api","key":"\u0000\ud800"}`,
		`{"policy":"api","key":"k"}{"policy":"api"}`,
	} {
		f.Add(s)
	}
	st := memstore.New(memstore.Options{})
	defer st.Close()
	api, err := floodgate.New(st, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerSecond(1_000_000)}})
	if err != nil {
		f.Fatal(err)
	}
	b, err := floodgate.New(st, floodgate.Policy{Name: "b", Limits: []floodgate.Limit{floodgate.PerSecond(1_000_000)}})
	if err != nil {
		f.Fatal(err)
	}
	c := New(Config{Policies: map[string]floodgate.Limiter{"api": api, "b": b}, MaxBody: 4096})
	f.Fuzz(func(t *testing.T, body string) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("POST", "http://127.0.0.1"+Path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		c.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK, http.StatusTooManyRequests, http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body)
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("answer is not JSON for %q: %q", body, rec.Body)
		}
	})
}

// FuzzLeaseBody feeds the lease endpoints arbitrary bodies: every answer
// is one of their documented statuses, with a JSON body unless it is a
// 204, never a panic; and whatever the bodies did, a release of every
// token handed out leaves the key's slots free.
func FuzzLeaseBody(f *testing.F) {
	for _, s := range []string{
		`{"name":"reports","key":"k"}`,
		`{"name":"reports","key":"k","ttl":"1s"}`,
		`{"name":"reports","key":"k","ttl":"0s"}`,
		`{"name":"reports","key":"k","ttl":"9999999999h"}`,
		`{"name":"reports","key":"k","token":"0123456789abcdef0123456789abcdef"}`,
		`{"name":"reports","key":"k","token":"x"}`,
		`{"name":"nope","key":"k"}`, `{"name":"reports"}`, `{"name":"reports","key":"k","limit":3}`,
		`[]`, `null`, `""`, `{`, ``, `{"name":"reports","key":"k"}{}`,
	} {
		f.Add(s, uint8(0))
	}
	store := concurrency.NewLocal()
	lim, err := concurrency.New(store, concurrency.Options{Name: "check:reports", Limit: 2})
	if err != nil {
		f.Fatal(err)
	}
	c := New(Config{Concurrency: map[string]ConcurrencyLimit{"reports": {Limiter: lim, Lease: time.Minute}}, MaxBody: 4096})
	paths := [...]string{AcquirePath, RenewPath, ReleasePath}
	f.Fuzz(func(t *testing.T, body string, which uint8) {
		path := paths[int(which)%len(paths)]
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("POST", "http://127.0.0.1"+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		c.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusNoContent:
			if rec.Body.Len() != 0 {
				t.Fatalf("204 with a body for %q: %q", body, rec.Body)
			}
			return
		case http.StatusOK:
			var out struct{ Token, Key string }
			json.Unmarshal(rec.Body.Bytes(), &out)
			var q leaseRequest
			json.Unmarshal([]byte(body), &q)
			if err := lim.ReleaseLease(context.Background(), concurrency.Lease{Key: q.Key, Token: out.Token}); err != nil {
				t.Fatal(err)
			}
			if n := store.InFlight("check:reports", q.Key); n != 0 {
				t.Fatalf("%d holders of %q after releasing the only lease", n, q.Key)
			}
		case http.StatusTooManyRequests, http.StatusGone, http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("status %d for %s %q: %s", rec.Code, path, body, rec.Body)
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("answer is not JSON for %q: %q", body, rec.Body)
		}
	})
}
