package daemon

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
)

// cost: response_header: the upstream's number settles what a request
// cost, a number above what is left puts the key in debt, and a missing,
// unparsable or negative number is unknown: the up-front unit stands,
// never a refund that would make the request free.
func TestResponseHeaderCost(t *testing.T) {
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.URL.Query().Get("tokens"); v != "none" {
			w.Header().Set("X-Tokens", v)
		}
		io.WriteString(w, "ok")
	}))
	d := started(t, fmt.Sprintf(`
policies:
  llm: {rate: 100/h}
proxy:
  listen: 127.0.0.1:0
  upstream: %s
  routes: [{limits: [{policy: llm, key: global, cost: "response_header:X-Tokens"}]}]
admin: {listen: ""}
`, up))
	base := "http://" + d.Addrs().Proxy.String() + "/?tokens="
	remaining := func() int {
		t.Helper()
		resp, err := http.Get(base + "0") // costs 0 once settled; shows the budget after its up-front unit
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		n, _ := strconv.Atoi(resp.Header.Get("X-Ratelimit-Remaining"))
		return n + 1 // its own up-front unit is given back
	}
	get := func(tokens string) int {
		t.Helper()
		resp, err := http.Get(base + tokens)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := remaining(); got != 100 {
		t.Fatalf("a fresh budget shows %d, want 100", got)
	}
	for _, v := range []string{"none", "garbage", "-5"} {
		before := remaining()
		get(v)
		if after := remaining(); after != before-1 {
			t.Errorf("a response with X-Tokens %s cost %d units, want the up-front 1", v, before-after)
		}
	}
	before := remaining()
	get("10")
	if after := remaining(); after != before-10 {
		t.Errorf("a response with X-Tokens 10 cost %d units, want 10", before-after)
	}
	get("5000") // far beyond the capacity: debt
	if code := get("0"); code != http.StatusTooManyRequests {
		t.Errorf("after a response of 5000 under 100/h: %d, want 429", code)
	}
}
