package testkit

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// SentinelMasterName is the name the sentinels of a SentinelGroup monitor
// the master under, to pass to a Sentinel client as its master name.
const SentinelMasterName = "floodgate"

// sentinelDownAfter is down-after-milliseconds: how long the master must be
// unreachable before the sentinels consider it down (default 30 s).
const sentinelDownAfter = 1000 * time.Millisecond

// SentinelGroup is a Redis master with replicas, monitored by Redis
// Sentinel, started for one test. Every process is killed when the test
// ends.
type SentinelGroup struct {
	// MasterName is SentinelMasterName.
	MasterName string
	// Addrs lists the data nodes; the first was the master at start.
	Addrs []string
	// SentinelAddrs lists the sentinels.
	SentinelAddrs []string

	t         testing.TB
	nodes     map[string]*RedisServer
	sentinels []*RedisServer
}

// RedisSentinel starts one master, replicas replicas of it and sentinels
// sentinel processes (quorum: a majority of them), and waits until the
// replicas are in sync and every sentinel sees the master, all replicas and
// all other sentinels. The master is declared down after 1 s unreachable,
// so a failover completes in a few seconds.
func RedisSentinel(t testing.TB, replicas, sentinels int) *SentinelGroup {
	t.Helper()
	if replicas < 1 || sentinels < 1 {
		t.Fatalf("testkit: RedisSentinel(%d, %d): need at least one replica to fail over to and one sentinel", replicas, sentinels)
	}
	g := &SentinelGroup{MasterName: SentinelMasterName, t: t, nodes: map[string]*RedisServer{}}
	master := Redis(t)
	g.add(master)
	for range replicas {
		g.add(startRedis(t, "redis replica", 1, func(ports []int, dir string) ([]string, error) {
			return append(redisArgs(ports[0], dir), "--replicaof", "127.0.0.1", strconv.Itoa(master.Port)), nil
		}))
	}
	g.poll("replicas in sync", func() error {
		for _, addr := range g.Addrs[1:] {
			if err := replicaInSync(addr); err != nil {
				return err
			}
		}
		return nil
	})

	quorum := sentinels/2 + 1
	for range sentinels {
		s := startRedis(t, "redis sentinel", 1, func(ports []int, dir string) ([]string, error) {
			conf := filepath.Join(dir, "sentinel.conf")
			return []string{conf, "--sentinel"}, writeFile(conf, fmt.Sprintf(`port %d
bind 127.0.0.1
dir %s
daemonize no
logfile ""
sentinel monitor %s 127.0.0.1 %d %d
sentinel down-after-milliseconds %s %d
sentinel failover-timeout %s 3000
sentinel parallel-syncs %s 1
`, ports[0], dir, SentinelMasterName, master.Port, quorum,
				SentinelMasterName, sentinelDownAfter.Milliseconds(), SentinelMasterName, SentinelMasterName))
		})
		g.sentinels = append(g.sentinels, s)
		g.SentinelAddrs = append(g.SentinelAddrs, s.Addr)
	}
	g.poll("sentinels to discover the group", func() error {
		for _, s := range g.SentinelAddrs {
			m, err := sentinelMaster(s)
			if err != nil {
				return err
			}
			if m["ip"]+":"+m["port"] != master.Addr || m["flags"] != "master" {
				return fmt.Errorf("sentinel %s sees master %s:%s flags %s", s, m["ip"], m["port"], m["flags"])
			}
			if m["num-slaves"] != strconv.Itoa(replicas) || m["num-other-sentinels"] != strconv.Itoa(sentinels-1) {
				return fmt.Errorf("sentinel %s knows %s replicas and %s other sentinels, want %d and %d",
					s, m["num-slaves"], m["num-other-sentinels"], replicas, sentinels-1)
			}
		}
		return nil
	})
	return g
}

func (g *SentinelGroup) add(s *RedisServer) {
	g.Addrs = append(g.Addrs, s.Addr)
	g.nodes[s.Addr] = s
}

