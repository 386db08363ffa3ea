// Package sdnotify tells a service manager (systemd) what state the daemon
// is in, by the sd_notify protocol: newline-separated VAR=VALUE lines in one
// datagram to the unix socket named by $NOTIFY_SOCKET. A unit of
// Type=notify is "started" when READY=1 arrives, "reloading" from
// RELOADING=1 to the next READY=1, and "deactivating" from STOPPING=1.
//
// Without $NOTIFY_SOCKET (not started by systemd, or a unit of another
// Type) every call does nothing.
package sdnotify

import (
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
)

// The states floodgate sends.
const (
	Ready    = "READY=1"    // every listener is bound; or a reload is over
	Stopping = "STOPPING=1" // shutting down
)

// Reloading is the state sent as a reload starts: RELOADING=1 with the
// time it started on CLOCK_MONOTONIC, which systemd 253 and later require
// of a reload (MONOTONIC_USEC) and earlier versions ignore.
func Reloading() string {
	if us, ok := monotonicUsec(); ok {
		return "RELOADING=1\nMONOTONIC_USEC=" + strconv.FormatUint(us, 10)
	}
	return "RELOADING=1"
}

// Socket is the environment variable naming the service manager's socket.
const Socket = "NOTIFY_SOCKET"

// Notify sends state to the socket named by $NOTIFY_SOCKET: a file system
// path, or an abstract socket name written with a leading '@'. It reports
// whether a message was sent; without $NOTIFY_SOCKET it sends nothing and
// returns false, nil.
func Notify(state string) (bool, error) {
	name := os.Getenv(Socket)
	if name == "" {
		return false, nil
	}
	if !strings.HasPrefix(name, "/") && !strings.HasPrefix(name, "@") {
		return false, errors.New("sdnotify: $" + Socket + " is neither a path nor an abstract socket name (@…): " + strconv.Quote(name))
	}
	// On Linux, the net package turns a leading '@' into the NUL byte that
	// names an abstract socket.
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return false, err
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return false, err
	}
	return true, nil
}
