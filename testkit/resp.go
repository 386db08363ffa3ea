package testkit

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// redisTimeout bounds one command sent by this package. Test servers are
// local, so a command slower than this means the server is stopped or
// paused, and the caller should hear about it rather than hang.
const redisTimeout = 5 * time.Second

// RedisError is an error reply from Redis, such as "MOVED 866 127.0.0.1:7001"
// or "LOADING ...". Inside an array reply it appears as an element value.
type RedisError string

func (e RedisError) Error() string { return string(e) }

// RedisDo sends one command to the Redis server at addr on a new connection
// and returns its reply: string for simple and bulk strings, int64 for
// integers, []any for arrays, nil for null, and a RedisError as the error for
// an error reply. It speaks RESP2 with the standard library only, so tests
// can drive servers without a client library, and it is safe to call from any
// goroutine.
func RedisDo(addr string, args ...string) (any, error) {
	return redisDoTimeout(addr, redisTimeout, args...)
}

func redisDoTimeout(addr string, timeout time.Duration, args ...string) (any, error) {
	replies, err := redisSession(addr, timeout, args)
	if err != nil {
		return nil, err
	}
	return replies[0], nil
}

// redisSession runs commands one after another on one connection, for
// commands that depend on the connection, such as WAIT after a write. It
// stops at the first error.
func redisSession(addr string, timeout time.Duration, cmds ...[]string) ([]any, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	r := bufio.NewReader(conn)
	var replies []any
	for _, args := range cmds {
		if err := writeCommand(conn, args); err != nil {
			return replies, err
		}
		v, err := readReply(r)
		if err != nil {
			return replies, err
		}
		replies = append(replies, v)
	}
	return replies, nil
}

// redisString runs a command whose reply is a string.
func redisString(addr string, args ...string) (string, error) {
	v, err := RedisDo(addr, args...)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("testkit: %s %s: reply %T, want a string", addr, args[0], v)
	}
	return s, nil
}

func writeCommand(w io.Writer, args []string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("testkit: empty RESP line")
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return nil, RedisError(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, fmt.Errorf("testkit: bad RESP bulk length %q", body)
		}
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, fmt.Errorf("testkit: bad RESP array length %q", body)
		}
		if n < 0 {
			return nil, nil
		}
		arr := make([]any, n)
		for i := range arr {
			v, err := readReply(r)
			var re RedisError
			if errors.As(err, &re) {
				v, err = re, nil
			}
			if err != nil {
				return nil, err
			}
			arr[i] = v
		}
		return arr, nil
	default:
		return nil, fmt.Errorf("testkit: unexpected RESP reply %q", line)
	}
}

// infoField returns field from an INFO or CLUSTER INFO reply.
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}
