// Package config is floodgate's configuration file: the typed structs of
// the YAML that `floodgate serve` reads, its parser and validator, the JSON
// Schema editors use, and the import of envoyproxy/ratelimit rule files.
//
// The structs map one-to-one onto the file (each field's yaml tag is its
// name there), so the daemon, `floodgate validate` and library users share
// one vocabulary; docs/config.md is generated from them and lists every
// field with its default.
//
// Parse and Load report every problem of a file at once, each as
// "file:line:column: field.path: what to do", and suggest the nearest name
// for a misspelt field:
//
//	floodgate.yaml:4:5: policies.api.ratee: unknown field "ratee"; did you mean "rate"?
//	floodgate.yaml:9:11: proxy.routes[0].limits[0].policy: no policy "apo"; did you mean "api"?
//
// A parsed Config builds the library's values with FloodgatePolicies
// (floodgate.Policy with validated floodgate.Limit values) and, for the
// Envoy service, Envoy.Rules. Hot reload is the daemon's: daemon.Watch
// loads the file again when it, or a file it refers to, changes on disk,
// and on demand (SIGHUP).
package config
