package testkit

import (
	"errors"
	"net"
	"slices"
	"testing"
	"time"
)

func mustDo(t *testing.T, addr string, args ...string) any {
	t.Helper()
	v, err := RedisDo(addr, args...)
	if err != nil {
		t.Fatalf("%s %v: %v", addr, args, err)
	}
	return v
}

func TestRedis(t *testing.T) {
	t.Parallel()
	r := Redis(t)
	if host, _, _ := net.SplitHostPort(r.Addr); host != "127.0.0.1" {
		t.Fatalf("Addr = %s, want a 127.0.0.1 address", r.Addr)
	}
	if v := mustDo(t, r.Addr, "SET", "k", "v"); v != "OK" {
		t.Fatalf("SET = %v", v)
	}
	if v := mustDo(t, r.Addr, "GET", "k"); v != "v" {
		t.Fatalf("GET = %v", v)
	}
	if v := mustDo(t, r.Addr, "CONFIG", "GET", "save"); !slices.Equal(v.([]any), []any{"save", ""}) {
		t.Fatalf("CONFIG GET save = %v, want persistence off", v)
	}
	if _, err := r.Do("NOSUCHCOMMAND"); !errors.As(err, new(RedisError)) {
		t.Fatalf("unknown command: err = %v, want a RedisError", err)
	}

	r.Kill()
	if r.Running() {
		t.Fatal("Running after Kill")
	}
	if _, err := r.Do("PING"); err == nil {
		t.Fatal("PING succeeded after Kill")
	}

	addr := r.Addr
	r.Restart()
	if r.Addr != addr {
		t.Fatalf("Addr changed on Restart: %s -> %s", addr, r.Addr)
	}
	if v := mustDo(t, r.Addr, "GET", "k"); v != nil {
		t.Fatalf("GET after restart = %v, want nil (no persistence)", v)
	}

	// Restart of a running server replaces it.
	r.Restart()
	mustDo(t, r.Addr, "PING")

	r.Stop()
	if r.Running() {
		t.Fatal("Running after Stop")
	}
	r.Restart()
	mustDo(t, r.Addr, "PING")
}

func TestRedisPauseAndDebugSleep(t *testing.T) {
	t.Parallel()
	r := Redis(t)

	// Each clock starts before the command that stalls the server is sent,
	// so the server's stall ends at least 300 ms later however long the
	// test goroutine is kept waiting: a slow machine can only lengthen d.
	// (Started after the command returned, the clock would miss however
	// much of the stall passed before this goroutine ran again.) The bound
	// is half the stall, since a command that was not held returns within
	// round trips.
	const stall, held = 300 * time.Millisecond, 150 * time.Millisecond
	start := time.Now()
	r.Pause(stall)
	mustDo(t, r.Addr, "GET", "k")
	if d := time.Since(start); d < held {
		t.Fatalf("GET during CLIENT PAUSE returned %v after the pause was sent, want it held", d)
	}

	start = time.Now()
	done := r.DebugSleep(stall)
	mustDo(t, r.Addr, "PING")
	if d := time.Since(start); d < held {
		t.Fatalf("PING during DEBUG SLEEP returned %v after the sleep was sent, want it held", d)
	}
	if err := <-done; err != nil {
		t.Fatalf("DEBUG SLEEP: %v", err)
	}
}

