package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/testkit"
)

// selfSigned makes a certificate for 127.0.0.1 with the given serial and
// returns its PEM files' contents and the parsed certificate.
func selfSigned(t *testing.T, serial int64) (certPEM, keyPEM []byte, cert *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial),
		Subject:               pkix.Name{CommonName: "floodgate test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ = x509.ParseCertificate(der)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), cert
}

// writeAtomically replaces path's contents the way rotation tools do: a
// new file renamed over the old one.
func writeAtomically(t *testing.T, path string, b []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestProxyTLSHTTP2AndRotation(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	c1, k1, x1 := selfSigned(t, 1)
	c2, k2, x2 := selfSigned(t, 2)
	writeAtomically(t, certFile, c1)
	writeAtomically(t, keyFile, k1)

	up, _ := upstream(t)
	api := floodgatetest.MemLimiter(t, "api", floodgate.PerMinute(100))
	_, addr := start(t, Config{
		Upstream: up.URL,
		TLS:      &TLSFiles{Cert: certFile, Key: keyFile},
		Routes:   []Route{{Limits: []httplimit.Rule{{Limiter: api}}}},
	})
	roots := x509.NewCertPool()
	roots.AddCert(x1)
	roots.AddCert(x2)
	url := "https://" + addr + "/"
	// get makes a request on a new connection and returns the serial of
	// the certificate served.
	get := func() int64 {
		t.Helper()
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		resp, body := testkit.Do(t, &http.Client{Transport: tr}, testkit.NewRequest(t, "GET", url, nil))
		if resp.StatusCode != 200 || body != "hello" {
			t.Fatalf("%d %q", resp.StatusCode, body)
		}
		if resp.ProtoMajor != 2 {
			t.Errorf("protocol %s, want HTTP/2", resp.Proto)
		}
		if resp.Header.Get("X-Ratelimit-Limit") != "100" {
			t.Errorf("no rate-limit fields over TLS: %v", resp.Header)
		}
		return resp.TLS.PeerCertificates[0].SerialNumber.Int64()
	}
	if s := get(); s != 1 {
		t.Fatalf("serial %d, want 1", s)
	}
	writeAtomically(t, certFile, c2)
	writeAtomically(t, keyFile, k2)
	if s := get(); s != 2 {
		t.Fatalf("after rotation: serial %d, want 2", s)
	}
	// A broken pair (a certificate without its key) keeps the last good
	// certificate in service.
	writeAtomically(t, keyFile, k1)
	if s := get(); s != 2 {
		t.Fatalf("after a mismatched key: serial %d, want 2 still", s)
	}
	if _, err := New(Config{TLS: &TLSFiles{Cert: certFile, Key: filepath.Join(dir, "missing")}}); err == nil {
		t.Error("a missing key file accepted")
	}
}
