package daemon

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpccreds "google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate/testkit"
)

// The Envoy listener over TLS with a token: a call without the token, or
// with another, is refused UNAUTHENTICATED before anything is counted; the
// token's call is decided; health checks need no token; plaintext clients
// do not get through the TLS listener at all.
func TestEnvoyListenerTLSAndToken(t *testing.T) {
	dir := t.TempDir()
	cert := testkit.WriteCert(t, dir, "envoy", 1)
	rl := filepath.Join(dir, "rl.yaml")
	if err := os.WriteFile(rl, []byte("domain: d\ndescriptors: [{key: k, rate_limit: {unit: minute, requests_per_unit: 1}}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := started(t, fmt.Sprintf(`
envoy:
  listen: 127.0.0.1:0
  ratelimit_config: [%q]
  tls: {cert: %q, key: %q}
  token: s3cret
admin: {listen: ""}
`, rl, cert.CertFile, cert.KeyFile))
	addr := d.Addrs().Envoy.String()
	pool := x509.NewCertPool()
	pool.AddCert(cert.Cert)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(grpccreds.NewTLS(&tls.Config{RootCAs: pool, ServerName: "localhost"})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rc := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
	callWith := func(c rlsv3.RateLimitServiceClient, token string) (*rlsv3.RateLimitResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if token != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
		}
		return c.ShouldRateLimit(ctx, req)
	}
	for _, token := range []string{"", "wrong"} {
		if _, err := callWith(rc, token); status.Code(err) != codes.Unauthenticated {
			t.Errorf("a call with token %q: %v, want UNAUTHENTICATED", token, err)
		}
	}
	// Nothing was counted by the refused calls: the one unit a minute is
	// still there for the token's first call, and gone for its second.
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp, err := callWith(rc, "s3cret")
		if err != nil || resp.OverallCode != want {
			t.Fatalf("call %d with the token: %v, %v; want %v", i+1, resp.GetOverallCode(), err, want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health check without a token: %v, %v; want SERVING", h.GetStatus(), err)
	}
	plain, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := callWith(rlsv3.NewRateLimitServiceClient(plain), "s3cret"); status.Code(err) != codes.Unavailable {
		t.Errorf("a plaintext call to the TLS listener: %v, want UNAVAILABLE", err)
	}
}
