// A gRPC server limited by floodgate's interceptors, and a client that
// waits out the limit the server reports, checked over loopback.
package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"os"
	"time"

	"github.com/floodgate-go/floodgate"
	grpclimit "github.com/floodgate-go/floodgate/contrib/grpc"
	"github.com/floodgate-go/floodgate/memstore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

func main() {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	api, err := floodgate.New(store, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerHour(2)}})
	if err != nil {
		log.Fatal(err)
	}
	in, err := grpclimit.New(grpclimit.Config{Rules: []grpclimit.Rule{{Limiter: api}}})
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(in.Unary()), grpc.ChainStreamInterceptor(in.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(ln)
	defer srv.Stop()

	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	var got []codes.Code
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		got = append(got, status.Code(err))
		if d, ok := grpclimit.RetryDelay(err); status.Code(err) == codes.ResourceExhausted && (!ok || d <= 0) {
			log.Fatalf("RESOURCE_EXHAUSTED without RetryInfo: %v", err)
		}
	}
	if fmt.Sprint(got) != "[OK OK ResourceExhausted]" {
		log.Fatalf("codes %v, want [OK OK ResourceExhausted]", got)
	}
	fmt.Fprintln(os.Stderr, "grpc: ok")
}
