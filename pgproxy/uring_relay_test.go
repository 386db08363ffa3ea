//go:build linux

package pgproxy_test

import (
	"encoding/binary"
	"fmt"
	"net"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/floodgate-go/floodgate/testkit"
)

// startUringRelay is the epoll relay's counterpart on io_uring: one
// goroutine, locked to its thread, relays bytes between raw blocking
// sockets with IORING_OP_RECV and IORING_OP_SEND. Each round drains every
// completion the ring holds, queues what they call for (the send of what a
// receive read to the other side, the rest of a short send, the receive
// re-armed once its bytes are sent) and hands them all to the kernel in
// the one io_uring_enter that also waits for the next completion: no
// epoll_wait, and one system call per round for all connections instead
// of a read and a write per ready socket. No parsing; a spike to measure
// what a hop on io_uring costs, not a part of the proxy.
func startUringRelay(b testing.TB, upstream string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		ln.Close()
		b.Fatal(err)
	}
	// The accepting goroutine appends new pairs to fresh and writes the
	// eventfd, on which the loop always has a read in flight.
	var mu sync.Mutex
	var fresh [][2]int32
	var stop atomic.Bool
	poke := func() {
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		_, _ = unix.Write(wake, one[:])
	}
	var wg sync.WaitGroup
	ready := make(chan error, 1)
	wg.Go(func() {
		// The ring is set up on the thread that submits to it: with
		// IORING_SETUP_SINGLE_ISSUER, io_uring_enter from any other
		// fails with EEXIST.
		runtime.LockOSThread()
		r, err := newURing(256)
		ready <- err
		if err != nil {
			return
		}
		defer r.close()
		l := &uringLoop{r: r, sides: map[uint64]*uringSide{}}
		armWake := func() { l.queue(uringOpRead, int32(wake), r.wakeBuf[:], uringWake) }
		armWake()
		for {
			head, tail := *r.cqHead, atomic.LoadUint32(r.cqTail)
			for ; head != tail; head++ {
				cqe := &r.cqes[head&r.cqMask]
				if cqe.userData == uringWake {
					if stop.Load() {
						l.shutdown()
						return
					}
					mu.Lock()
					pairs := fresh
					fresh = nil
					mu.Unlock()
					for _, p := range pairs {
						l.add(p[0], p[1])
					}
					armWake()
					continue
				}
				l.complete(cqe.userData, cqe.res)
			}
			atomic.StoreUint32(r.cqHead, head)
			if err := l.enter(1); err != nil {
				b.Errorf("uring relay: %v", err)
				l.shutdown()
				return
			}
		}
	})
	if err := <-ready; err != nil {
		wg.Wait()
		unix.Close(wake)
		ln.Close()
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ln.Close()
		stop.Store(true)
		poke()
		wg.Wait()
		unix.Close(wake)
		for _, p := range fresh {
			unix.Close(int(p[0]))
			unix.Close(int(p[1]))
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
				unix.Close(int(cfd))
				unix.Close(int(ufd))
				continue
			}
			// Blocking: io_uring then waits for data itself (an internal
			// poll) instead of completing with EAGAIN.
			_ = unix.SetNonblock(int(cfd), false)
			_ = unix.SetNonblock(int(ufd), false)
			mu.Lock()
			fresh = append(fresh, [2]int32{cfd, ufd})
			mu.Unlock()
			poke()
		}
	})
	return ln.Addr().String()
}

// TestUringRelay relays pgbench -S sessions to a real PostgreSQL through
// the io_uring relay, in the simple and the prepared query modes, and
// checks that every transaction ran: the relay carries a whole session,
// startup and authentication to the closing of both sockets.
func TestUringRelay(t *testing.T) {
	pg := testkit.Postgres(t)
	pgbench := pg.Bin("pgbench")
	if out, err := exec.Command(pgbench, "-i", "-q", "-s", "1", pg.DSN(testkit.PostgresSuperuser, "postgres")).CombinedOutput(); err != nil {
		t.Fatalf("pgbench -i: %v\n%s", err, out)
	}
	host, port, _ := net.SplitHostPort(startUringRelay(t, pg.Addr))
	for _, mode := range []string{"simple", "prepared"} {
		out, err := exec.Command(pgbench, "-n", "-S", "-M", mode, "-c", "4", "-j", "2", "-t", "200",
			"-h", host, "-p", port, "-U", testkit.PostgresSuperuser, "postgres").CombinedOutput()
		if err != nil {
			t.Fatalf("pgbench -M %s through the io_uring relay: %v\n%s", mode, err, out)
		}
		if !strings.Contains(string(out), "number of transactions actually processed: 800/800") ||
			!strings.Contains(string(out), "number of failed transactions: 0") {
			t.Fatalf("pgbench -M %s through the io_uring relay: not every transaction ran:\n%s", mode, out)
		}
	}
}

