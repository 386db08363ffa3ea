// A Fiber app limited by fiberlimit, checked over loopback.
package main

import (
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	fiberlimit "github.com/floodgate-go/floodgate/contrib/fiber"
	"github.com/gofiber/fiber/v3"
)

func main() {
	app := fiber.New()
	app.Use(fiberlimit.New(fiberlimit.Config{Max: 2, Expiration: time.Minute}))
	app.Get("/hello", func(c fiber.Ctx) error { return c.SendString("hello\n") })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go app.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true})
	defer app.Shutdown()
	codes := ""
	for i := range 3 {
		resp, err := http.Get("http://" + ln.Addr().String() + "/hello")
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		if i > 0 {
			codes += " "
		}
		codes += fmt.Sprint(resp.StatusCode)
	}
	if codes != "200 200 429" {
		log.Fatalf("fiberlimit Max 2 answered %s, want 200 200 429", codes)
	}
	fmt.Fprintln(os.Stderr, "fiber: ok")
}
