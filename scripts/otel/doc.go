// Package otel holds the test of the daemon's OpenTelemetry export
// (docs/telemetry.md), in a module of its own so that floodgate's go.mod
// does not require the OpenTelemetry Collector: `make otel-check` builds
// floodgate, runs `floodgate serve` with a telemetry section pointing at
// the Collector's OTLP receiver running in the test, and asserts on what
// arrives: the metrics' names, units and values after a known number of
// decisions, and the spans of each front end with their attributes and
// their parents, through the proxy to the upstream.
package otel
