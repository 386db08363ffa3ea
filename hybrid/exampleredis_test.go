package hybrid_test

import (
	"os"
	"sync"
	"testing"

	"github.com/floodgate-go/floodgate/testkit"
)

// exampleRedis is the redis-server the package's Examples talk to. An
// Example has no *testing.T to start one through testkit, so redisAddr
// starts it on first use and TestMain kills it.
var exampleRedis struct {
	once sync.Once
	srv  *testkit.RedisServer
	err  error
}

// redisAddr returns the address of a redis-server started for the
// Examples on a free loopback port. A missing redis-server fails the
// Example that needs it, as it fails every Redis test.
func redisAddr() string {
	exampleRedis.once.Do(func() { exampleRedis.srv, exampleRedis.err = testkit.StartRedis() })
	if exampleRedis.err != nil {
		panic(exampleRedis.err)
	}
	return exampleRedis.srv.Addr
}

func TestMain(m *testing.M) {
	code := m.Run()
	if exampleRedis.srv != nil {
		exampleRedis.srv.Kill()
	}
	os.Exit(code)
}
