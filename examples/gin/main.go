// Command gin serves a gin API limited to 100 requests a minute per client
// address, and its login to 5 failed attempts an hour per address.
//
//	go run . -addr 127.0.0.1:8080
//	curl -i http://127.0.0.1:8080/hello
package main

import (
	"flag"
	"log"
	"net/http"
	"time"

	"github.com/floodgate-go/floodgate"
	ginlimit "github.com/floodgate-go/floodgate/contrib/gin"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/httpmatch"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/gin-gonic/gin"
)

func newRouter(store floodgate.Store) (http.Handler, error) {
	api, err := floodgate.New(store, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerMinute(100)}})
	if err != nil {
		return nil, err
	}
	login, err := floodgate.New(store, floodgate.Policy{Name: "login", Limits: []floodgate.Limit{floodgate.PerHour(5)}})
	if err != nil {
		return nil, err
	}
	mw, err := httplimit.New(httplimit.Config{Rules: []httplimit.Rule{
		{Limiter: api},
		{Limiter: login, Match: httpmatch.PathPrefix("/login"), Count: httplimit.CountFailed},
	}})
	if err != nil {
		return nil, err
	}
	r := gin.New()
	r.Use(gin.Recovery(), ginlimit.New(mw))
	r.GET("/hello", func(c *gin.Context) { c.String(http.StatusOK, "hello\n") })
	r.POST("/login", func(c *gin.Context) {
		if c.PostForm("password") != "open sesame" {
			c.AbortWithStatus(http.StatusUnauthorized)
			return
		}
		c.Status(http.StatusNoContent)
	})
	return r, nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	flag.Parse()
	store := memstore.New(memstore.Options{})
	defer store.Close()
	h, err := newRouter(store)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Addr: *addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
