package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// replayConfig is a configuration with an api route (rate per client) and
// a login route that counts failed attempts only.
func replayConfig(up, rate string) string {
	return fmt.Sprintf(`
policies:
  api:
    rate: %s
  login:
    rate: 3/hour
proxy:
  listen: 127.0.0.1:0
  upstream: %s
  routes:
    - name: login
      match: {path: /login}
      limits:
        - {policy: login, key: ip, count: failed}
    - name: api
      match: {path_prefix: ["/api"]}
      limits:
        - {policy: api, key: ip}
admin:
  listen: ""
`, rate, up)
}

// The replay of a log predicts what the daemon really did: the requests
// sent to `floodgate serve` are written as a JSON-lines log with the
// statuses the daemon answered, and `floodgate replay` of that log through
// the same configuration denies exactly the requests the daemon answered
// 429, route by route; against a looser configuration, every one of them
// flips. The limits are per hour, so the machine's speed cannot change
// what the daemon decides.
func TestReplayPredictsServe(t *testing.T) {
	up := upstream(t)
	d := startDaemon(t, replayConfig(up, "5/hour"), "proxy")
	base := "http://" + d.addr("proxy")
	type sent struct {
		path, password string
		status         int
	}
	var reqs []sent
	for i := range 9 {
		reqs = append(reqs, sent{path: fmt.Sprintf("/api/items/%d", i)})
	}
	reqs = append(reqs, sent{path: "/login", password: "right"}, sent{path: "/login", password: "right"})
	for range 5 {
		reqs = append(reqs, sent{path: "/login", password: "wrong"})
	}
	denied := map[string]int{}
	for i := range reqs {
		r := &reqs[i]
		resp := get(t, base+r.path, "X-Password", r.password)
		r.status = resp.StatusCode
		if r.status == http.StatusTooManyRequests {
			denied[strings.Trim(strings.SplitN(r.path, "/", 3)[1], "/")]++
		}
	}
	if denied["api"] != 4 || denied["login"] != 2 {
		t.Fatalf("the daemon denied %v; want api 4, login 2 (statuses %+v)", denied, reqs)
	}

	dir := t.TempDir()
	var log bytes.Buffer
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	for i, r := range reqs {
		line, _ := json.Marshal(map[string]any{"time": t0.Add(time.Duration(i) * time.Millisecond).Format(time.RFC3339Nano),
			"method": "GET", "path": r.path, "peer": "127.0.0.1:50000", "status": r.status})
		log.Write(append(line, '\n'))
	}
	log.WriteString("a line that is no request\n")
	logFile := filepath.Join(dir, "access.jsonl")
	loose := filepath.Join(dir, "loose.yaml")
	for file, data := range map[string]string{logFile: log.String(), loose: replayConfig(up, "100/hour")} {
		if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(binary, "replay", "-config", d.file, "-against", loose, "-json", "-raw-keys", logFile).Output()
	if err != nil {
		t.Fatalf("floodgate replay: %v\n%s", err, out)
	}
	var rep struct {
		Requests, Malformed int
		Routes              []struct {
			Name             string
			Requests, Denied int
			Change           struct{ Denied int }
		}
		Flipped struct{ Denied, Allowed int }
		Flips   []struct {
			Key, Policy string
			NewlyDenied int `json:"newly_denied"`
		}
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if rep.Requests != len(reqs) || rep.Malformed != 1 {
		t.Errorf("%d requests, %d malformed; want %d, 1", rep.Requests, rep.Malformed, len(reqs))
	}
	for _, r := range rep.Routes {
		if r.Denied != denied[r.Name] {
			t.Errorf("replay denies %d on route %s; the daemon denied %d", r.Denied, r.Name, denied[r.Name])
		}
	}
	if rep.Flipped.Denied != 4 || len(rep.Flips) != 1 || rep.Flips[0].Key != "127.0.0.1" || rep.Flips[0].Policy != "api" {
		t.Errorf("flipped %+v, flips %+v; want the 4 api denials of 127.0.0.1", rep.Flipped, rep.Flips)
	}

	// The text report, help and usage errors.
	text, err := exec.Command(binary, "replay", "-config", d.file, "-against", "none", logFile).CombinedOutput()
	if err != nil || !strings.Contains(string(text), "1 malformed lines") || !strings.Contains(string(text), "login") {
		t.Errorf("text report (%v):\n%s", err, text)
	}
	help, err := exec.Command(binary, "replay", "-h").CombinedOutput()
	if err != nil || !strings.Contains(string(help), "floodgate replay -config CANDIDATE") || !strings.Contains(string(help), "-against") {
		t.Errorf("replay -h (%v):\n%s", err, help)
	}
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"replay", logFile}, 2},
		{[]string{"replay", "-config", d.file, "-format", "apache", logFile}, 2},
		{[]string{"replay", "-config", d.file, filepath.Join(dir, "missing.log")}, 1},
		{[]string{"replay", "-config", filepath.Join(dir, "missing.yaml"), logFile}, 1},
	} {
		err := exec.Command(binary, tc.args...).Run()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != tc.code {
			t.Errorf("floodgate %s: %v; want exit %d", strings.Join(tc.args, " "), err, tc.code)
		}
	}
}
