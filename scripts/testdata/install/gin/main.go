// A gin service limited in one line, checked over loopback.
package main

import (
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	ginlimit "github.com/floodgate-go/floodgate/contrib/gin"
	"github.com/gin-gonic/gin"
)

func main() {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(ginlimit.ByIP(2, time.Minute))
	r.GET("/hello", func(c *gin.Context) { c.String(http.StatusOK, "hello\n") })
	if codes := serve(r, 3); codes != "200 200 429" {
		log.Fatalf("ginlimit.ByIP(2, time.Minute) answered %s, want 200 200 429", codes)
	}
	fmt.Fprintln(os.Stderr, "gin: ok")
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
