// Command fiber serves a Fiber v3 app limited per client: 100 requests an
// hour, 200 for clients that send the key of the pro plan, with a login
// that counts failed attempts only. With -redis ADDR every instance shares
// its limits through Redis.
//
//	go run . -addr 127.0.0.1:8080
//	curl -i http://127.0.0.1:8080/hello
package main

import (
	"flag"
	"log"
	"time"

	"github.com/floodgate-go/floodgate"
	fiberlimit "github.com/floodgate-go/floodgate/contrib/fiber"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/gofiber/fiber/v3"
	"github.com/redis/go-redis/v9"
)

func newApp(store floodgate.Store) *fiber.App {
	app := fiber.New()
	app.Use(fiberlimit.New(fiberlimit.Config{
		Store:      store,
		Max:        100,
		Expiration: time.Hour,
		MaxFunc: func(c fiber.Ctx) int {
			if c.Get("X-Api-Key") == "pro-key" { // an example; check real keys
				return 200
			}
			return 100
		},
		Next: func(c fiber.Ctx) bool { return c.Path() == "/healthz" },
	}))
	app.Get("/hello", func(c fiber.Ctx) error { return c.SendString("hello\n") })
	app.Get("/healthz", func(c fiber.Ctx) error { return c.SendString("ok\n") })
	app.Post("/login", fiberlimit.New(fiberlimit.Config{
		Store: store, Name: "login", Max: 5, Expiration: time.Hour, SkipSuccessfulRequests: true,
	}), func(c fiber.Ctx) error {
		if c.FormValue("password") != "open sesame" {
			return fiber.ErrUnauthorized
		}
		return c.SendStatus(fiber.StatusNoContent)
	})
	return app
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	redisAddr := flag.String("redis", "", "Redis address (host:port); empty keeps limits in memory")
	flag.Parse()
	var store floodgate.Store
	if *redisAddr != "" {
		rs, err := redisstore.New(redis.NewClient(&redis.Options{Addr: *redisAddr, ContextTimeoutEnabled: true}), redisstore.Options{})
		if err != nil {
			log.Fatal(err)
		}
		defer rs.Close()
		store = rs
	} else {
		ms := memstore.New(memstore.Options{})
		defer ms.Close()
		store = ms
	}
	log.Fatal(newApp(store).Listen(*addr))
}
