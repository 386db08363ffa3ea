package statuswriter

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// hijackable is a ResponseWriter whose connection can be taken over.
type hijackable struct {
	*httptest.ResponseRecorder
	hijacked bool
}

func (h *hijackable) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h.hijacked = true
	return nil, nil, nil
}

// plain hides every method of a ResponseWriter but the interface.
type plain struct{ http.ResponseWriter }

func TestStatusWriter(t *testing.T) {
	t.Run("informational then final", func(t *testing.T) {
		sw := &Writer{ResponseWriter: httptest.NewRecorder()}
		sw.WriteHeader(http.StatusEarlyHints)
		sw.WriteHeader(http.StatusUnauthorized)
		sw.WriteHeader(http.StatusOK) // superfluous, ignored
		if sw.Status != 401 {
			t.Fatalf("status %d, want 401", sw.Status)
		}
	})
	t.Run("write implies 200", func(t *testing.T) {
		sw := &Writer{ResponseWriter: httptest.NewRecorder()}
		io.WriteString(sw, "x")
		if sw.Status != 200 {
			t.Fatalf("status %d", sw.Status)
		}
	})
	t.Run("hijack counts as switching protocols", func(t *testing.T) {
		hj := &hijackable{ResponseRecorder: httptest.NewRecorder()}
		sw := &Writer{ResponseWriter: hj}
		if _, _, err := sw.Hijack(); err != nil || !hj.hijacked || sw.Status != http.StatusSwitchingProtocols {
			t.Fatalf("err %v hijacked %v status %d", err, hj.hijacked, sw.Status)
		}
	})
	t.Run("hijack unsupported", func(t *testing.T) {
		sw := &Writer{ResponseWriter: plain{httptest.NewRecorder()}}
		if _, _, err := sw.Hijack(); !errors.Is(err, http.ErrNotSupported) || sw.Status != 0 {
			t.Fatalf("err %v status %d", err, sw.Status)
		}
	})
	t.Run("flush without flusher", func(t *testing.T) {
		sw := &Writer{ResponseWriter: plain{httptest.NewRecorder()}}
		sw.Flush()
		if sw.Status != 200 {
			t.Fatalf("status %d", sw.Status)
		}
	})
	t.Run("read from without reader from", func(t *testing.T) {
		rec := httptest.NewRecorder()
		sw := &Writer{ResponseWriter: plain{rec}}
		if n, err := sw.ReadFrom(strings.NewReader("abc")); n != 3 || err != nil || rec.Body.String() != "abc" {
			t.Fatalf("n %d err %v body %q", n, err, rec.Body)
		}
	})
	t.Run("unwrap", func(t *testing.T) {
		rec := httptest.NewRecorder()
		sw := &Writer{ResponseWriter: rec}
		if sw.Unwrap() != rec {
			t.Fatal("Unwrap does not return the writer underneath")
		}
	})
}
