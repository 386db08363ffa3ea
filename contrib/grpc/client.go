package grpclimit

import (
	"context"
	"time"

	"google.golang.org/grpc"
)

// RetryUnary returns a client interceptor that honours the RetryInfo of a
// RESOURCE_EXHAUSTED answer: it waits the delay the server gave and sends
// the call once more. It does not wait when the call's deadline would pass
// first, when the delay exceeds maxWait (0: no bound but the deadline), or
// when the answer has no RetryInfo (a call that can never pass); the
// original error is returned then. A second RESOURCE_EXHAUSTED is returned
// as it is: a client that keeps retrying is what limits are for.
func RetryUnary(maxWait time.Duration) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		delay, ok := RetryDelay(err)
		if !ok || (maxWait > 0 && delay > maxWait) {
			return err
		}
		if deadline, has := ctx.Deadline(); has && time.Until(deadline) <= delay {
			return err
		}
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return err
		case <-t.C:
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}
