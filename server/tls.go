package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// certFiles serves a certificate from two PEM files and reloads it when
// either file changes. Every handshake compares the files' size and
// modification time with those of the loaded pair (two stat calls, small
// next to a handshake), so a rotated certificate is served from the next
// connection on, with no signal and no polling goroutine. A pair that does
// not load (a rotation caught between writing the certificate and the key)
// leaves the old certificate in service and is tried again on the next
// handshake.
type certFiles struct {
	certPath, keyPath string
	errs              *errorLog

	cur atomic.Pointer[loadedCert]
	mu  sync.Mutex // serialises reloads
}

type loadedCert struct {
	cert          *tls.Certificate
	certSt, keySt stamp
}

// stamp identifies one version of a file.
type stamp struct {
	size int64
	mod  time.Time
}

func stampOf(path string) (stamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return stamp{}, err
	}
	return stamp{fi.Size(), fi.ModTime()}, nil
}

func newCertFiles(certPath, keyPath string) (*certFiles, error) {
	if certPath == "" || keyPath == "" {
		return nil, fmt.Errorf("give both cert and key files")
	}
	c := &certFiles{certPath: certPath, keyPath: keyPath}
	if _, err := c.reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// reload loads the pair if it changed since the loaded one.
func (c *certFiles) reload() (*loadedCert, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cs, err := stampOf(c.certPath)
	if err != nil {
		return nil, err
	}
	ks, err := stampOf(c.keyPath)
	if err != nil {
		return nil, err
	}
	if cur := c.cur.Load(); cur != nil && cur.certSt == cs && cur.keySt == ks {
		return cur, nil
	}
	pair, err := tls.LoadX509KeyPair(c.certPath, c.keyPath)
	if err != nil {
		return nil, fmt.Errorf("load %s and %s: %w", c.certPath, c.keyPath, err)
	}
	lc := &loadedCert{cert: &pair, certSt: cs, keySt: ks}
	c.cur.Store(lc)
	return lc, nil
}

// GetCertificate is the tls.Config hook.
func (c *certFiles) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	cur := c.cur.Load()
	cs, err1 := stampOf(c.certPath)
	ks, err2 := stampOf(c.keyPath)
	if err1 == nil && err2 == nil && (cs != cur.certSt || ks != cur.keySt) {
		lc, err := c.reload()
		if err == nil {
			return lc.cert, nil
		}
		if c.errs != nil {
			c.errs.error(context.Background(), "proxy: tls certificate not reloaded; serving the previous one", slog.Any("error", err))
		}
	}
	return cur.cert, nil
}

// tlsConfig is the listener's TLS configuration: HTTP/2 and HTTP/1.1 by
// ALPN, TLS 1.2 at least.
func (c *certFiles) tlsConfig() *tls.Config {
	return &tls.Config{
		GetCertificate: c.GetCertificate,
		NextProtos:     []string{"h2", "http/1.1"},
		MinVersion:     tls.VersionTLS12,
	}
}
