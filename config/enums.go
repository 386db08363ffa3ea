package config

import (
	"github.com/floodgate-go/floodgate/envoyrules"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/internal/textform"
	"github.com/floodgate-go/floodgate/pgproxy/pgmode"
)

// The valid values of the enumerated fields, shared by validation, the
// JSON Schema and the reference in docs/config.md so the three agree.
var (
	enumEngines      = []string{string(EngineMemory), string(EngineRedis), string(EngineHybrid)}
	enumRedisModes   = []string{string(RedisStandalone), string(RedisSentinel), string(RedisCluster)}
	enumFailureModes = failover.ModeNames()
	enumBodies       = httplimit.BodyNames()
	enumCounts       = httplimit.CountNames()
	enumReplication  = pgmode.ReplicationModeNames()
	enumHeaderStyles = names(envoyrules.HeaderStyles)
	enumAlgorithms   = textform.AlgorithmNames()
	// envoy.descriptors and envoy.engine_errors, in envoyrls.Mode's terms.
	enumEnvoyDescriptors = []string{"all_or_nothing", "independent"}
	enumEnvoyErrors      = []string{"failure_mode", "status"}
	enumLogFormats       = []string{"text", "json"}
	enumAdaptive         = []string{AdaptiveGradient, AdaptiveAIMD}
	enumLogLevels        = []string{"debug", "info", "warn", "error"}
	enumLease            = []string{LeaseOff, LeaseAuto}
)

func names[T ~string](vs []T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}
