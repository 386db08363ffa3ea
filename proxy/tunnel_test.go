package proxy

import (
	"net"
	"testing"
	"time"
)

// A client that reads steadily but slower than the upstream sends is not
// idle: a write to it that takes longer than the idle timeout as a whole,
// while every part of it finds room within the timeout, completes. (The
// write was given the idle timeout as a whole, so a slow reader's tunnel
// was cut as soon as one write had to wait for it.) A client that reads
// nothing at all still gets its write failed after the timeout.
func TestIdleConnSlowReader(t *testing.T) {
	const idle = 100 * time.Millisecond
	proxySide, client := net.Pipe()
	t.Cleanup(func() { proxySide.Close(); client.Close() })
	c := &idleConn{Conn: proxySide, idle: idle}
	c.touch()

	// 1 KiB every 20 ms: 64 KiB take over a second, 10 idle timeouts.
	read := make(chan int)
	go func() {
		buf := make([]byte, 1<<10)
		total := 0
		for total < 64<<10 {
			n, err := client.Read(buf)
			total += n
			if err != nil {
				break
			}
			time.Sleep(20 * time.Millisecond) // the client's pace, not a wait for the proxy
		}
		read <- total
	}()
	n, err := c.Write(make([]byte, 64<<10))
	if err != nil || n != 64<<10 {
		t.Fatalf("Write to a slow reader: %d bytes, %v; want all 65536 and no error", n, err)
	}
	if got := <-read; got != 64<<10 {
		t.Fatalf("the client read %d bytes, want 65536", got)
	}

	// Nobody reads: the write fails once idle has passed without progress.
	start := time.Now()
	if _, err := c.Write(make([]byte, 1<<10)); err == nil {
		t.Fatal("Write to a client that reads nothing succeeded")
	}
	if took := time.Since(start); took < idle {
		t.Fatalf("Write to a client that reads nothing failed after %v, before the idle timeout %v", took, idle)
	}
}
