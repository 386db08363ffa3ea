package grpclimit

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
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
		if err == nil || !waitRetry(ctx, err, maxWait) {
			return err
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// RetryStream is RetryUnary for streams: when a stream the server refused
// with RESOURCE_EXHAUSTED (grpclimit's server interceptors decide a stream
// when it opens) reports it, before any response message has arrived, it
// waits the RetryInfo delay and opens the stream once more, sending again
// the messages sent so far (and CloseSend, if it was called); the caller
// reads on as if the first attempt had passed. It does not wait when the
// stream's deadline would pass first, when the delay exceeds maxWait (0: no
// bound but the deadline), when the answer has no RetryInfo, or once more
// than maxReplay messages were sent (they are kept for the retry only until
// the first response arrives); the original error is returned then. A
// second RESOURCE_EXHAUSTED is returned as it is.
func RetryStream(maxWait time.Duration) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			if !waitRetry(ctx, err, maxWait) {
				return nil, err
			}
			return streamer(ctx, desc, cc, method, opts...)
		}
		return &retryStream{ClientStream: cs, ctx: ctx, maxWait: maxWait,
			reopen: func() (grpc.ClientStream, error) { return streamer(ctx, desc, cc, method, opts...) }}, nil
	}
}

// maxReplay bounds the messages a retryStream keeps to send again.
const maxReplay = 16

// retryStream keeps what was sent on a stream until its first response,
// so that a stream refused at its opening can be opened and sent again.
type retryStream struct {
	grpc.ClientStream
	ctx      context.Context
	maxWait  time.Duration
	reopen   func() (grpc.ClientStream, error)
	sent     []any
	closed   bool // CloseSend was called
	settled  bool // a response arrived, the retry was made, or too much was sent
	overflow bool
}

func (s *retryStream) SendMsg(m any) error {
	if !s.settled {
		if len(s.sent) < maxReplay {
			s.sent = append(s.sent, m)
		} else {
			s.overflow = true
		}
	}
	return s.ClientStream.SendMsg(m)
}

func (s *retryStream) CloseSend() error {
	s.closed = true
	return s.ClientStream.CloseSend()
}

func (s *retryStream) Header() (metadata.MD, error) {
	md, err := s.ClientStream.Header()
	if err != nil && s.retry(err) {
		return s.ClientStream.Header()
	}
	return md, err
}

func (s *retryStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil && s.retry(err) {
		err = s.ClientStream.RecvMsg(m)
	}
	if err == nil {
		s.settle()
	}
	return err
}

// settle stops keeping messages: the stream passed, or was retried.
func (s *retryStream) settle() {
	s.settled, s.sent = true, nil
}

// retry reopens the stream after err when it is a refusal worth waiting
// out, and reports whether it did.
func (s *retryStream) retry(err error) bool {
	if s.settled || s.overflow || !waitRetry(s.ctx, err, s.maxWait) {
		return false
	}
	sent := s.sent
	s.settle()
	cs, rerr := s.reopen()
	if rerr != nil {
		return false
	}
	for _, m := range sent {
		if cs.SendMsg(m) != nil {
			break // the new stream's error comes with its RecvMsg
		}
	}
	if s.closed {
		cs.CloseSend()
	}
	s.ClientStream = cs
	return true
}

// waitRetry waits out the RetryInfo delay of err and reports whether the
// call may be tried again: err is RESOURCE_EXHAUSTED with a RetryInfo, the
// delay is within maxWait (0: any) and ends before ctx's deadline, and ctx
// did not end while waiting.
func waitRetry(ctx context.Context, err error, maxWait time.Duration) bool {
	delay, ok := RetryDelay(err)
	if !ok || (maxWait > 0 && delay > maxWait) {
		return false
	}
	if deadline, has := ctx.Deadline(); has && time.Until(deadline) <= delay {
		return false
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
