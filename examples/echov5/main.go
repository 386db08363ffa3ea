// Command echov5 serves an Echo v5 API limited to 100 requests an hour per
// client, behind a proxy at 10.0.0.0/8 whose X-Forwarded-For is trusted
// (and nobody else's).
//
//	go run . -addr 127.0.0.1:8080
//	curl -i http://127.0.0.1:8080/hello
package main

import (
	"context"
	"flag"
	"log"
	"net/http"
	"os"
	"os/signal"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clientip"
	echolimit "github.com/floodgate-go/floodgate/contrib/echov5"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"
)

func newEcho(store floodgate.Store) (*echo.Echo, error) {
	api, err := floodgate.New(store, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerHour(100)}})
	if err != nil {
		return nil, err
	}
	proxies, err := clientip.New(clientip.Config{TrustedProxies: []string{"10.0.0.0/8"}})
	if err != nil {
		return nil, err
	}
	mw, err := httplimit.New(httplimit.Config{Rules: []httplimit.Rule{{Limiter: api, Key: httplimit.KeyByIP(proxies)}}})
	if err != nil {
		return nil, err
	}
	e := echo.New()
	e.Use(middleware.Recover(), echolimit.New(mw))
	e.GET("/hello", func(c *echo.Context) error { return c.String(http.StatusOK, "hello\n") })
	return e, nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	flag.Parse()
	store := memstore.New(memstore.Options{})
	defer store.Close()
	e, err := newEcho(store)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	sc := echo.StartConfig{Address: *addr, HideBanner: true}
	if err := sc.Start(ctx, e); err != nil {
		log.Fatal(err)
	}
}
