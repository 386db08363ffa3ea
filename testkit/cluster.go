package testkit

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// clusterNodeTimeout is cluster-node-timeout for test clusters: a dead
// master is detected and failed over within a few seconds, instead of the
// 15 s default.
const clusterNodeTimeout = 1000 * time.Millisecond

// clusterWait bounds every wait for the cluster to converge. With the node
// timeout above, creation and failover take a few seconds; 30 s means
// something is wrong.
const clusterWait = 30 * time.Second

// Cluster is a Redis Cluster started for one test: its nodes are killed when
// the test ends.
type Cluster struct {
	// Addrs lists every node. Roles change on failover; ask Masters and
	// Replicas for the current ones.
	Addrs []string

	t           testing.TB
	nodes       map[string]*RedisServer
	masters     int
	replicasPer int

	mu     sync.Mutex
	killed map[string][]slotRange // slots each killed master owned
}

// RedisCluster starts masters*(1+replicasPerMaster) redis-server nodes with
// cluster mode on, joins them with redis-cli --cluster create, and waits
// until every node reports cluster_state:ok with all 16384 slots covered,
// knows every other node, and every replica is in sync with its master.
// masters must be at least 3, as redis-cli requires.
//
// cluster-node-timeout is 1 s so a killed master is failed over in seconds,
// and replicas may always be promoted (cluster-replica-validity-factor 0),
// so a failover test does not depend on how fresh the replica is.
func RedisCluster(t testing.TB, masters, replicasPerMaster int) *Cluster {
	t.Helper()
	if masters < 3 || replicasPerMaster < 0 {
		t.Fatalf("testkit: RedisCluster(%d, %d): need at least 3 masters (redis-cli --cluster create refuses fewer) and replicasPerMaster >= 0",
			masters, replicasPerMaster)
	}
	cli := RequireBinary(t, "redis-cli", "redis-server")
	c := &Cluster{
		t:           t,
		nodes:       map[string]*RedisServer{},
		masters:     masters,
		replicasPer: replicasPerMaster,
		killed:      map[string][]slotRange{},
	}
	n := masters * (1 + replicasPerMaster)
	for i := 0; i < n; i++ {
		// The cluster bus port is chosen explicitly rather than left at
		// port+10000, which may be taken or beyond 65535 for high ports.
		s := startRedis(t, "redis cluster node", 2, func(ports []int, dir string) ([]string, error) {
			return append(redisArgs(ports[0], dir),
				"--cluster-enabled", "yes",
				"--cluster-config-file", "nodes.conf",
				"--cluster-port", strconv.Itoa(ports[1]),
				"--cluster-node-timeout", strconv.FormatInt(clusterNodeTimeout.Milliseconds(), 10),
				"--cluster-replica-validity-factor", "0",
			), nil
		})
		c.Addrs = append(c.Addrs, s.Addr)
		c.nodes[s.Addr] = s
	}

	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicasPerMaster), "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testkit: redis-cli %s: %v\n%s", strings.Join(args, " "), err, tail(string(out), 30))
	}
	c.waitStable(true)
	return c
}

// Node returns the server at addr, to Kill, Restart, Pause or DebugSleep it.
func (c *Cluster) Node(addr string) *RedisServer {
	c.t.Helper()
	s, ok := c.nodes[addr]
	if !ok {
		c.t.Fatalf("testkit: %s is not a node of this cluster (nodes: %v)", addr, c.Addrs)
	}
	return s
}

// KillNode kills the node at addr with SIGKILL, as a crash. If it was a
// master, WaitFailover(addr) waits until one of its replicas has taken over;
// kill masters with KillNode rather than Node(addr).Kill, so that the slots
// it served are recorded first.
func (c *Cluster) KillNode(addr string) {
	c.t.Helper()
	s := c.Node(addr)
	var owned []slotRange
	if v, err := redisDoTimeout(addr, time.Second, "CLUSTER", "NODES"); err == nil {
		str, _ := v.(string)
		for _, n := range parseClusterNodes(str) {
			if n.myself && n.master {
				owned = n.slots
			}
		}
	}
	s.Kill()
	c.mu.Lock()
	c.killed[addr] = owned
	c.mu.Unlock()
}

// RestartNode starts a killed or stopped node again on the same ports. It
// keeps its nodes.conf, so it rejoins the cluster; a master that was failed
// over comes back as a replica of its successor. Use WaitHealthy to wait
// until the cluster has absorbed it.
func (c *Cluster) RestartNode(addr string) {
	c.t.Helper()
	c.Node(addr).Restart()
	c.mu.Lock()
	delete(c.killed, addr)
	c.mu.Unlock()
}

