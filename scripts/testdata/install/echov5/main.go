// An Echo v5 service limited in one line, checked over loopback.
package main

import (
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	echolimit "github.com/floodgate-go/floodgate/contrib/echov5"
	"github.com/labstack/echo/v5"
)

func main() {
	r := echo.New()
	r.Use(echolimit.ByIP(2, time.Minute))
	r.GET("/hello", func(c *echo.Context) error { return c.String(http.StatusOK, "hello\n") })
	if codes := serve(r, 3); codes != "200 200 429" {
		log.Fatalf("echolimit.ByIP(2, time.Minute) answered %s, want 200 200 429", codes)
	}
	fmt.Fprintln(os.Stderr, "echov5: ok")
}

func serve(h http.Handler, n int) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	codes := ""
	for i := range n {
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
	return codes
}
