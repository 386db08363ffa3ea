package fiberlimit_test

import (
	"fmt"
	"net/http/httptest"
	"time"

	fiberlimit "github.com/floodgate-go/floodgate/contrib/fiber"
	"github.com/gofiber/fiber/v3"
)

func show(app *fiber.App, method, path string, n int) {
	for range n {
		resp, err := app.Test(httptest.NewRequest(method, path, nil))
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("X-Ratelimit-Remaining"))
	}
}

// Two requests a minute per client address, in one line.
func ExampleByIP() {
	app := fiber.New()
	app.Use(fiberlimit.ByIP(2, time.Minute))
	app.Get("/hello", func(c fiber.Ctx) error { return c.SendString("hello") })
	show(app, "GET", "/hello", 3)
	// Output:
	// 200 1
	// 200 0
	// 429 0
}

// Fiber's configuration: a login that counts failed attempts only, 5 per
// 15 minutes from the first, answered in the app's own error envelope.
func ExampleNew() {
	app := fiber.New()
	app.Post("/login", fiberlimit.New(fiberlimit.Config{
		Max:                    2,
		Expiration:             15 * time.Minute,
		SkipSuccessfulRequests: true,
		LimitReached: func(c fiber.Ctx) error {
			return c.Status(fiber.StatusTooManyRequests).JSON(fiber.Map{"error": "too many attempts", "code": 429})
		},
	}), func(c fiber.Ctx) error { return fiber.ErrUnauthorized })
	show(app, "POST", "/login", 3)
	// Output:
	// 401 1
	// 401 0
	// 429 0
}
