// Package boundary holds the test that keeps floodgate's layers apart: the
// library a Go service imports never pulls in the daemon's configuration,
// a YAML library, gRPC or Prometheus, the request matcher (httpmatch)
// depends on no limiter, httplimit links no engine, no Redis client and no
// concurrency limiter (concurrency/throttle serves those), and
// the observers (metrics, status) depend on no engine, and only the
// daemon's telemetry package links OpenTelemetry. It also holds the
// checks of the repository's
// Markdown (docs_test.go).
package boundary

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/floodgate-go/floodgate"

// deps returns the packages pkg depends on, itself included, test files
// left out: what a program that imports pkg links.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := goList("-deps", "-f", "{{.ImportPath}}", pkg)
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	return strings.Fields(string(out))
}

func TestLayers(t *testing.T) {
	library := []string{"", "/algo", "/clock", "/memstore", "/redisstore", "/hybrid", "/failover", "/floodgatetest", "/clientip", "/httpmatch", "/httplimit", "/httplimit/quick", "/concurrency", "/concurrency/throttle", "/pgproxy/pgwire", "/pgproxy/proxyproto", "/pgproxy/pgmode"}
	forbidden := []string{
		mod + "/config", mod + "/daemon", mod + "/internal/yamlpos",
		mod + "/proxy", mod + "/checkapi", mod + "/envoyrls", mod + "/envoyrules", mod + "/admin", mod + "/status",
		"github.com/goccy/go-yaml", "gopkg.in/yaml", "google.golang.org/grpc", "github.com/envoyproxy/", "github.com/prometheus/",
		"go.opentelemetry.io/",
	}
	for _, p := range library {
		for _, d := range deps(t, mod+p) {
			for _, f := range forbidden {
				if d == f || strings.HasPrefix(d, f+"/") || (strings.HasSuffix(f, "/") && strings.HasPrefix(d, f)) {
					t.Errorf("%s%s depends on %s: the library must not pull in the daemon's layers", mod, p, d)
				}
			}
		}
	}
	// OpenTelemetry is the daemon's (package telemetry): the front ends and
	// the observers a library user can take, the configuration and the
	// admin listener export through the daemon's wrappers and hooks, and
	// never link it themselves.
	for _, p := range []string{"/metrics", "/status", "/proxy", "/checkapi", "/envoyrls", "/envoyrules", "/pgproxy", "/config", "/admin", "/outbound"} {
		for _, d := range deps(t, mod+p) {
			if strings.HasPrefix(d, "go.opentelemetry.io/") {
				t.Errorf("%s%s depends on %s: OpenTelemetry is linked by the daemon's telemetry package only", mod, p, d)
			}
		}
	}
	// The observers read engines through interfaces, so they work with any.
	for _, p := range []string{"/metrics", "/status"} {
		for _, d := range deps(t, mod+p) {
			for _, e := range []string{"/memstore", "/redisstore", "/hybrid"} {
				if d == mod+e {
					t.Errorf("%s%s depends on %s%s: observers take interfaces, not an engine's concrete type", mod, p, mod, e)
				}
			}
		}
	}
	// The middleware takes any floodgate.Limiter, so it links no engine and
	// no Redis client: the program chooses its store, or httplimit/quick
	// chooses one for it. failover is forbidden whole, its stores and its
	// Guard alike: httplimit needs neither.
	for _, d := range deps(t, mod+"/httplimit") {
		for _, e := range []string{mod + "/memstore", mod + "/redisstore", mod + "/hybrid", mod + "/failover", "github.com/redis/go-redis/"} {
			if d == e || strings.HasPrefix(d, strings.TrimSuffix(e, "/")+"/") {
				t.Errorf("%s/httplimit depends on %s: the middleware takes a limiter, it does not choose an engine (the one-liners that do live in httplimit/quick)", mod, d)
			}
		}
	}
	// httplimit is the rate-limit middleware; the concurrency middleware is
	// concurrency/throttle, beside the slots it holds.
	for _, d := range deps(t, mod+"/httplimit") {
		if d == mod+"/concurrency" || strings.HasPrefix(d, mod+"/concurrency/") {
			t.Errorf("httplimit depends on %s: concurrency limits are served by concurrency/throttle, not the rate-limit middleware", d)
		}
	}
	// The clock is a leaf: engines, middleware and tests read time from it
	// without the limiter.
	for _, d := range deps(t, mod+"/clock") {
		if (d == mod || strings.HasPrefix(d, mod+"/")) && d != mod+"/clock" {
			t.Errorf("clock depends on %s: the time source needs no other package of the module", d)
		}
	}
	// The request matcher is a leaf: the proxy's routes and the
	// configuration's checks select requests without the middleware or any
	// limiter.
	for _, d := range deps(t, mod+"/httpmatch") {
		if (d == mod || strings.HasPrefix(d, mod+"/")) && d != mod+"/httpmatch" && !strings.HasPrefix(d, mod+"/internal/") {
			t.Errorf("httpmatch depends on %s: the matcher needs no limiter, middleware or front end", d)
		}
	}
	// Packages that report through an Observer leave Prometheus to
	// package metrics, which implements it.
	for _, p := range []string{"/outbound", "/pgproxy"} {
		for _, d := range deps(t, mod+p) {
			if strings.HasPrefix(d, "github.com/prometheus/") {
				t.Errorf("%s%s depends on %s: it reports to an Observer, and metrics exports", mod, p, d)
			}
		}
	}
	// The configuration is a file model: no front end, no daemon, no
	// metrics. The enumerations it reads from a front end live in a leaf
	// package of their own (pgproxy/pgmode).
	for _, d := range deps(t, mod+"/config") {
		for _, f := range []string{"/daemon", "/proxy", "/checkapi", "/envoyrls", "/pgproxy", "/admin", "/status", "/metrics"} {
			if d == mod+f {
				t.Errorf("config depends on %s: the front ends build on the configuration, not the reverse", d)
			}
		}
		if strings.HasPrefix(d, "github.com/prometheus/") {
			t.Errorf("config depends on %s: the configuration links no metrics library", d)
		}
	}
}

// TestOnlyEnvoyImportsGRPC: one front end speaks gRPC, so every other front
// end, and whatever imports one, stays free of it. The daemon's telemetry
// package is the one other: it sends OTLP over gRPC and gives envoyrls its
// tracing stats handler.
func TestOnlyEnvoyImportsGRPC(t *testing.T) {
	out, err := goList("-f", `{{.ImportPath}} {{join .Imports " "}}`, mod+"/...")
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] == mod+"/envoyrls" || f[0] == mod+"/telemetry" {
			continue
		}
		for _, imp := range f[1:] {
			if imp == "google.golang.org/grpc" || strings.HasPrefix(imp, "google.golang.org/grpc/") || strings.HasPrefix(imp, "github.com/envoyproxy/go-control-plane") {
				t.Errorf("%s imports %s; only envoyrls speaks gRPC", f[0], imp)
			}
		}
	}
}

// goList runs go list on the main module alone, as a user's build sees it
// (not the workspace of the framework adapters).
func goList(args ...string) ([]byte, error) {
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Env = append(os.Environ(), "GOWORK=off")
	return cmd.CombinedOutput()
}
