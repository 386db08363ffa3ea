package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestTelemetry: the telemetry section's defaults, its secrets from the
// environment and from files (hidden when redacted), and a clear error for
// each bad field.
func TestTelemetry(t *testing.T) {
	const serve = "policies: {api: {rate: 1/s}}\ncheck: {}\n"
	c, err := Parse("f.yaml", []byte(serve+"telemetry: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	tc := c.Telemetry
	if tc.Protocol != TelemetryGRPC || tc.ServiceName != "floodgate" || tc.SamplingRatio != 1 ||
		tc.MetricsInterval.D().Seconds() != 60 || !slices.Equal(tc.Signals, []string{"metrics", "traces"}) {
		t.Errorf("defaults = %+v", tc)
	}
	if c, err := Parse("f.yaml", []byte(serve)); err != nil || c.Telemetry != nil {
		t.Errorf("without the section: telemetry = %+v, %v; want off", c.Telemetry, err)
	}

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "key"), []byte("file-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FG_TEST_OTLP", "Bearer env-secret")
	path := filepath.Join(dir, "floodgate.yaml")
	src := serve + `telemetry:
  endpoint: https://otlp.example:4318
  protocol: http
  headers: {authorization: "${FG_TEST_OTLP}"}
  header_files: {x-api-key: key}
  sampling_ratio: 0.25
  signals: [traces]
`
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err = Load(path)
	if err != nil {
		t.Fatal(err)
	}
	tc = c.Telemetry
	if tc.Headers["authorization"] != "Bearer env-secret" || tc.Headers["x-api-key"] != "file-secret" || tc.SamplingRatio != 0.25 {
		t.Errorf("telemetry = %+v", tc)
	}
	out, err := MarshalRedacted(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"env-secret", "file-secret"} {
		if strings.Contains(string(out), secret) {
			t.Errorf("redacted output shows %q:\n%s", secret, out)
		}
	}
	if tc.Headers["authorization"] != "Bearer env-secret" {
		t.Error("Redact changed the original")
	}

	for _, tt := range []struct{ yaml, want string }{
		{"telemetry: {protocol: thrift}", `telemetry.protocol: "thrift" is not a protocol`},
		{"telemetry: {endpoint: 'localhost'}", "telemetry.endpoint"},
		{"telemetry: {endpoint: 'ftp://x:1'}", "telemetry.endpoint"},
		{"telemetry: {signals: [logs]}", `telemetry.signals: "logs" is not a signal`},
		{"telemetry: {signals: []}", "telemetry.signals: name metrics, traces or both"},
		{"telemetry: {sampling_ratio: 1.5}", "telemetry.sampling_ratio: 1.5 is not a ratio"},
		{"telemetry: {sampling_ratio: -0.1}", "telemetry.sampling_ratio"},
		{"telemetry: {metrics_interval: 0s}", "telemetry.metrics_interval: must be positive"},
		{"telemetry: {header_files: {a: /nonexistent/x}}", "telemetry.header_files.a"},
		{"telemetry: {headers: {a: x}, header_files: {a: /nonexistent/x}}", "header a is under headers too"},
		{"telemetry: {ca_file: /nonexistent/ca.pem}", "telemetry.ca_file"},
	} {
		_, err := Parse("f.yaml", []byte(serve+tt.yaml+"\n"))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want it to say %q", tt.yaml, err, tt.want)
		}
	}
}
