package httplimit_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
)

// TestClientGoneIsNotDecided: a request whose context ended before the
// middleware decided it (a client that reset its stream) is not decided:
// its key keeps its budget, no denial is made, OnError gets the context's
// error, and nothing is logged as a limiter failure.
func TestClientGoneIsNotDecided(t *testing.T) {
	e := newEnv(t)
	lim := e.limiter("api", floodgate.PerMinute(1))
	var log bytes.Buffer
	var got error
	m := mustNew(t, httplimit.Config{
		Rules:  []httplimit.Rule{{Limiter: lim, Key: httplimit.KeyConst("k")}},
		Logger: slog.New(slog.NewTextHandler(&log, nil)),
		OnError: func(w http.ResponseWriter, r *http.Request, err error) bool {
			got = err
			w.WriteHeader(499)
			return false
		},
	})
	h := m.Handler(ok)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 3 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil).WithContext(ctx))
		if rec.Code != 499 || !errors.Is(got, context.Canceled) {
			t.Fatalf("a request gone before its decision: %d, OnError got %v", rec.Code, got)
		}
	}
	if log.Len() != 0 {
		t.Errorf("logged:\n%s", log.String())
	}
	res, err := lim.AllowN(context.Background(), "k", 0)
	if err != nil || res.Remaining != 1 {
		t.Errorf("the key after requests gone before their decision: %+v %v, want its budget whole", res, err)
	}
	if rec := get(h, "/", "192.0.2.1:1"); rec.Code != 200 {
		t.Errorf("the next request: %d", rec.Code)
	}
}
