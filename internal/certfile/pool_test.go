package certfile_test

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/internal/certfile"
	"github.com/floodgate-go/floodgate/testkit"
)

// Pool trusts the certificate of a PEM file, and refuses a file with none
// (which would be a pool that trusts nothing) and a file that is missing.
func TestPool(t *testing.T) {
	dir := t.TempDir()
	c := testkit.WriteCert(t, dir, "ca", 1)
	pool, err := certfile.Pool(c.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "localhost"}); err != nil {
		t.Fatalf("the pool does not trust the file's certificate: %v", err)
	}
	empty := filepath.Join(dir, "empty.pem")
	os.WriteFile(empty, []byte("not a certificate\n"), 0o600)
	if _, err := certfile.Pool(empty); err == nil || !strings.Contains(err.Error(), "holds no PEM certificate") {
		t.Fatalf("a file without a certificate: err = %v, want it refused", err)
	}
	if _, err := certfile.Pool(filepath.Join(dir, "missing.pem")); !os.IsNotExist(err) {
		t.Fatalf("a missing file: err = %v, want not-exist", err)
	}
}
