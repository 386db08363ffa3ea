package daemon

import (
	"reflect"
	"slices"
	"strings"

	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/internal/yamlpos"
)

// Reloadable lists the fields of the configuration a reload applies while
// serving, as YAML paths (a path covers the fields below it). A change to
// any other field is refused with the field named, and the configuration in
// service keeps serving: every field either applies or is refused, never
// "reloaded" with the old behaviour.
//
// What needs a restart: the engine (storage, but for Redis's credentials,
// which new connections pick up), the listeners' addresses and which
// listeners there are, TLS turned on or off, the Envoy service's response
// headers and how it counts and answers (shadow_mode, descriptors,
// charge_denied, merge_domains, dynamic_metadata, engine_errors), the PostgreSQL proxy's upstream and connection handling, the log
// format, the status page's settings, a listener's timeouts, header size
// and stream bound (its connection bounds apply), and the check API's
// concurrency limits (a client's lease outlives a configuration).
var Reloadable = []string{
	"policies",
	"storage.redis.username", "storage.redis.password", "storage.redis.password_file",
	"proxy.upstream", "proxy.client_ip", "proxy.user_trusted_from", "proxy.headers", "proxy.body", "proxy.routes",
	"proxy.tls.cert", "proxy.tls.key", "proxy.tls.client_ca",
	"check.token", "check.token_file",
	"envoy.ratelimit_config", "envoy.algorithm", "envoy.token", "envoy.token_file", "envoy.lease", "envoy.lease_max",
	"postgres.rate_limit", "postgres.connections", "postgres.concurrency",
	"admin.token", "admin.token_file",
	"log.level",
	"shutdown_timeout", "shutdown_delay",
	// A listener's connection bounds apply from its next connection on;
	// its timeouts and sizes are the server's own, set when it starts.
	"proxy.bounds.max_connections", "proxy.bounds.max_connections_per_client",
	"check.bounds.max_connections", "check.bounds.max_connections_per_client",
	"envoy.bounds.max_connections", "envoy.bounds.max_connections_per_client",
	"postgres.bounds.max_connections", "postgres.bounds.max_connections_per_client",
	"admin.bounds.max_connections", "admin.bounds.max_connections_per_client",
}

// refusedChanges returns the paths of the fields that differ between old
// and new and that a reload cannot apply, sorted.
func refusedChanges(old, new *config.Config) []string {
	var out []string
	for _, p := range changedFields(old, new) {
		if !reloadable(p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

func reloadable(path string) bool {
	for _, r := range Reloadable {
		if path == r || strings.HasPrefix(path, r+".") || strings.HasPrefix(path, r+"[") {
			return true
		}
	}
	return false
}

// changedFields returns the YAML paths of the fields that differ between a
// and b: a struct field by field (a section present in one and absent in
// the other is its own path), lists, maps and values whole.
func changedFields(a, b *config.Config) []string {
	var out []string
	diffValue(reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem(), "", &out)
	return out
}

func diffValue(a, b reflect.Value, path string, out *[]string) {
	switch a.Kind() {
	case reflect.Pointer:
		switch {
		case a.IsNil() && b.IsNil():
		case a.IsNil() != b.IsNil():
			*out = append(*out, path)
		default:
			diffValue(a.Elem(), b.Elem(), path, out)
		}
	case reflect.Struct:
		if _, text := a.Addr().Interface().(interface{ UnmarshalText([]byte) error }); text {
			if !reflect.DeepEqual(a.Interface(), b.Interface()) {
				*out = append(*out, path)
			}
			return
		}
		for _, f := range yamlpos.Fields(a.Type()) {
			diffValue(a.FieldByIndex(f.Index), b.FieldByIndex(f.Index), yamlpos.JoinPath(path, f.Name), out)
		}
	default:
		if !reflect.DeepEqual(a.Interface(), b.Interface()) {
			*out = append(*out, path)
		}
	}
}

// refusal is the error of a reload that changed fields it cannot apply.
func refusal(cfg *config.Config, paths []string) error {
	var errs config.Errors
	for _, p := range paths {
		errs = append(errs, &config.Error{Pos: cfg.Position(p), Path: p,
			Msg: "changed, but a reload cannot apply it: restart floodgate to apply it (the configuration in service keeps serving; docs/daemon.md lists what a reload applies)"})
	}
	return errs
}
