// Command grpc serves the gRPC health service limited to 10 checks a second
// per client address, and checks it with a client that waits out the
// RetryInfo of a RESOURCE_EXHAUSTED answer once.
//
//	go run . -addr 127.0.0.1:50051
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clock"
	grpclimit "github.com/floodgate-go/floodgate/contrib/grpc"
	"github.com/floodgate-go/floodgate/memstore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func newServer(store floodgate.Store) (*grpc.Server, error) {
	checks, err := floodgate.New(store, floodgate.Policy{Name: "health", Limits: []floodgate.Limit{floodgate.PerSecond(10)}})
	if err != nil {
		return nil, err
	}
	lim, err := grpclimit.New(grpclimit.Config{Rules: []grpclimit.Rule{
		{Limiter: checks, Methods: []string{"/grpc.health.v1.Health/"}},
	}})
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(lim.Unary()), grpc.ChainStreamInterceptor(lim.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	return srv, nil
}

// run serves on ln and makes n checks through a retrying client; it
// returns how many passed.
func run(ln net.Listener, store floodgate.Store, n int) (int, error) {
	srv, err := newServer(store)
	if err != nil {
		return 0, err
	}
	go srv.Serve(ln)
	defer srv.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpclimit.RetryUnary(time.Second)))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	c := healthpb.NewHealthClient(conn)
	passed := 0
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil {
			passed++
		}
	}
	return passed, nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:50051", "listen address")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	store := memstore.New(memstore.Options{Clock: clock.System})
	defer store.Close()
	passed, err := run(ln, store, 25)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d of 25 checks passed; the client waited out the limit where the server said to\n", passed)
}
