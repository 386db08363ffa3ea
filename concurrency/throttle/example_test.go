package throttle_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/concurrency/adaptive"
	"github.com/floodgate-go/floodgate/concurrency/throttle"
	"github.com/floodgate-go/floodgate/httplimit"
)

// At most one request is served at once; the next is refused with 503
// and headers that say why.
func ExampleLimit() {
	entered, release := make(chan struct{}), make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
	})
	h := throttle.Limit(1)(slow)
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/report", nil))
	}()
	<-entered

	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/report", nil))
	fmt.Println(w.Code, w.Header().Get("X-Concurrency-Limit"), w.Header().Get("X-Concurrency-Remaining"), w.Header().Get("X-Concurrency-Refused"))
	fmt.Print(w.Body.String())
	close(release)
	<-done
	// Output:
	// 503 1 0 full
	// {"type":"about:blank","title":"Service Unavailable","status":503,"detail":"Too many requests are in progress; retry when one finishes.","reason":"full"}
}

// Each API key gets two requests in flight, and an adaptive limit on top
// sheds load when the handler's latency climbs.
func ExampleNew() {
	perKey, err := concurrency.New(concurrency.NewLocal(), concurrency.Options{Name: "per-key", Limit: 2, MaxWaiting: 4, MaxWait: time.Second})
	if err != nil {
		panic(err)
	}
	byKey, err := throttle.New(throttle.Config{Limiter: perKey, Key: httplimit.KeyByHeader("X-API-Key", httplimit.KeyByIP(nil))})
	if err != nil {
		panic(err)
	}
	g, err := adaptive.NewGradient(adaptive.GradientOptions{})
	if err != nil {
		panic(err)
	}
	shared, err := concurrency.New(concurrency.NewLocal(), concurrency.Options{Name: "backend", Controller: g})
	if err != nil {
		panic(err)
	}
	shed, err := throttle.New(throttle.Config{Limiter: shared})
	if err != nil {
		panic(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	h := shed.Handler(byKey.Handler(ok))

	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-API-Key", "k1")
	h.ServeHTTP(w, r)
	fmt.Print(w.Code, " ", w.Body.String())
	// Output: 200 ok
}
