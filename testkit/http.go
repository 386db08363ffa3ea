package testkit

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// Do sends req with c (http.DefaultClient when nil) and returns the response
// with its body read and closed; a transport error fails the test.
func Do(t testing.TB, c *http.Client, req *http.Request) (*http.Response, string) {
	t.Helper()
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// NewRequest is http.NewRequest that fails the test on a malformed URL. A
// request with a body is sent as JSON (Content-Type: application/json), as
// floodgate's APIs take it.
func NewRequest(t testing.TB, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

// A Buffer collects what several goroutines write, a daemon's log say, and
// is safe to read while they write.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
