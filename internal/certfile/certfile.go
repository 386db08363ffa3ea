// Package certfile serves a TLS certificate from its PEM files and picks up a
// rotated pair without a restart, for every listener of floodgate that
// terminates TLS.
package certfile

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/internal/denylog"
)

// A Pair serves a certificate from two PEM files and reloads it when
// either file changes. Every handshake compares the files' size and
// modification time with those of the loaded pair (two stat calls, small
// next to a handshake), so a rotated certificate is served from the next
// connection on, with no signal and no polling goroutine. A pair that does
// not load (a rotation caught between writing the certificate and the key)
// leaves the old certificate in service and is tried again on the next
// handshake.
type Pair struct {
	certPath, keyPath string
	errs              *denylog.Errors
	what              string

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

// Load loads the pair at certPath and keyPath. A failed reload later is
// logged on errs (when not nil) as a line starting with what, e.g.
// "proxy", and the previous certificate stays in service.
func Load(certPath, keyPath, what string, errs *denylog.Errors) (*Pair, error) {
	if certPath == "" || keyPath == "" {
		return nil, fmt.Errorf("give both cert and key files")
	}
	c := &Pair{certPath: certPath, keyPath: keyPath, what: what, errs: errs}
	if _, err := c.reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// reload loads the pair if it changed since the loaded one.
func (c *Pair) reload() (*loadedCert, error) {
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
func (c *Pair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	cur := c.cur.Load()
	cs, err1 := stampOf(c.certPath)
	ks, err2 := stampOf(c.keyPath)
	if err1 == nil && err2 == nil && (cs != cur.certSt || ks != cur.keySt) {
		lc, err := c.reload()
		if err == nil {
			return lc.cert, nil
		}
		if c.errs != nil {
			c.errs.Error(context.Background(), c.what+": tls certificate not reloaded; serving the previous one", slog.Any("error", err))
		}
	}
	return cur.cert, nil
}

// TLSConfig is a listener's TLS configuration serving the pair: TLS 1.2 at
// least, and the protocols offered by ALPN (e.g. "h2", "http/1.1"), if any.
func (c *Pair) TLSConfig(nextProtos ...string) *tls.Config {
	return &tls.Config{
		GetCertificate: c.GetCertificate,
		NextProtos:     nextProtos,
		MinVersion:     tls.VersionTLS12,
	}
}

// Pool reads the PEM file path into a certificate pool: the certificate
// authorities a connection trusts (a client's RootCAs, a listener's
// ClientCAs). A file with no PEM certificate is an error, not an empty
// pool that would trust nothing in silence.
func Pool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}