// Node returns the data node at addr, to Kill, Restart, Pause or DebugSleep
// it.
func (g *SentinelGroup) Node(addr string) *RedisServer {
	g.t.Helper()
	s, ok := g.nodes[addr]
	if !ok {
		g.t.Fatalf("testkit: %s is not a data node of this group (nodes: %v)", addr, g.Addrs)
	}
	return s
}

// Sentinel returns the i-th sentinel process.
func (g *SentinelGroup) Sentinel(i int) *RedisServer {
	return g.sentinels[i]
}

// MasterAddr returns the master's address according to the first sentinel
// that answers (SENTINEL GET-MASTER-ADDR-BY-NAME), as a client would learn it.
func (g *SentinelGroup) MasterAddr() string {
	g.t.Helper()
	var errs []string
	for _, s := range g.SentinelAddrs {
		addr, err := sentinelMasterAddr(s)
		if err == nil {
			return addr
		}
		errs = append(errs, err.Error())
	}
	g.t.Fatalf("testkit: no sentinel named the master: %s", strings.Join(errs, "; "))
	return ""
}

// WaitFailover waits until every running sentinel names a master other than
// old, that master is a running data node and reports itself master (ROLE),
// and returns its address. Kill the master first.
func (g *SentinelGroup) WaitFailover(old string) string {
	g.t.Helper()
	var winner string
	g.poll("failover away from "+old, func() error {
		winner = ""
		for _, s := range g.sentinels {
			if !s.Running() {
				continue
			}
			addr, err := sentinelMasterAddr(s.Addr)
			if err != nil {
				return err
			}
			if addr == old {
				return fmt.Errorf("sentinel %s still names %s", s.Addr, old)
			}
			if winner != "" && addr != winner {
				return fmt.Errorf("sentinels disagree: %s and %s", winner, addr)
			}
			winner = addr
		}
		if n, ok := g.nodes[winner]; !ok || !n.Running() {
			return fmt.Errorf("sentinels name %s, which is not a running data node", winner)
		}
		return roleIs(winner, "master")
	})
	return winner
}

func (g *SentinelGroup) poll(what string, cond func() error) {
	g.t.Helper()
	deadline := time.Now().Add(clusterWait)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			var logs strings.Builder
			for _, s := range g.sentinels {
				s.mu.Lock()
				fmt.Fprintf(&logs, "sentinel %s log:\n%s\n", s.Addr, tail(s.proc.newLog(), 15))
				s.mu.Unlock()
			}
			g.t.Fatalf("testkit: Redis Sentinel: waited %v for %s: %v\n%s", clusterWait, what, err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// replicaInSync checks that a replica has finished its initial sync and is
// receiving its master's write stream.
func replicaInSync(addr string) error {
	repl, err := redisString(addr, "INFO", "replication")
	if err != nil {
		return err
	}
	if st := infoField(repl, "master_link_status"); st != "up" {
		return fmt.Errorf("replica %s: master_link_status:%s", addr, st)
	}
	if st := infoField(repl, "master_sync_in_progress"); st != "0" {
		return fmt.Errorf("replica %s: master_sync_in_progress:%s", addr, st)
	}
	return nil
}

// sentinelMaster returns SENTINEL MASTER's field/value pairs.
func sentinelMaster(sentinel string) (map[string]string, error) {
	v, err := RedisDo(sentinel, "SENTINEL", "MASTER", SentinelMasterName)
	if err != nil {
		return nil, err
	}
	arr, _ := v.([]any)
	m := map[string]string{}
	for i := 0; i+1 < len(arr); i += 2 {
		k, _ := arr[i].(string)
		val, _ := arr[i+1].(string)
		m[k] = val
	}
	return m, nil
}

func sentinelMasterAddr(sentinel string) (string, error) {
	v, err := RedisDo(sentinel, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMasterName)
	if err != nil {
		return "", err
	}
	arr, _ := v.([]any)
	if len(arr) != 2 {
		return "", fmt.Errorf("sentinel %s: GET-MASTER-ADDR-BY-NAME = %v", sentinel, v)
	}
	host, _ := arr[0].(string)
	port, _ := arr[1].(string)
	return net.JoinHostPort(host, port), nil
}
