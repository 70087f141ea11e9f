package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kahunago/kahuna/internal/testport"
	"github.com/kahunago/kahuna/partition"
)

// clusterPartitions keeps start-up short: one partition led by each node.
const clusterPartitions = 3

// clusterNode is one member's ports and process.
type clusterNode struct {
	id                         uint64
	httpPort, grpcPort, raftPt int
	dir                        string
	proc                       *proc
}

func (n *clusterNode) endpoint() string { return "http://127.0.0.1:" + strconv.Itoa(n.httpPort) }

// newProcessCluster lays out three nodes on loopback ports and returns them
// with start, which runs node n with the cluster's flags and extra.
func newProcessCluster(t *testing.T, bin binaries) (map[uint64]*clusterNode, func(n *clusterNode, extra ...string)) {
	nodes := map[uint64]*clusterNode{}
	var initial, endpoints []string
	for id := uint64(1); id <= 3; id++ {
		n := &clusterNode{id: id, httpPort: testport.Port(t), grpcPort: testport.Port(t), raftPt: testport.Port(t), dir: t.TempDir()}
		nodes[id] = n
		initial = append(initial, fmt.Sprintf("%d=127.0.0.1:%d", id, n.raftPt))
		endpoints = append(endpoints, fmt.Sprintf("%d=%s", id, n.endpoint()))
	}
	start := func(n *clusterNode, extra ...string) {
		n.proc = startNode(t, bin, fmt.Sprintf("node %d", n.id), n.httpPort, append([]string{
			"--raft-nodeid", strconv.FormatUint(n.id, 10),
			"--raft-port", strconv.Itoa(n.raftPt),
			"--http-ports", strconv.Itoa(n.httpPort),
			"--grpc-cleartext-ports", strconv.Itoa(n.grpcPort),
			"--storage-path", n.dir,
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-endpoints", strings.Join(endpoints, ","),
			"--initial-cluster-partitions", strconv.Itoa(clusterPartitions),
			"--log-level", "warn",
		}, extra...)...)
	}
	return nodes, start
}

