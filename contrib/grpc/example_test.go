package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/floodgate-go/floodgate"
	grpclimit "github.com/floodgate-go/floodgate/contrib/grpc"
	"github.com/floodgate-go/floodgate/memstore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A server whose calls are limited to two an hour per client address; the
// third fails with RESOURCE_EXHAUSTED and a RetryInfo, and every answer
// carries the rate-limit fields in its header metadata.
func ExampleNew() {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	api, _ := floodgate.New(store, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerHour(2)}})
	lim, err := grpclimit.New(grpclimit.Config{Rules: []grpclimit.Rule{{Limiter: api}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(lim.Unary()), grpc.ChainStreamInterceptor(lim.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(ln)
	defer srv.Stop()

	conn, _ := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	for range 3 {
		var md metadata.MD
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md))
		cancel()
		_, retry := grpclimit.RetryDelay(err)
		fmt.Println(status.Code(err), md.Get("x-ratelimit-remaining"), "retry info:", retry)
	}
	// Output:
	// OK [1] retry info: false
	// OK [0] retry info: false
	// ResourceExhausted [0] retry info: true
}
