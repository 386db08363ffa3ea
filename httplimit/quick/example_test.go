package quick_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/floodgate-go/floodgate/httplimit/quick"
)

// One line limits every client address, here to 2 requests a minute.
func ExampleLimitByIP() {
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello\n") })
	h := quick.LimitByIP(2, time.Minute)(hello)

	for range 3 {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = "192.0.2.7:4711"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("RateLimit"))
	}
	// Output:
	// 200 "ip";r=1;t=30
	// 200 "ip";r=0;t=60
	// 429 "ip";r=0;t=30
}
