package denylog

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
)

// TestSamplerKeys: keys are redacted in the denial lines unless raw.
func TestSamplerKeys(t *testing.T) {
	for _, raw := range []bool{false, true} {
		var buf bytes.Buffer
		s := New(slog.New(slog.NewTextHandler(&buf, nil)), raw)
		s.Denied(context.Background(), "proxy", "user:42", &floodgate.Result{Policy: "api"}, false)
		want := "key=" + floodgate.RedactKey("user:42")
		if raw {
			want = "key=user:42"
		}
		if !strings.Contains(buf.String(), want) {
			t.Errorf("raw %v: %q, want %s", raw, buf.String(), want)
		}
	}
}
