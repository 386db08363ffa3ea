package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/floodgate-go/floodgate/testkit"
)

// TestStatusPageInBrowser loads the status page in headless Chromium: it
// shows the configuration's policies without console errors, its counts
// and top limited keys follow traffic sent through the proxy, a top
// limited key's last decisions open under it, the explain box explains a
// request, a key is forgiven from the page, it fits a
// 360 px wide screen, and with -update the screenshot becomes
// docs/status.png (a test run leaves the tree as it was).
var update = flag.Bool("update", false, "rewrite docs/status.png from the status page in the browser")

func TestStatusPageInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("a long test; make test runs it")
	}
	chromium := testkit.RequireBinary(t, "chromium", "chromium")
	up := upstream(t)
	d := startDaemon(t, fmt.Sprintf(`
policies:
  api: {rate: 5/min}
  login: {rate: 10/min, burst: 3}
proxy:
  listen: 127.0.0.1:0
  upstream: %s
  routes:
    - name: login
      match: {path: /login}
      limits: [{policy: login, key: ip}]
    - name: api
      limits: [{policy: api, key: "header:X-User"}]
admin: {listen: 127.0.0.1:0, raw_keys: true}
`, up), "proxy", "admin")
	admin := "http://" + d.addr("admin")

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1100, 1400),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	defer cancelTimeout()

	// Start the browser, then listen to its console before the page loads.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", chromium, err)
	}
	var mu sync.Mutex
	var problems []string
	listening := make(chan struct{})
	go func() {
		close(listening)
		for m, err := range chromedp.Console(ctx) {
			if err != nil {
				return
			}
			switch m.Type {
			case chromedp.ConsoleError, chromedp.ConsoleWarning, chromedp.ConsoleException:
				mu.Lock()
				problems = append(problems, m.String())
				mu.Unlock()
			}
		}
	}()
	<-listening

	section := func(name string) string { return fmt.Sprintf(`section[data-policy=%q]`, name) }
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	if err := chromedp.Do(ctx,
		chromedp.Navigate(admin+"/"),
		chromedp.WaitVisible(chromedp.CSS(section("api"))),
		chromedp.WaitVisible(chromedp.CSS(section("login"))),
	); err != nil {
		t.Fatalf("loading the page: %v", err)
	}
	before := text(section("api"))
	if !strings.Contains(before, "Policy api") || !strings.Contains(before, "5/min") || !strings.Contains(before, "0 allowed, 0 denied") ||
		!strings.Contains(before, "none in the window") {
		t.Fatalf("the api panel before any traffic:\n%s", before)
	}
	if s := text("#config"); !strings.Contains(s, "OK: accepted") || !strings.Contains(s, filepath.Base(d.file)) {
		t.Errorf("the configuration panel:\n%s", s)
	}

	// Traffic: alice far over the limit, bob a little, carol under it.
	base := "http://" + d.addr("proxy")
	for user, n := range map[string]int{"alice": 20, "bob": 8, "carol": 3} {
		for range n {
			get(t, base+"/items", "X-User", user)
		}
	}
	for range 6 {
		get(t, base+"/login")
	}
	// The page polls on its own; wait until it shows the traffic.
	wantRow := `#p-api ~ .grid table tbody tr:first-child`
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](fmt.Sprintf(
		`(() => { const s = document.querySelector(%q); return s !== null && s.textContent.includes("13 allowed, 18 denied"); })()`,
		section("api")), chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatalf("the counts did not follow the traffic: %v\n%s", err, text(section("api")))
	}
	after := text(section("api"))
	if first := text(wantRow); !strings.HasPrefix(first, "x-user:alice") || !strings.Contains(first, "15") {
		t.Errorf("top limited key: %q, want alice with 15 denials\n%s", first, after)
	}
	if !strings.Contains(after, "bob") || !strings.Contains(after, "carol") || strings.Contains(after, "none in the window") {
		t.Errorf("the api panel after the traffic:\n%s", after)
	}
	if s := text(section("login")); !strings.Contains(s, "3 allowed, 3 denied") || !strings.Contains(s, "127.0.0.1") {
		t.Errorf("the login panel after the traffic:\n%s", s)
	}
	charts, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("svg[role=img][aria-label]").length`))
	if err != nil || charts != 2 {
		t.Errorf("%d labelled charts (%v), want one per policy", charts, err)
	}

	// A runtime override is listed under its policy, with who and why.
	req, _ := http.NewRequest("PUT", admin+"/v1/overrides?policy=api&key=x-user:dave",
		strings.NewReader(`{"multiplier": 2, "ttl": "1h", "by": "ops", "reason": "INC-7"}`))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("PUT /v1/overrides: %v %v", resp, err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](fmt.Sprintf(
		`(() => { const s = document.querySelector(%q); return s !== null && s.textContent.includes("Runtime overrides"); })()`,
		section("api")), chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatalf("the runtime override is not listed: %v\n%s", err, text(section("api")))
	}
	if s := text(section("api")); !strings.Contains(s, "x-user:dave: ×2 until") || !strings.Contains(s, "by ops (INC-7)") {
		t.Errorf("the runtime override row:\n%s", s)
	}

	// Once the page's clock has found alice among the top limited keys,
	// her decisions are kept: the row opens on them.
	recent := `#p-api ~ .grid details.recent`
	deadline := time.Now().Add(30 * time.Second)
	for {
		get(t, base+"/items", "X-User", "alice")
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, recent)))
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no recent decisions on the page:\n%s", text(section("api")))
		}
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(recent+" summary"))); err != nil {
		t.Fatal(err)
	}
	if s := text(recent); !strings.Contains(s, "DENIED on route api, cost 1, 0 left under 5/min, by memory") {
		t.Errorf("alice's recent decisions: %q", s)
	}

	// The explain box: alice's request meets the api route, not login,
	// with her key, limited.
	if err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS("#ex-url"), "/items"),
		chromedp.SendKeys(chromedp.CSS("#ex-headers"), "X-User: alice"),
		chromedp.Click(chromedp.CSS(`#explain-form button[type=submit]`)),
		chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := chromedp.Poll[bool](`document.getElementById("explain-result").textContent.includes("check:")`,
				chromedp.WithPollingTimeout(10*time.Second))(ctx, t)
			return err
		}),
	); err != nil {
		t.Fatalf("explaining from the page: %v", err)
	}
	for _, want := range []string{"login [/login]: path /items does not match the pattern /login", "MATCH   api", `key "x-user:alice"`, "LIMITED"} {
		if s := text("#explain-result"); !strings.Contains(s, want) {
			t.Errorf("the explain box: no %q in\n%s", want, s)
		}
	}

	// Forgive alice from the page, by the key the panel shows.
	if err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS("#key-policy"), "api"),
		chromedp.SendKeys(chromedp.CSS("#key-key"), "x-user:alice"),
		chromedp.Click(chromedp.CSS(`#key-form button[value=reset]`)),
		chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := chromedp.Poll[bool](`document.getElementById("key-result").textContent.startsWith("Reset.")`,
				chromedp.WithPollingTimeout(10*time.Second))(ctx, t)
			return err
		}),
	); err != nil {
		t.Fatalf("resetting from the page: %v", err)
	}
	result := text("#key-result")
	if !strings.Contains(result, "not limited") || !strings.Contains(result, "remaining 5") {
		t.Errorf("reset from the page: %q", result)
	}
	if resp := get(t, base+"/items", "X-User", "alice"); resp.StatusCode != 200 {
		t.Errorf("alice after the reset: %d, want 200", resp.StatusCode)
	}

	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("the screenshot is no PNG (%d bytes)", len(png))
	}
	if *update {
		if err := os.WriteFile(filepath.Join("..", "..", "docs", "status.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// At 360 px nothing is wider than the screen.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(360, 800)); err != nil {
		t.Fatal(err)
	}
	overflow, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth - document.documentElement.clientWidth`))
	if err != nil {
		t.Fatal(err)
	}
	if overflow > 0 {
		t.Errorf("at 360 px the page is %d px too wide", overflow)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Errorf("the page reported:\n%s", strings.Join(problems, "\n"))
	}
}
