package config

import (
	"strings"
	"testing"
)

// A redis engine without a failure mode is reported at the block that
// lacks it: the failure block when there is one (also when its mode is
// written with no value, which used to pass the check and fail later in
// the daemon), else the storage block.
func TestMissingFailureModeAtItsBlock(t *testing.T) {
	const head = "check: {listen: 127.0.0.1:0}\npolicies:\n  api: {rate: 10/s}\nstorage:\n  engine: redis\n  redis: {addrs: [127.0.0.1:6379]}\n"
	for _, tc := range []struct{ file, at string }{
		{head, "f.yaml:4:1: storage.failure: storage.failure.mode is required"},
		{head + "  failure:\n    timeout: 1s\n", "f.yaml:7:3: storage.failure: storage.failure.mode is required"},
		{head + "  failure:\n    mode:\n", "f.yaml:7:3: storage.failure: storage.failure.mode is required"},
	} {
		_, err := Parse("f.yaml", []byte(tc.file))
		if err == nil || !strings.Contains(err.Error(), tc.at) {
			t.Errorf("%s\nerror %v, want %q", tc.file, err, tc.at)
		}
	}
}
