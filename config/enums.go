package config

import "github.com/floodgate-go/floodgate/envoyrules"

// The valid values of the enumerated fields, shared by validation, the
// JSON Schema and the reference in docs/config.md so the three agree.
var (
	enumEngines      = []string{string(EngineMemory), string(EngineRedis), string(EngineHybrid)}
	enumRedisModes   = []string{string(RedisStandalone), string(RedisSentinel), string(RedisCluster)}
	enumFailureModes = []string{string(FailOpen), string(FailClosed), string(LocalFallback)}
	enumBodies       = []string{string(BodyProblem), string(BodyJSON), string(BodyNone)}
	enumCounts       = []string{string(CountAll), string(CountFailed), string(CountSuccessful)}
	enumHeaderStyles = names(envoyrules.HeaderStyles)
	enumAlgorithms   = []string{"gcra", "token_bucket", "fixed_window", "sliding_window", "sliding_log"}
	enumLogFormats   = []string{"text", "json"}
	enumLogLevels    = []string{"debug", "info", "warn", "error"}
)

func names[T ~string](vs []T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}
