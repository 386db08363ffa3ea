// Package chargedenied marks a decision as counted the way
// envoyproxy/ratelimit counts: the request's units are added to its
// window's count whether or not it is admitted, so a denied request
// is charged too. The Envoy service marks the decisions of a mode that
// counts so (descriptors independent, charge_denied); an engine that can
// count them more cheaply that way (redisstore: INCRBY and PEXPIRE, no
// script) reads the mark, and any other ignores it, the Envoy service
// then charging the denied request itself.
package chargedenied

import "context"

type key struct{}

// With returns ctx with its decisions marked.
func With(ctx context.Context) context.Context { return context.WithValue(ctx, key{}, true) }

// On reports whether ctx's decisions are marked.
func On(ctx context.Context) bool {
	v, _ := ctx.Value(key{}).(bool)
	return v
}
