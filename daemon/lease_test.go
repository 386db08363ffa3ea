package daemon

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"encoding/json"

	"github.com/floodgate-go/floodgate/testkit"
)

// TestLeasedPolicy: a policy with lease: auto answers a hot key from
// leased blocks; a policy without lease never does.
func TestLeasedPolicy(t *testing.T) {
	srv := testkit.Redis(t)
	d := started(t, fmt.Sprintf(`
storage:
  engine: redis
  redis: {addrs: [%q]}
  failure: {mode: fail_closed}
policies:
  api: {rate: 100000/h, lease: auto, lease_max: 20}
  exact: {rate: 100000/h}
check: {listen: 127.0.0.1:0}
admin: {listen: ""}
`, srv.Addr))
	hc := &http.Client{Timeout: 10 * time.Second}
	url := "http://" + d.Addrs().Check.String() + "/v1/check"
	sources := func(policy string, n int) map[string]int {
		out := map[string]int{}
		for range n {
			resp, err := hc.Post(url, "application/json", strings.NewReader(fmt.Sprintf(`{"policy":%q,"key":"k"}`, policy)))
			if err != nil {
				t.Fatal(err)
			}
			var m struct{ Source string }
			if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			out[m.Source]++
		}
		return out
	}
	var got map[string]int
	testkit.Eventually(t, 10*time.Second, "a decision of api from a lease", func() bool {
		got = sources("api", 50)
		return got["lease"] > 0
	})
	if ex := sources("exact", 200); ex["lease"] > 0 {
		t.Fatalf("policy exact, without lease, was answered from a lease: %v", ex)
	}
	if d.engine.leased.Held() > 20*3/2 {
		t.Fatalf("holds %d units with lease_max 20", d.engine.leased.Held())
	}
}
