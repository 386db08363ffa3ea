package replay

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// benchLog is n requests from 1000 clients over about ten minutes.
func benchLog(n int) []logReq {
	out := make([]logReq, n)
	for i := range out {
		out[i] = logReq{time.Duration(i) * 60 * time.Millisecond, fmt.Sprintf("192.0.%d.%d", i%1000/250, i%250+1), "GET",
			fmt.Sprintf("/api/items/%d?page=%d", i%97, i%7), 200}
	}
	return out
}

// BenchmarkReplay measures whole replays of a 10k-line log, per format,
// through one configuration (against=none) and through two, as
// `floodgate replay -against` runs; lines/s is the figure, and an
// operation is the whole log, the configurations' construction included.
func BenchmarkReplay(b *testing.B) {
	const lines = 10000
	traffic := benchLog(lines)
	logs := map[Format]string{FormatNginx: nginxLog(traffic), FormatEnvoy: envoyLog(traffic), FormatJSON: jsonLog(traffic)}
	cand := configFile(&testing.T{}, "a.yaml", "5/min", "ip")
	cur := configFile(&testing.T{}, "b.yaml", "100/min", "ip")
	for _, f := range []Format{FormatNginx, FormatEnvoy, FormatJSON} {
		for _, against := range []string{"none", "file"} {
			b.Run(fmt.Sprintf("format=%s/against=%s", f, against), func(b *testing.B) {
				ag := cur
				if against == "none" {
					ag = nil
				}
				b.ReportAllocs()
				b.SetBytes(int64(len(logs[f])))
				for b.Loop() {
					rep, err := Run(context.Background(), strings.NewReader(logs[f]), cand, ag, RunOptions{Format: f})
					if err != nil || rep.Requests != lines {
						b.Fatalf("%v, %d requests", err, rep.Requests)
					}
				}
				b.ReportMetric(float64(b.N)*lines/b.Elapsed().Seconds(), "lines/s")
			})
		}
	}
}

// BenchmarkParse measures reading one line, per format: the share of a
// replay that is parsing.
func BenchmarkParse(b *testing.B) {
	r := benchLog(1)
	for _, f := range []Format{FormatNginx, FormatEnvoy, FormatJSON} {
		line := []byte(strings.TrimSpace(map[Format]string{FormatNginx: nginxLog(r), FormatEnvoy: envoyLog(r), FormatJSON: jsonLog(r)}[f]))
		b.Run("format="+string(f), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(f, line, Options{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lines/s")
		})
	}
}
