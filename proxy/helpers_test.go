package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"
)

// start serves a proxy of cfg on a free loopback port (over TLS when cfg
// says so) until t ends, and returns it with its address.
func start(t testing.TB, cfg Config) (*Proxy, string) {
	t.Helper()
	return startServer(t, cfg, nil)
}

// startServer is start with the server's settings changed by set (nil
// changes none).
func startServer(t testing.TB, cfg Config, set func(*http.Server)) (*Proxy, string) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: p, TLSConfig: p.TLSConfig(), ErrorLog: slog.NewLogLogger(slog.DiscardHandler, slog.LevelWarn)}
	if set != nil {
		set(srv)
	}
	done := make(chan error, 1)
	go func() {
		if srv.TLSConfig != nil {
			done <- srv.ServeTLS(ln, "", "")
		} else {
			done <- srv.Serve(ln)
		}
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	return p, ln.Addr().String()
}