// TestRedisPauseWrites: between PauseWrites and Unpause a write (and a
// script) is held however long that is, while reads answer; Unpause
// releases it. The server's own count of blocked clients shows the write
// is held, so nothing here depends on how fast the machine is.
func TestRedisPauseWrites(t *testing.T) {
	t.Parallel()
	r := Redis(t)
	r.PauseWrites()
	set := make(chan error, 1)
	go func() {
		_, err := RedisDo(r.Addr, "EVAL", "return redis.call('SET', KEYS[1], 'v')", "1", "k")
		set <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, _ := mustDo(t, r.Addr, "INFO", "clients").(string)
		if infoField(info, "blocked_clients") == "1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the EVAL is not held 10 s after PauseWrites: %s", info)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if v := mustDo(t, r.Addr, "GET", "k"); v != nil {
		t.Fatalf("GET k = %v during the pause, want nil: the write was not held", v)
	}
	select {
	case err := <-set:
		t.Fatalf("the EVAL returned (%v) before Unpause", err)
	default:
	}
	r.Unpause()
	select {
	case err := <-set:
		if err != nil {
			t.Fatalf("EVAL after Unpause: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the EVAL still held 10 s after Unpause")
	}
	if v := mustDo(t, r.Addr, "GET", "k"); v != "v" {
		t.Fatalf("GET k = %v after Unpause, want v", v)
	}
}

func TestKeySlot(t *testing.T) {
	for key, want := range map[string]int{
		"":                     0,
		"123456789":            0x31C3 % 16384, // CRC-16/XMODEM check value
		"foo":                  12182,
		"bar":                  5061,
		"hello":                866,
		"{user1000}.following": KeySlot("user1000"),
		"{user1000}.followers": KeySlot("user1000"),
		"foo{}{bar}":           KeySlot("foo{}{bar}"), // empty tag: whole key
		"foo{{bar}}zap":        KeySlot("{bar"),
		"foo{bar}{zap}":        KeySlot("bar"),
	} {
		if got := KeySlot(key); got != want {
			t.Errorf("KeySlot(%q) = %d, want %d", key, got, want)
		}
	}
}

func TestRedisCluster(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := RedisCluster(t, 3, 1)
	t.Logf("cluster of %d nodes ready in %v", len(c.Addrs), time.Since(start))
	if len(c.Addrs) != 6 {
		t.Fatalf("Addrs = %v, want 6 nodes", c.Addrs)
	}
	masters := c.Masters()
	replicas := c.Replicas()
	if len(masters) != 3 || len(replicas) != 3 {
		t.Fatalf("Masters = %v, Replicas = %v, want 3 of each", masters, replicas)
	}
	for _, addr := range c.Addrs {
		info := mustDo(t, addr, "CLUSTER", "INFO").(string)
		if infoField(info, "cluster_state") != "ok" || infoField(info, "cluster_slots_ok") != "16384" {
			t.Fatalf("%s CLUSTER INFO:\n%s", addr, info)
		}
	}

	// KeySlot agrees with the server, hash tags included.
	for _, key := range []string{"a", "foo", "{user1}.x", "x{user1}", "foo{}{bar}", "foo{{bar}}zap", "rl:{api}:1.2.3.4", "ключ"} {
		want := mustDo(t, c.Addrs[0], "CLUSTER", "KEYSLOT", key).(int64)
		if got := KeySlot(key); int64(got) != want {
			t.Errorf("KeySlot(%q) = %d, server says %d", key, got, want)
		}
	}

	// MasterForKey names the node that accepts the key without MOVED.
	key := "rl:{tenant-7}:gcra"
	owner := c.MasterForKey(key)
	// Replication is asynchronous: WAIT, on the connection that wrote,
	// makes sure the replica has the key before its master is killed.
	if r, err := redisSession(owner, 5*time.Second, []string{"SET", key, "1"}, []string{"WAIT", "1", "4000"}); err != nil || r[0] != "OK" || r[1] != int64(1) {
		t.Fatalf("SET + WAIT 1 on owner = %v, %v; want OK and one replica acknowledging", r, err)
	}
	for _, m := range masters {
		if m == owner {
			continue
		}
		if _, err := RedisDo(m, "GET", key); err == nil || !errors.As(err, new(RedisError)) || string(err.(RedisError))[:5] != "MOVED" {
			t.Fatalf("GET on non-owner %s: err = %v, want MOVED", m, err)
		}
	}

	// Kill the owner: one of the replicas takes over its slots.
	start = time.Now()
	c.KillNode(owner)
	promoted := c.WaitFailover(owner)
	t.Logf("failover of %s to %s took %v", owner, promoted, time.Since(start))
	if !slices.Contains(replicas, promoted) {
		t.Fatalf("promoted %s was not a replica (replicas %v)", promoted, replicas)
	}
	if got := c.MasterForKey(key); got != promoted {
		t.Fatalf("MasterForKey after failover = %s, want %s", got, promoted)
	}
	if v := mustDo(t, promoted, "GET", key); v != "1" {
		t.Fatalf("GET on promoted replica = %v, want the replicated value", v)
	}
	if m := c.Masters(); len(m) != 3 || slices.Contains(m, owner) {
		t.Fatalf("Masters after failover = %v", m)
	}

	// The old master comes back as a replica of its successor.
	c.RestartNode(owner)
	c.WaitHealthy()
	if err := roleIs(owner, "slave"); err != nil {
		t.Fatalf("restarted old master: %v", err)
	}
}

func TestRedisSentinel(t *testing.T) {
	t.Parallel()
	start := time.Now()
	g := RedisSentinel(t, 2, 3)
	t.Logf("sentinel group ready in %v", time.Since(start))
	master := g.MasterAddr()
	if master != g.Addrs[0] {
		t.Fatalf("MasterAddr = %s, want the first node %s", master, g.Addrs[0])
	}
	if r, err := redisSession(master, 5*time.Second, []string{"SET", "k", "v"}, []string{"WAIT", "2", "4000"}); err != nil || r[1] != int64(2) {
		t.Fatalf("SET + WAIT 2 = %v, %v; want both replicas to acknowledge", r, err)
	}

	start = time.Now()
	g.Node(master).Kill()
	promoted := g.WaitFailover(master)
	t.Logf("failover of %s to %s took %v", master, promoted, time.Since(start))
	if promoted == master || !slices.Contains(g.Addrs, promoted) {
		t.Fatalf("promoted %s, want one of the replicas %v", promoted, g.Addrs[1:])
	}
	if got := g.MasterAddr(); got != promoted {
		t.Fatalf("MasterAddr after failover = %s, want %s", got, promoted)
	}
	if v := mustDo(t, promoted, "GET", "k"); v != "v" {
		t.Fatalf("GET on the new master = %v", v)
	}
	mustDo(t, promoted, "SET", "k", "w")
}

func TestRedisPortTaken(t *testing.T) {
	t.Parallel()
	r := Redis(t)
	r.Kill()
	l, err := net.Listen("tcp", r.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r.mu.Lock()
	err = r.start()
	r.mu.Unlock()
	if !errors.Is(err, errPortInUse) {
		t.Fatalf("start on a taken port: err = %v, want errPortInUse", err)
	}
	l.Close()
	r.Restart()
	mustDo(t, r.Addr, "PING")
}