// uringWake is the user data of the eventfd read; a side's operations
// carry its id, which starts at 1.
const uringWake = 0

// A uringSide reads its socket into buf and sends what it read to its
// peer's socket; one operation is in flight per side at a time.
type uringSide struct {
	id       uint64
	fd       int32
	peer     *uringSide
	buf      []byte
	n, sent  int  // bytes in buf, bytes of them sent
	sending  bool // the operation in flight is a send
	inflight bool
	dead     bool // the pair is closing: shut down, waiting for its operations
}

type uringLoop struct {
	r      *uRing
	sides  map[uint64]*uringSide
	nextID uint64
}

func (l *uringLoop) add(cfd, ufd int32) {
	c := &uringSide{fd: cfd, buf: make([]byte, 32<<10)}
	u := &uringSide{fd: ufd, buf: make([]byte, 32<<10)}
	c.peer, u.peer = u, c
	for _, s := range []*uringSide{c, u} {
		l.nextID++
		s.id = l.nextID
		l.sides[s.id] = s
		l.recv(s)
	}
}

func (l *uringLoop) recv(s *uringSide) {
	s.sending, s.inflight = false, true
	l.queue(uringOpRecv, s.fd, s.buf, s.id)
}

func (l *uringLoop) send(s *uringSide) {
	s.sending, s.inflight = true, true
	l.queue(uringOpSend, s.peer.fd, s.buf[s.sent:s.n], s.id)
}

// complete acts on the completion of side id's operation with result res.
func (l *uringLoop) complete(id uint64, res int32) {
	s := l.sides[id]
	if s == nil {
		return
	}
	s.inflight = false
	if s.dead {
		l.release(s)
		return
	}
	if res == -int32(unix.EINTR) || res == -int32(unix.EAGAIN) {
		if s.sending {
			l.send(s)
		} else {
			l.recv(s)
		}
		return
	}
	if res <= 0 { // end of stream or an error, either way
		l.kill(s)
		return
	}
	if s.sending {
		s.sent += int(res)
	} else {
		s.n, s.sent = int(res), 0
	}
	if s.sent < s.n {
		l.send(s)
	} else {
		l.recv(s)
	}
}

// kill shuts both sockets of s's pair down, which completes the other
// side's operation in flight; each side is closed once it has none.
func (l *uringLoop) kill(s *uringSide) {
	for _, x := range []*uringSide{s, s.peer} {
		x.dead = true
		_ = unix.Shutdown(int(x.fd), unix.SHUT_RDWR)
	}
	l.release(s)
	l.release(s.peer)
}

func (l *uringLoop) release(s *uringSide) {
	if s.inflight || l.sides[s.id] == nil {
		return
	}
	delete(l.sides, s.id)
	unix.Close(int(s.fd))
}

// shutdown closes every socket. The ring is closed after it, which
// cancels what is still in flight.
func (l *uringLoop) shutdown() {
	for id, s := range l.sides {
		delete(l.sides, id)
		_ = unix.Shutdown(int(s.fd), unix.SHUT_RDWR)
		unix.Close(int(s.fd))
	}
}

// queue fills the next submission queue entry; when the queue is full it
// submits first.
func (l *uringLoop) queue(op uint8, fd int32, buf []byte, userData uint64) {
	r := l.r
	if r.sqTailLocal-atomic.LoadUint32(r.sqHead) == r.sqEntries {
		_ = l.enter(0)
	}
	e := &r.sqes[r.sqTailLocal&r.sqMask]
	*e = uringSQE{opcode: op, fd: fd, len: uint32(len(buf)), userData: userData}
	if len(buf) > 0 {
		e.addr = uint64(uintptr(unsafe.Pointer(&buf[0])))
	}
	r.sqTailLocal++
	r.toSubmit++
}

// enter publishes the queued entries and submits them, waiting for
// minComplete completions.
func (l *uringLoop) enter(minComplete uint32) error {
	r := l.r
	atomic.StoreUint32(r.sqTail, r.sqTailLocal)
	flags := uintptr(0)
	if minComplete > 0 {
		flags = uringEnterGetEvents
	}
	for {
		n, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(r.toSubmit), uintptr(minComplete), flags, 0, 0)
		switch errno {
		case 0:
			r.toSubmit -= uint32(n)
			return nil
		case unix.EINTR:
			continue
		case unix.EBUSY, unix.EAGAIN: // completions to reap first
			return nil
		default:
			return fmt.Errorf("io_uring_enter: %w", errno)
		}
	}
}

