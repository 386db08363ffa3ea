package config

// The valid values of the enumerated fields, shared by validation, the
// JSON Schema and the reference in docs/config.md so the three agree.
var (
	enumEngines      = []string{string(EngineMemory), string(EngineRedis), string(EngineHybrid)}
	enumRedisModes   = []string{string(RedisStandalone), string(RedisSentinel), string(RedisCluster)}
	enumFailureModes = []string{string(FailOpen), string(FailClosed), string(LocalFallback)}
	enumBodies       = []string{string(BodyProblem), string(BodyJSON), string(BodyNone)}
	enumCounts       = []string{string(CountAll), string(CountFailed), string(CountSuccessful)}
	enumHeaderStyles = []string{string(HeadersNone), string(HeadersDraft), string(HeadersIETF)}
	enumAlgorithms   = []string{"gcra", "token_bucket", "fixed_window", "sliding_window", "sliding_log"}
	enumLogFormats   = []string{"text", "json"}
	enumLogLevels    = []string{"debug", "info", "warn", "error"}
	enumEnvoyUnits   = []string{"second", "minute", "hour", "day", "week", "month", "year"}
)
