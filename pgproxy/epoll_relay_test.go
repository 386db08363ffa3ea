//go:build linux

package pgproxy_test

import (
	"net"
	"runtime"
	"sync"
	"syscall"
	"testing"
)

// startEpollRelay is the floor of a Go hop: one goroutine, locked to its
// thread, on an epoll loop over raw non-blocking sockets, reading each
// ready socket once and writing what it read to the other side; no
// netpoller, no goroutine per connection, no parsing. It is what a hop
// costs in Go when the runtime's scheduling is taken out.
func startEpollRelay(b *testing.B, upstream string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		b.Fatal(err)
	}
	// The accepting goroutine registers new pairs itself (epoll_ctl is
	// safe beside epoll_wait); peers is shared with the loop.
	var mu sync.Mutex
	peers := map[int32]int32{}
	done := make(chan struct{})
	var wg sync.WaitGroup
	b.Cleanup(func() {
		ln.Close()
		close(done)
		wg.Wait()
		syscall.Close(epfd)
		for fd := range peers {
			syscall.Close(int(fd))
		}
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			cfd, err1 := rawFD(c)
			ufd, err2 := rawFD(u)
			if err1 != nil || err2 != nil {
				syscall.Close(int(cfd))
				syscall.Close(int(ufd))
				continue
			}
			mu.Lock()
			peers[cfd], peers[ufd] = ufd, cfd
			mu.Unlock()
			for _, fd := range []int32{cfd, ufd} {
				_ = syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, int(fd), &syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP, Fd: fd})
			}
		}
	})
	wg.Go(func() {
		runtime.LockOSThread()
		events := make([]syscall.EpollEvent, 128)
		buf := make([]byte, 32<<10)
		for {
			select {
			case <-done:
				return
			default:
			}
			n, err := syscall.EpollWait(epfd, events, 100)
			if err != nil && err != syscall.EINTR {
				return
			}
			for _, ev := range events[:max(n, 0)] {
				mu.Lock()
				peer, ok := peers[ev.Fd]
				mu.Unlock()
				if !ok {
					continue
				}
				k, err := syscall.Read(int(ev.Fd), buf)
				if err == syscall.EAGAIN {
					continue
				}
				if k <= 0 || !writeAll(int(peer), buf[:k]) {
					mu.Lock()
					delete(peers, ev.Fd)
					delete(peers, peer)
					mu.Unlock()
					syscall.Close(int(ev.Fd))
					syscall.Close(int(peer))
				}
			}
		}
	})
	return ln.Addr().String()
}

// rawFD takes c's socket out of the runtime's netpoller: it closes c and
// returns a non-blocking duplicate of its descriptor.
func rawFD(c net.Conn) (int32, error) {
	f, err := c.(*net.TCPConn).File() // a duplicate, outside the netpoller once c is closed
	c.Close()
	if err != nil {
		return 0, err
	}
	fd, err := syscall.Dup(int(f.Fd()))
	f.Close()
	if err != nil {
		return 0, err
	}
	return int32(fd), syscall.SetNonblock(fd, true)
}

// writeAll writes b to a non-blocking socket; when the socket is full
// (rare: pgbench's answers are small) it writes the rest blocking.
func writeAll(fd int, b []byte) bool {
	for len(b) > 0 {
		n, err := syscall.Write(fd, b)
		if err == syscall.EAGAIN {
			_ = syscall.SetNonblock(fd, false)
			n, err = syscall.Write(fd, b)
			_ = syscall.SetNonblock(fd, true)
		}
		if err != nil || n <= 0 {
			return false
		}
		b = b[n:]
	}
	return true
}