// startAll founds the cluster: all three nodes at once (a node is ready
// once every partition has a leader, which takes a quorum), with
// "--initial-cluster-state new" as an operator gives it on a first start.
func startAll(t *testing.T, nodes map[uint64]*clusterNode, start func(n *clusterNode, extra ...string)) {
	t.Helper()
	began := time.Now()
	for id := uint64(1); id <= 3; id++ {
		start(nodes[id], "--initial-cluster-state", "new")
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(nodes))
	for _, n := range nodes {
		wg.Go(func() { errs <- n.proc.ready() })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("3 nodes ready in %v", time.Since(began).Round(time.Millisecond))
}

// partitionsJSON is kahunactl partitions --format json.
type partitionsJSON struct {
	Node       uint64 `json:"node"`
	Partitions []struct {
		Partition int    `json:"partition"`
		Leader    uint64 `json:"leader"`
		Serving   bool   `json:"serving"`
	} `json:"partitions"`
}

// testCluster runs three kahuna processes as a cluster: a lock through node
// 1 is busy through node 2, leaders are spread and can be moved with
// kahunactl, a kill -9 of a node leaves its persistent locks served by the
// others, and the node restarted on its data catches up.
func testCluster(t *testing.T, bin binaries) {
	nodes, start := newProcessCluster(t, bin)
	began := time.Now()
	startAll(t, nodes, start)
	ep1, ep2 := nodes[1].endpoint(), nodes[2].endpoint()

	// leaders polls kahunactl partitions on ep until cond holds or the
	// deadline passes, calling again (if not nil) each time it does not.
	leaders := func(ep, what string, within time.Duration, cond func(map[int]uint64) bool) (map[int]uint64, bool) {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			r := ctl(t, bin, "partitions", "--format", "json", "--endpoints", ep)
			got := map[int]uint64{}
			if r.code == exitOK {
				for _, p := range decode[partitionsJSON](t, r).Partitions {
					got[p.Partition] = p.Leader
				}
				if cond(got) {
					return got, true
				}
			}
			if time.Now().After(deadline) {
				t.Logf("%s: not after %v; last: %v (%s)", what, within, got, r)
				return got, false
			}
			time.Sleep(50 * time.Millisecond) // polling Raft state, which has no signal
		}
	}
	mustLeaders := func(ep, what string, cond func(map[int]uint64) bool) map[int]uint64 {
		t.Helper()
		m, ok := leaders(ep, what, 20*time.Second, cond)
		if !ok {
			t.FailNow()
		}
		return m
	}
	// move asks node via for partition p's leadership to go to node to, and
	// waits until node 1..3's view (through via) shows it; a transfer can be
	// dropped (target catching up, another in progress), so it is asked
	// again every 2 s, for up to 20 s.
	move := func(p int, to uint64, via string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			ctl(t, bin, "transfer-leadership", "--partition", strconv.Itoa(p), "--to", strconv.FormatUint(to, 10), "--endpoints", via).want(t, exitOK)
			if _, ok := leaders(via, fmt.Sprintf("partition %d on node %d", p, to), 2*time.Second, func(m map[int]uint64) bool { return m[p] == to }); ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("partition %d not led by node %d after 20s", p, to)
			}
		}
	}
	allLed := func(m map[int]uint64) bool {
		for p := 0; p < clusterPartitions; p++ {
			if m[p] == 0 {
				return false
			}
		}
		return true
	}
	spread := func(m map[int]uint64) bool {
		seen := map[uint64]bool{}
		for _, l := range m {
			seen[l] = true
		}
		return allLed(m) && len(seen) == 3
	}
	// Start-up spreads leaders (partition p to node p%3+1) on a best-effort
	// basis (a move not done in 3 s is left), and under load an election
	// can move one again; finish the spread by hand, asking again until it
	// holds.
	if _, ok := leaders(ep1, "start-up spread of leaders", 2*time.Second, spread); !ok {
		deadline := time.Now().Add(30 * time.Second)
		for {
			m := mustLeaders(ep1, "every partition led", allLed)
			if spread(m) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("leaders not spread over the 3 nodes after 30s: %v", m)
			}
			for p := 0; p < clusterPartitions; p++ {
				if want := uint64(p%3 + 1); m[p] != want {
					ctl(t, bin, "transfer-leadership", "--partition", strconv.Itoa(p), "--to", strconv.FormatUint(want, 10), "--endpoints", nodes[want].endpoint()).want(t, exitOK)
				}
			}
			leaders(ep1, "leaders spread over the 3 nodes", 2*time.Second, spread)
		}
	}
	if r := ctl(t, bin, "partitions", "--endpoints", ep2).want(t, exitOK); !strings.HasPrefix(r.stdout, "as seen by node 2:\n") {
		t.Fatalf("partitions text: %s", r)
	}

	step := func(what string) { t.Logf("%6.2fs %s", time.Since(began).Seconds(), what) }
	step("leaders spread")
	// One persistent lock per partition, through node 1; busy through 2.
	resources := map[int]string{}
	for i := 0; len(resources) < clusterPartitions; i++ {
		res := fmt.Sprintf("e2e-cluster-%d", i)
		if p := partition.Of(res, clusterPartitions); resources[p] == "" {
			resources[p] = res
		}
	}
	owners := map[string]lockJSON{}
	for _, res := range resources {
		l := decode[lockJSON](t, ctl(t, bin, "lock", res, "--ttl", "10m", "--format", "json", "--endpoints", ep1).want(t, exitOK))
		owners[res] = l
		ctl(t, bin, "lock", res, "--owner", "intruder", "--endpoints", ep2).want(t, exitBusy)
	}

	step("locked")
	// Move partition 0 to the next node, asking a third node.
	m := mustLeaders(ep1, "partition 0 led", func(m map[int]uint64) bool { return m[0] != 0 })
	from := m[0]
	to := from%3 + 1
	move(0, to, nodes[to%3+1].endpoint())
	r := ctl(t, bin, "transfer-leadership", "--partition", "0", "--to", "9", "--endpoints", ep1).want(t, exitError)
	if !strings.Contains(r.stderr, "node 9 is not a member") {
		t.Fatalf("transfer to a non-member: %s", r)
	}

	// kill -9 the leader of partition 0: every persistent lock is still
	// held, as seen through the two survivors (a new leader is elected;
	// kahunactl retries MustRetry meanwhile).
	step("transferred")
	victim := nodes[to]
	if err := victim.proc.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	victim.proc.wait()
	var survivors []string
	for id, n := range nodes {
		if id != victim.id {
			survivors = append(survivors, n.endpoint())
		}
	}
	for p, res := range resources {
		busyVia, getVia := survivors[p%2], survivors[(p+1)%2]
		ctl(t, bin, "lock", res, "--owner", "intruder", "--endpoints", busyVia).want(t, exitBusy)
		g := decode[getJSON](t, ctl(t, bin, "get", res, "--format", "json", "--endpoints", getVia).want(t, exitOK))
		if g.Owner != owners[res].Owner || g.FencingToken != owners[res].FencingToken {
			t.Fatalf("%s via %s after kill -9 of node %d: %+v, want %+v", res, getVia, victim.id, g, owners[res])
		}
	}
	step("locks held after kill -9")
	// New grants still work on two nodes.
	ctl(t, bin, "lock", resources[0]+"-new", "--endpoints", survivors[0]).want(t, exitOK)
	mustLeaders(survivors[0], "partition 0 re-elected on a survivor", func(m map[int]uint64) bool { return m[0] != 0 && m[0] != victim.id })

	step("new grant on survivors")
	// Restart the killed node on its data: it serves the same locks.
	start(victim)
	victim.proc.waitReady()
	step("restarted")
	for _, res := range resources {
		g := decode[getJSON](t, ctl(t, bin, "get", res, "--format", "json", "--endpoints", victim.endpoint()).want(t, exitOK))
		if g.Owner != owners[res].Owner || g.FencingToken != owners[res].FencingToken {
			t.Fatalf("%s via restarted node %d: %+v, want %+v", res, victim.id, g, owners[res])
		}
	}
	// And it can lead again.
	move(0, victim.id, victim.endpoint())
	for _, res := range resources {
		ctl(t, bin, "unlock", res, "--owner", owners[res].Owner, "--endpoints", victim.endpoint()).want(t, exitOK)
	}
	// The next grant of each lock carries the next token: the crash lost
	// no grant and reused no token.
	for _, res := range resources {
		l := decode[lockJSON](t, ctl(t, bin, "lock", res, "--format", "json", "--endpoints", ep1).want(t, exitOK))
		if l.FencingToken != owners[res].FencingToken+1 {
			t.Fatalf("%s: token %d after the crash, want %d", res, l.FencingToken, owners[res].FencingToken+1)
		}
	}

	step("moved back, unlocked")
	// SIGTERM stops every node cleanly.
	for _, id := range []uint64{1, 2, 3} {
		if code := nodes[id].proc.signal(syscall.SIGTERM); code != 0 {
			t.Errorf("node %d: exit code %d after SIGTERM", id, code)
		}
	}
	for _, n := range nodes {
		if s := n.proc.stderr.String(); strings.Contains(s, "WARNING: DATA RACE") || strings.Contains(s, "panic:") {
			t.Errorf("node %d:\n%s", n.id, tail(s, 60))
		}
	}
	t.Logf("cluster scenario took %v", time.Since(began).Round(time.Millisecond))
}
