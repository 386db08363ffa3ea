package status

import "time"

// A Snapshot is what GET /v1/status answers and the page shows.
type Snapshot struct {
	Time          time.Time      `json:"time"`
	WindowSeconds float64        `json:"window_seconds"` // the period the top keys cover, at least
	StepSeconds   float64        `json:"step_seconds"`   // the time one chart point covers
	History       int            `json:"history"`        // chart points kept: the chart spans History steps
	RawKeys       bool           `json:"raw_keys"`       // keys are shown as they are, not redacted
	Policies      []PolicyStatus `json:"policies"`       // by name
	Engine        *Engine        `json:"engine,omitempty"`
	Config        Config         `json:"config"`
}

// PolicyStatus is one policy's decisions.
type PolicyStatus struct {
	Name   string   `json:"name"`
	Limits []string `json:"limits,omitempty"` // the default limits, e.g. "10/s"

	// Overrides are the keys the policy gives limits of their own, as the
	// configuration writes them.
	Overrides []Override `json:"overrides,omitempty"`

	// RuntimeOverrides are the policy's overrides set at runtime (the
	// admin API's /v1/overrides) and in force, keys redacted as the top
	// keys are.
	RuntimeOverrides []RuntimeOverride `json:"runtime_overrides,omitempty"`

	Total       Point   `json:"total"`       // decisions since the daemon started
	LastMinute  Point   `json:"last_minute"` // decisions in the last minute
	DenialRatio float64 `json:"denial_ratio"`
	Points      []Point `json:"points"` // decisions per step, oldest first

	// Sources counts decisions since the daemon started by what decided
	// them (memory, redis, hybrid:local, hybrid:global, …); "penalty"
	// counts the refusals of keys in the policy's penalty.
	Sources map[string]uint64 `json:"sources"`

	TopLimited   []KeyCount `json:"top_limited"`   // denied requests in the window
	TopConsuming []KeyCount `json:"top_consuming"` // units allowed in the window
}

// An Override is a key with limits of its own.
type Override struct {
	Key    string   `json:"key"`
	Limits []string `json:"limits"`
}

// A RuntimeOverride is an override set at runtime: for a key or a tier,
// limits or a multiplier, until Expires, by whom and why.
type RuntimeOverride struct {
	Key        string    `json:"key,omitempty"`
	Tier       string    `json:"tier,omitempty"`
	Limits     []string  `json:"limits,omitempty"`
	Multiplier float64   `json:"multiplier,omitempty"`
	Expires    time.Time `json:"expires"`
	Created    time.Time `json:"created"`
	By         string    `json:"by,omitempty"`
	Reason     string    `json:"reason,omitempty"`
}

// A Point counts decisions.
type Point struct {
	Allowed uint64 `json:"allowed"`
	Denied  uint64 `json:"denied"`
	Errors  uint64 `json:"errors,omitempty"`
}

// A KeyCount is a key's estimated count in the window: the true count lies
// in [Count-Error, Count] (see Window).
type KeyCount struct {
	Key   string `json:"key"`
	Count uint64 `json:"count"`
	Error uint64 `json:"error"`

	// Recent are the key's last decisions, oldest first, for a top limited
	// key once a Tick has found it among them (see Status.Recent).
	Recent []Record `json:"recent,omitempty"`
}

// Engine is the engine's health.
type Engine struct {
	Name string `json:"name"` // memory, redis or hybrid

	// Failure is the failure mode in force when the remote engine fails,
	// as the Sources of its decisions spell it: fail-open, fail-closed or
	// local-fallback; empty for the memory engine.
	Failure string `json:"failure,omitempty"`

	// Breaker is the remote engine's circuit breaker state (closed, open,
	// half_open); empty for the memory engine.
	Breaker     string       `json:"breaker,omitempty"`
	Transitions []Transition `json:"transitions,omitempty"` // recent ones, newest last

	// RoundTrip is Redis's answer time to a periodic PING.
	RoundTrip *Latency `json:"round_trip,omitempty"`
}

// A Transition is a change of the breaker's state, as seen by a periodic
// look: Count transitions of From to To since the previous look.
type Transition struct {
	At    time.Time `json:"at"`
	From  string    `json:"from"`
	To    string    `json:"to"`
	Count uint64    `json:"count"`
}

// Latency summarises recent round trips.
type Latency struct {
	P50Ms   float64 `json:"p50_ms"`
	P99Ms   float64 `json:"p99_ms"`
	Samples int     `json:"samples"`
	Failed  int     `json:"failed"`          // of the samples, pings that failed
	Error   string  `json:"error,omitempty"` // the last ping's error, while it is failing

	// LastError is the most recent failure among the samples and when it
	// was, kept after recovery so that the page can say Redis failed a
	// while ago without saying it is failing now.
	LastError   string     `json:"last_error,omitempty"`
	LastErrorAt *time.Time `json:"last_error_at,omitempty"`
}

// Config is the configuration in service and the last reload.
type Config struct {
	File       string    `json:"file,omitempty"`
	Version    string    `json:"version"` // config.Config.Digest
	LoadedAt   time.Time `json:"loaded_at"`
	LastReload *Reload   `json:"last_reload,omitempty"`
}

// A Reload is the result of the last attempt to load a configuration.
type Reload struct {
	At    time.Time `json:"at"`
	OK    bool      `json:"ok"`
	Error string    `json:"error,omitempty"` // with the file:line at fault
}
