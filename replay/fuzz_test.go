package replay

import (
	"context"
	"strings"
	"testing"
)

var nginxSeeds = []string{
	`192.0.2.1 - - [30/Nov/2026:10:00:00 +0100] "GET /api/items?x=1 HTTP/1.1" 200 612 "-" "curl/8.5.0"`,
	`2001:db8::1 - alice [30/Nov/2026:10:00:00 -0500] "POST /login HTTP/2.0" 401 0 "https://example.com/" "Mozilla/5.0 (X11; Linux x86_64)" "198.51.100.2"`,
	`192.0.2.1 - - [30/Nov/2026:10:00:00 +0000] "\x16\x03\x01\x02\x00\x01\x00\x01\xFC\x03\x03" 400 157 "-" "-"`,
	`192.0.2.1 - - [30/Nov/2026:10:00:00 +0000] "GET /a\"b HTTP/1.1" 200 1 "-" "ua \\ x"`,
	`192.0.2.1 - - [30/Nov/2026:10:00:00 +0000] "-" 400 0 "-" "-"`,
	`192.0.2.1 - - [30/Nov/2026:10:00:00 +0000] "GET http://api.example.com/x HTTP/1.1" 200 1 "-" "-"`,
	`time=2026-11-30T10:00:00.000Z level=INFO msg="request denied" front=proxy policy=api key=k:0123456789ab`,
	`not a line`, `"`, `[`, ``,
}

var envoySeeds = []string{
	`[2026-11-30T10:00:00.310Z] "POST /api/v1/locations HTTP/2" 204 - 154 0 226 100 "10.0.35.28" "nsq2http" "cc21d9b0-cf5c-432b-8c7e-98aeb7988cd2" "locations" "tcp://10.0.2.1:80"`,
	`[2026-11-30T10:00:00.000Z] "GET /x HTTP/1.1" 0 UC 0 0 1 - "-" "-" "-" "-" "-"`,
	`[2026-11-30T10:00:00.000Z] "GET /x HTTP/1.1" 429 RL 0 0 1 - "198.51.100.7, 10.1.1.1" "ua" "id" "api.example.com:8443" "-" "k-1"`,
	`[2026-11-30T10:00:00.000Z] "CONNECT example.com:443 HTTP/1.1" 200 - 0 0 1 - "-" "-" "-" "-" "-"`,
	`[2026-11-30T10:00:00Z] "GET /x HTTP/1.1" 200`, `[`, `[] ""`,
}

var jsonSeeds = []string{
	`{"time":"2026-11-30T10:00:00.5Z","method":"GET","path":"/api/a?b=c","host":"api.example.com","peer":"192.0.2.1:40000","status":200,"headers":{"X-Api-Key":"k-1","X-Forwarded-For":["198.51.100.1","10.0.0.1"]}}`,
	`{"time":1764496800.25,"method":"POST","path":"/llm","peer":"2001:db8::1","status":200,"response_headers":{"X-Tokens":"1500"}}`,
	`{"time":"2026-11-30T10:00:00Z","level":"INFO","msg":"request denied","front":"proxy","policy":"api","key":"k:0123456789ab"}`,
	`{"time":"yesterday","method":"GET","path":"/"}`,
	`{"time":1e300,"method":"GET","path":"/"}`,
	`{"method":"GET"} {"x":1}`, `{`, `[]`, `null`,
}

// checkRequest holds what every parsed request satisfies, and decides it:
// building the *http.Request and the proxy's decision must not panic
// either, whatever the line held.
func checkRequest(t *testing.T, sim *Sim, r Request, err error) {
	if err != nil {
		if Reason(err) == "" {
			t.Fatalf("error %v has no reason", err)
		}
		return
	}
	if r.Method == "" || r.Target == "" {
		t.Fatalf("parsed %+v without a method or target", r)
	}
	if r.Status < 0 || r.Status > 999 {
		t.Fatalf("status %d", r.Status)
	}
	if r.Peer == "" {
		r.Peer = "192.0.2.99"
	}
	if _, err := sim.Evaluate(context.Background(), &r); err != nil && strings.Contains(err.Error(), "proxy section") {
		t.Fatal(err)
	}
}

func fuzzSim(f *testing.F) *Sim {
	cfg := configFile(&testing.T{}, "fuzz.yaml", "5/min", "ip")
	sim, err := NewSim(cfg)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(sim.Close)
	return sim
}

func FuzzParseNginx(f *testing.F) {
	for _, s := range nginxSeeds {
		f.Add(s)
	}
	sim := fuzzSim(f)
	f.Fuzz(func(t *testing.T, line string) {
		r, err := ParseNginx([]byte(line), Options{ExtraHeaders: []string{"X-Forwarded-For"}})
		if err == nil && !validAddr(r.Peer) {
			t.Fatalf("peer %q is not an address", r.Peer)
		}
		checkRequest(t, sim, r, err)
	})
}

func FuzzParseEnvoy(f *testing.F) {
	for _, s := range envoySeeds {
		f.Add(s)
	}
	sim := fuzzSim(f)
	f.Fuzz(func(t *testing.T, line string) {
		r, err := ParseEnvoy([]byte(line), Options{ExtraHeaders: []string{"X-Api-Key"}})
		checkRequest(t, sim, r, err)
	})
}

func FuzzParseJSON(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add(s)
	}
	sim := fuzzSim(f)
	f.Fuzz(func(t *testing.T, line string) {
		r, err := ParseJSON([]byte(line))
		if err == nil && r.Time.IsZero() {
			t.Fatalf("parsed %+v without a time", r)
		}
		checkRequest(t, sim, r, err)
	})
}

// FuzzRun replays a whole log of any bytes: every line is a request or
// counted malformed, never lost, and nothing panics.
func FuzzRun(f *testing.F) {
	for _, seeds := range [][]string{nginxSeeds, envoySeeds, jsonSeeds} {
		f.Add(strings.Join(seeds, "\n"))
	}
	f.Add(strings.Repeat("\n", 3) + "\r\n")
	cand := configFile(&testing.T{}, "a.yaml", "5/min", "ip")
	cur := configFile(&testing.T{}, "b.yaml", "2/min", "header:X-Api-Key")
	f.Fuzz(func(t *testing.T, log string) {
		rep, err := Run(context.Background(), strings.NewReader(log), cand, cur, RunOptions{Peer: "192.0.2.9"})
		if err != nil {
			t.Fatal(err)
		}
		blank := 0
		for _, l := range strings.Split(strings.TrimSuffix(log, "\n"), "\n") {
			if strings.TrimSpace(l) == "" {
				blank++
			}
		}
		if log == "" {
			blank = 0
		}
		if got := rep.Requests + rep.Malformed + int64(blank); got != int64(rep.Lines) {
			t.Fatalf("%d requests + %d malformed + %d blank != %d lines", rep.Requests, rep.Malformed, blank, rep.Lines)
		}
		var sum int64
		for _, r := range rep.Routes {
			sum += r.Requests
			if r.Allowed+r.Denied != r.Requests {
				t.Fatalf("route %+v: allowed + denied != requests", r)
			}
		}
		if sum != rep.Requests {
			t.Fatalf("routes count %d requests of %d", sum, rep.Requests)
		}
	})
}
