//go:build !linux

package pgproxy_test

import "testing"

// startEpollRelay stands in for the epoll relay, which needs Linux: it
// returns the io.Copy relay.
func startEpollRelay(b *testing.B, upstream string) string { return startRelay(b, upstream) }

// startUringRelay stands in for the io_uring relay, which needs Linux: it
// returns the io.Copy relay.
func startUringRelay(b *testing.B, upstream string) string { return startRelay(b, upstream) }