// WaitFailover waits until the slots that the master at killed owned when
// KillNode was called are served by another live node that reports itself
// master, every live node agrees on it, and every live node reports
// cluster_state:ok. It returns the new master's address.
func (c *Cluster) WaitFailover(killed string) string {
	c.t.Helper()
	c.mu.Lock()
	slots, ok := c.killed[killed]
	c.mu.Unlock()
	if !ok || len(slots) == 0 {
		c.t.Fatalf("testkit: WaitFailover(%s): the node was not a master owning slots when KillNode killed it", killed)
	}
	slot := slots[0].from
	var winner string
	err := c.poll(func() error {
		winner = ""
		for _, addr := range c.live() {
			if err := clusterOK(addr); err != nil {
				return err
			}
			nodes, err := clusterNodes(addr)
			if err != nil {
				return err
			}
			owner := ownerOf(nodes, slot)
			if owner == "" || owner == killed {
				return fmt.Errorf("%s sees slot %d owned by %q", addr, slot, owner)
			}
			if winner != "" && owner != winner {
				return fmt.Errorf("nodes disagree on slot %d: %s and %s", slot, winner, owner)
			}
			winner = owner
		}
		if !slices.Contains(c.live(), winner) {
			return fmt.Errorf("slot %d owned by %s, which is not running", slot, winner)
		}
		return roleIs(winner, "master")
	})
	if err != nil {
		c.t.Fatalf("testkit: no replica took over the slots of killed master %s within %v: %v\n%s", killed, clusterWait, err, c.describe())
	}
	return winner
}

// WaitHealthy waits until every live node reports cluster_state:ok with all
// slots covered, all live nodes agree on which node serves every slot, no
// live node is flagged as failing, and every live replica is in sync. Use it
// after RestartNode, or before a test that needs a settled cluster.
func (c *Cluster) WaitHealthy() {
	c.t.Helper()
	c.waitStable(false)
}

func (c *Cluster) waitStable(allKnown bool) {
	c.t.Helper()
	err := c.poll(func() error {
		live := c.live()
		var first []clusterNode
		masters, replicas := 0, 0
		for _, addr := range live {
			if err := clusterOK(addr); err != nil {
				return err
			}
			info, err := redisString(addr, "CLUSTER", "INFO")
			if err != nil {
				return err
			}
			if allKnown {
				if k := infoField(info, "cluster_known_nodes"); k != strconv.Itoa(len(c.Addrs)) {
					return fmt.Errorf("%s knows %s nodes, want %d", addr, k, len(c.Addrs))
				}
			}
			nodes, err := clusterNodes(addr)
			if err != nil {
				return err
			}
			for _, n := range nodes {
				if n.failing && slices.Contains(live, n.addr) {
					return fmt.Errorf("%s still flags live node %s as failing", addr, n.addr)
				}
			}
			if first == nil {
				first = nodes
			} else if a, b := slotMap(first), slotMap(nodes); a != b {
				return fmt.Errorf("%s and %s disagree on slot owners", live[0], addr)
			}
			for _, n := range nodes {
				if !n.myself {
					continue
				}
				if n.master && len(n.slots) > 0 {
					masters++
				}
				if !n.master {
					replicas++
					if err := replicaInSync(addr); err != nil {
						return err
					}
				}
			}
		}
		// Every node's view of every running node's role must match what
		// that node says of itself, so a client sees the same topology
		// whichever node it asks.
		selves := c.selves()
		for _, addr := range live {
			nodes, err := clusterNodes(addr)
			if err != nil {
				return err
			}
			for _, n := range nodes {
				if self, ok := selves[n.addr]; ok && self.master != n.master {
					return fmt.Errorf("%s thinks %s is master=%v, but it says master=%v", addr, n.addr, n.master, self.master)
				}
			}
		}
		// redis-cli makes replicas with CLUSTER REPLICATE once the nodes
		// know each other, which may be after the cluster reports ok; until
		// then a future replica is a master without slots.
		if wantM, wantR := c.masters, c.masters*c.replicasPer; allKnown && (masters != wantM || replicas != wantR) {
			return fmt.Errorf("%d masters with slots and %d replicas, want %d and %d", masters, replicas, wantM, wantR)
		}
		return nil
	})
	if err != nil {
		c.t.Fatalf("testkit: Redis Cluster not healthy within %v: %v\n%s", clusterWait, err, c.describe())
	}
}

// Masters returns the running nodes that say they are masters serving
// slots. Each node is asked about itself, which is authoritative and does not
// lag behind gossip; a node that does not answer within a second (paused,
// sleeping) is left out.
func (c *Cluster) Masters() []string {
	c.t.Helper()
	var out []string
	for addr, n := range c.selves() {
		if n.master && len(n.slots) > 0 {
			out = append(out, addr)
		}
	}
	slices.Sort(out)
	return out
}

// Replicas returns the running nodes that say they are replicas; see
// Masters.
func (c *Cluster) Replicas() []string {
	c.t.Helper()
	var out []string
	for addr, n := range c.selves() {
		if !n.master {
			out = append(out, addr)
		}
	}
	slices.Sort(out)
	return out
}

// MasterForKey returns the address of the master serving key's slot. Hash
// tags count: "{user1}.a" and "{user1}.b" are on the same master.
func (c *Cluster) MasterForKey(key string) string {
	c.t.Helper()
	return c.MasterForSlot(KeySlot(key))
}

