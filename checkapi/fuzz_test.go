package checkapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
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
