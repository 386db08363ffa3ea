package daemon

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/tokencost/llmtest"
)

// BenchmarkStreamLatency: event streams of the test upstream (20 chunks,
// 2 ms apart) through two proxies in one process, one whose limits charge
// a flat cost and one whose limits read the stream's tokens (input and
// output budgets), alternating stream by stream. It reports, for each,
// the time to first byte (request sent to the first event read) and the
// gap between consecutive events as the client reads them, p50 and p99.
// Run with -benchtime Nx: N streams through each proxy.
func BenchmarkStreamLatency(b *testing.B) {
	srv := httptest.NewServer(llmtest.Handler{})
	b.Cleanup(srv.Close)
	up := srv.URL
	proxyOf := func(limits string) string {
		d := started(b, fmt.Sprintf(`
policies:
  input: {rate: 1000000000/h}
  output: {rate: 1000000000/h}
proxy:
  listen: 127.0.0.1:0
  upstream: %s
  routes:
    - limits:
%s
admin: {listen: ""}
`, up, limits))
		return "http://" + d.Addrs().Proxy.String() + "/v1/chat/completions"
	}
	plain := proxyOf(`        - {policy: input, key: ip}
        - {policy: output, key: ip}`)
	tokens := proxyOf(`        - {policy: input, key: ip, cost: tokens:input}
        - {policy: output, key: ip, cost: tokens:output}`)
	body := `{"model":"m","max_tokens":100,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello"}]}`
	type samples struct{ ttfb, gap []time.Duration }
	var res [2]samples
	stream := func(url string, s *samples) {
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		req.Header.Set("Llmtest-Chunks", "20")
		req.Header.Set("Llmtest-Gap", "2ms")
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		var last time.Time
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				break
			}
			if !strings.HasPrefix(line, "data:") {
				continue
			}
			now := time.Now()
			if last.IsZero() {
				s.ttfb = append(s.ttfb, now.Sub(start))
			} else {
				s.gap = append(s.gap, now.Sub(last))
			}
			last = now
		}
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	b.ResetTimer()
	for i := range b.N {
		// Alternate which goes first, so that neither always follows the other.
		if i%2 == 0 {
			stream(plain, &res[0])
			stream(tokens, &res[1])
		} else {
			stream(tokens, &res[1])
			stream(plain, &res[0])
		}
	}
	b.StopTimer()
	pct := func(d []time.Duration, p float64) float64 {
		slices.Sort(d)
		return float64(d[int(float64(len(d)-1)*p)].Microseconds())
	}
	for i, name := range []string{"plain", "tokens"} {
		s := res[i]
		if len(s.ttfb) == 0 || len(s.gap) == 0 {
			return // a run too short to sample
		}
		b.ReportMetric(pct(s.ttfb, 0.5), name+"-ttfb-p50-µs")
		b.ReportMetric(pct(s.ttfb, 0.99), name+"-ttfb-p99-µs")
		b.ReportMetric(pct(s.gap, 0.5), name+"-gap-p50-µs")
		b.ReportMetric(pct(s.gap, 0.99), name+"-gap-p99-µs")
	}
}