// The kernel's constants and structures (include/uapi/linux/io_uring.h),
// which golang.org/x/sys does not define.
const (
	uringOpRead         = 22
	uringOpSend         = 26
	uringOpRecv         = 27
	uringEnterGetEvents = 1
	uringOffSQRing      = 0
	uringOffCQRing      = 0x8000000
	uringOffSQEs        = 0x10000000
)

type uringSQE struct {
	opcode      uint8
	flags       uint8
	ioprio      uint16
	fd          int32
	off         uint64
	addr        uint64
	len         uint32
	opFlags     uint32
	userData    uint64
	bufIndex    uint16
	personality uint16
	spliceFDIn  int32
	addr3       uint64
	_           uint64
}

type uringCQE struct {
	userData uint64
	res      int32
	flags    uint32
}

type uringSQOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

type uringCQOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

type uringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  uringSQOffsets
	cqOff                                                                  uringCQOffsets
}

// uRing is a ring set up with io_uring_setup and its three regions mapped.
type uRing struct {
	fd                   int
	sqRing, cqRing, sqeM []byte
	sqHead, sqTail       *uint32
	sqMask, sqEntries    uint32
	cqHead, cqTail       *uint32
	cqMask               uint32
	sqes                 []uringSQE
	cqes                 []uringCQE
	sqTailLocal          uint32 // entries filled, published to sqTail by enter
	toSubmit             uint32
	wakeBuf              [8]byte // the eventfd read's, on the heap as the kernel writes it later
}

// IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN: one thread
// submits (the loop's, locked), and the kernel runs completion work only
// when that thread enters to wait, instead of interrupting it.
const uringSetupFlags = 1<<12 | 1<<13

func newURing(entries uint32) (*uRing, error) {
	p := uringParams{flags: uringSetupFlags}
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, fmt.Errorf("io_uring_setup(%d, flags %#x): %w", entries, p.flags, errno)
	}
	r := &uRing{fd: int(fd)}
	mmap := func(off int64, size uint32) ([]byte, error) {
		m, err := unix.Mmap(r.fd, off, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err != nil {
			return nil, fmt.Errorf("mmap io_uring region %#x: %w", off, err)
		}
		return m, nil
	}
	var err error
	if r.sqRing, err = mmap(uringOffSQRing, p.sqOff.array+p.sqEntries*4); err != nil {
		r.close()
		return nil, err
	}
	if r.cqRing, err = mmap(uringOffCQRing, p.cqOff.cqes+p.cqEntries*uint32(unsafe.Sizeof(uringCQE{}))); err != nil {
		r.close()
		return nil, err
	}
	if r.sqeM, err = mmap(uringOffSQEs, p.sqEntries*uint32(unsafe.Sizeof(uringSQE{}))); err != nil {
		r.close()
		return nil, err
	}
	u32 := func(m []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&m[off])) }
	r.sqHead, r.sqTail = u32(r.sqRing, p.sqOff.head), u32(r.sqRing, p.sqOff.tail)
	r.sqMask, r.sqEntries = *u32(r.sqRing, p.sqOff.ringMask), *u32(r.sqRing, p.sqOff.ringEntries)
	r.cqHead, r.cqTail = u32(r.cqRing, p.cqOff.head), u32(r.cqRing, p.cqOff.tail)
	r.cqMask = *u32(r.cqRing, p.cqOff.ringMask)
	r.sqTailLocal = *r.sqTail
	// The index array maps slot i to entry i once and for all.
	array := unsafe.Slice(u32(r.sqRing, p.sqOff.array), p.sqEntries)
	for i := range array {
		array[i] = uint32(i)
	}
	r.sqes = unsafe.Slice((*uringSQE)(unsafe.Pointer(&r.sqeM[0])), p.sqEntries)
	r.cqes = unsafe.Slice((*uringCQE)(unsafe.Pointer(&r.cqRing[p.cqOff.cqes])), p.cqEntries)
	return r, nil
}

func (r *uRing) close() {
	for _, m := range [][]byte{r.sqeM, r.cqRing, r.sqRing} {
		if m != nil {
			_ = unix.Munmap(m)
		}
	}
	unix.Close(r.fd)
}