// MasterForSlot returns the address of the running master that says it
// serves slot; see Masters.
func (c *Cluster) MasterForSlot(slot int) string {
	c.t.Helper()
	var owners []string
	for addr, n := range c.selves() {
		if n.master && ownerOf([]clusterNode{n}, slot) != "" {
			owners = append(owners, addr)
		}
	}
	if len(owners) != 1 {
		c.t.Fatalf("testkit: slot %d is claimed by %d running masters %v, want exactly one\n%s", slot, len(owners), owners, c.describe())
	}
	return owners[0]
}

// selves returns each running node's CLUSTER NODES line about itself.
func (c *Cluster) selves() map[string]clusterNode {
	out := map[string]clusterNode{}
	for _, addr := range c.live() {
		s, err := redisDoTimeout(addr, time.Second, "CLUSTER", "NODES")
		str, ok := s.(string)
		if err != nil || !ok {
			continue
		}
		for _, n := range parseClusterNodes(str) {
			if n.myself {
				out[addr] = n
			}
		}
	}
	return out
}

// live returns the nodes whose process is running.
func (c *Cluster) live() []string {
	var out []string
	for _, addr := range c.Addrs {
		if c.nodes[addr].Running() {
			out = append(out, addr)
		}
	}
	return out
}

// describe dumps every live node's view, for failure messages.
func (c *Cluster) describe() string {
	var b strings.Builder
	for _, addr := range c.Addrs {
		if !c.nodes[addr].Running() {
			fmt.Fprintf(&b, "%s: not running\n", addr)
			continue
		}
		v, err := redisString(addr, "CLUSTER", "NODES")
		if err != nil {
			fmt.Fprintf(&b, "%s: CLUSTER NODES: %v\n", addr, err)
			continue
		}
		fmt.Fprintf(&b, "%s CLUSTER NODES:\n%s", addr, v)
	}
	return b.String()
}

func (c *Cluster) poll(cond func() error) error {
	deadline := time.Now().Add(clusterWait)
	for {
		err := cond()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// clusterOK checks one node's CLUSTER INFO.
func clusterOK(addr string) error {
	info, err := redisString(addr, "CLUSTER", "INFO")
	if err != nil {
		return err
	}
	if st := infoField(info, "cluster_state"); st != "ok" {
		return fmt.Errorf("%s: cluster_state:%s", addr, st)
	}
	if ok := infoField(info, "cluster_slots_ok"); ok != "16384" {
		return fmt.Errorf("%s: cluster_slots_ok:%s", addr, ok)
	}
	return nil
}

// roleIs checks a node's own idea of its role (ROLE), which changes the
// moment a replica is promoted, before gossip spreads the news.
func roleIs(addr, want string) error {
	v, err := RedisDo(addr, "ROLE")
	if err != nil {
		return err
	}
	if arr, ok := v.([]any); !ok || len(arr) == 0 || arr[0] != want {
		return fmt.Errorf("%s: ROLE = %v, want %s", addr, v, want)
	}
	return nil
}

type slotRange struct{ from, to int }

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr string
	myself   bool
	master   bool
	failing  bool // flagged fail or fail? (PFAIL)
	slots    []slotRange
}

func clusterNodes(addr string) ([]clusterNode, error) {
	s, err := redisString(addr, "CLUSTER", "NODES")
	if err != nil {
		return nil, err
	}
	return parseClusterNodes(s), nil
}

// parseClusterNodes parses lines of the form
// "<id> <ip:port@cport[,hostname]> <flags> <master> <ping> <pong> <epoch> <link> <slot>...".
func parseClusterNodes(s string) []clusterNode {
	var out []clusterNode
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := clusterNode{id: f[0], addr: addr}
		for _, flag := range strings.Split(f[2], ",") {
			switch flag {
			case "myself":
				n.myself = true
			case "master":
				n.master = true
			case "fail", "fail?":
				n.failing = true
			}
		}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") { // a slot being migrated or imported
				continue
			}
			a, b, isRange := strings.Cut(r, "-")
			from, err1 := strconv.Atoi(a)
			to := from
			var err2 error
			if isRange {
				to, err2 = strconv.Atoi(b)
			}
			if err1 == nil && err2 == nil {
				n.slots = append(n.slots, slotRange{from, to})
			}
		}
		out = append(out, n)
	}
	return out
}

func ownerOf(nodes []clusterNode, slot int) string {
	for _, n := range nodes {
		for _, r := range n.slots {
			if slot >= r.from && slot <= r.to {
				return n.addr
			}
		}
	}
	return ""
}

// slotMap renders who owns which slots, to compare two nodes' views.
func slotMap(nodes []clusterNode) string {
	var parts []string
	for _, n := range nodes {
		for _, r := range n.slots {
			parts = append(parts, fmt.Sprintf("%05d-%05d=%s", r.from, r.to, n.addr))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// KeySlot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of the
// key modulo 16384, where a non-empty "{tag}" (the first "{" and the first
// "}" after it) hashes only the tag, so related keys can share a slot.
func KeySlot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			key = key[open+1 : open+1+end]
		}
	}
	return int(crc16(key) % 16384)
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the variant
// Redis Cluster uses.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
