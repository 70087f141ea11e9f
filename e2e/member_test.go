package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kahunago/kahuna/internal/testport"
	"github.com/kahunago/kahuna/partition"
)

// membersJSON is kahunactl member list --format json.
type membersJSON struct {
	Node    uint64 `json:"node"`
	Members []struct {
		ID          uint64 `json:"id"`
		RaftAddress string `json:"raftAddress"`
		Endpoint    string `json:"endpoint"`
		Joined      bool   `json:"joined"`
		Partitions  []int  `json:"partitions"`
	} `json:"members"`
	Removed []uint64 `json:"removed"`
}

// statusJSON is kahunactl status --format json.
type statusJSON []struct {
	Endpoint string `json:"endpoint"`
	Status   *struct {
		Node       uint64 `json:"node"`
		Healthy    bool   `json:"healthy"`
		Partitions []struct {
			Partition int      `json:"partition"`
			Leader    uint64   `json:"leader"`
			Applied   uint64   `json:"applied"`
			Voters    []uint64 `json:"voters"`
		} `json:"partitions"`
	} `json:"status"`
	Error string `json:"error"`
}

// TestMemberReplace replaces a dead member the way docs/operations.md says: kill
// node 3 for good, remove it, add node 4 (new ID, new disk) and start it
// with --initial-cluster-state existing; then kill node 1: nodes 2 and 4
// still hold every persistent lock, and ID 3 can never come back.
func TestMemberReplace(t *testing.T) {
	t.Parallel()
	bin := build(t)
	nodes, start := newProcessCluster(t, bin)
	began := time.Now()
	step := func(what string) { t.Logf("%6.2fs %s", time.Since(began).Seconds(), what) }
	startAll(t, nodes, start)
	ep1, ep2 := nodes[1].endpoint(), nodes[2].endpoint()

	resources := map[int]string{}
	for i := 0; len(resources) < clusterPartitions; i++ {
		res := fmt.Sprintf("e2e-member-%d", i)
		if p := partition.Of(res, clusterPartitions); resources[p] == "" {
			resources[p] = res
		}
	}
	owners := map[string]lockJSON{}
	for _, res := range resources {
		owners[res] = decode[lockJSON](t, ctl(t, bin, "lock", res, "--ttl", "10m", "--format", "json", "--endpoints", ep1).want(t, exitOK))
	}
	held := func(via string) {
		t.Helper()
		for _, res := range resources {
			g := decode[getJSON](t, ctl(t, bin, "get", res, "--format", "json", "--endpoints", via).want(t, exitOK))
			if g.Owner != owners[res].Owner || g.FencingToken != owners[res].FencingToken {
				t.Fatalf("%s via %s: %+v, want %+v", res, via, g, owners[res])
			}
			ctl(t, bin, "lock", res, "--owner", "intruder", "--endpoints", via).want(t, exitBusy)
		}
	}
	step("locked")

	// Node 3 dies for good (its disk with it).
	if err := nodes[3].proc.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	nodes[3].proc.wait()
	r := ctl(t, bin, "member", "remove", "3", "--endpoints", ep1).want(t, exitOK)
	step("removed node 3: " + strings.TrimSpace(r.stdout))

	// Node 4: new ID, new ports, new disk. Add it, then start it.
	n4 := &clusterNode{id: 4, httpPort: testport.Port(t), grpcPort: testport.Port(t), raftPt: testport.Port(t), dir: t.TempDir()}
	raft4 := "127.0.0.1:" + strconv.Itoa(n4.raftPt)
	ctl(t, bin, "member", "add", "4", "--raft-address", raft4, "--endpoint", n4.endpoint(), "--endpoints", ep2).want(t, exitOK)
	initial := fmt.Sprintf("1=127.0.0.1:%d,2=127.0.0.1:%d,4=%s", nodes[1].raftPt, nodes[2].raftPt, raft4)
	endpoints := fmt.Sprintf("1=%s,2=%s,4=%s", ep1, ep2, n4.endpoint())
	n4.proc = startNode(t, bin, "node 4", n4.httpPort,
		"--raft-nodeid", "4", "--raft-port", strconv.Itoa(n4.raftPt),
		"--http-ports", strconv.Itoa(n4.httpPort), "--grpc-cleartext-ports", strconv.Itoa(n4.grpcPort),
		"--storage-path", n4.dir,
		"--initial-cluster", initial, "--initial-cluster-endpoints", endpoints,
		"--initial-cluster-state", "existing",
		"--initial-cluster-partitions", strconv.Itoa(clusterPartitions), "--log-level", "warn")
	n4.proc.waitReady()
	step("node 4 joined")

	// Every member agrees: 1, 2, 4 are voters of every partition, joined.
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := decode[statusJSON](t, ctl(t, bin, "status", "--format", "json", "--endpoints", ep1))
		ok := len(st) == 3
		for _, row := range st {
			if row.Status == nil || !row.Status.Healthy {
				ok = false
				continue
			}
			for _, p := range row.Status.Partitions {
				if fmt.Sprint(p.Voters) != "[1 2 4]" || p.Applied == 0 || p.Leader == 0 {
					ok = false
				}
			}
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status after the replacement: %+v", st)
		}
		time.Sleep(100 * time.Millisecond) // polling Raft state, which has no signal
	}
	t.Logf("kahunactl status:\n%s", ctl(t, bin, "status", "--endpoints", n4.endpoint()))
	t.Logf("kahunactl member list:\n%s", ctl(t, bin, "member", "list", "--endpoints", n4.endpoint()).want(t, exitOK).stdout)
	ml := decode[membersJSON](t, ctl(t, bin, "member", "list", "--format", "json", "--endpoints", ep2).want(t, exitOK))
	if len(ml.Members) != 3 || fmt.Sprint(ml.Removed) != "[3]" {
		t.Fatalf("member list: %+v", ml)
	}
	for _, m := range ml.Members {
		if !m.Joined || len(m.Partitions) != clusterPartitions || m.RaftAddress == "" {
			t.Fatalf("member list: %+v", ml)
		}
	}
	held(n4.endpoint())
	step("node 4 serves every lock")

	// ID 3 never comes back.
	r = ctl(t, bin, "member", "add", "3", "--raft-address", "127.0.0.1:"+strconv.Itoa(nodes[3].raftPt), "--endpoint", nodes[3].endpoint(), "--endpoints", ep1).want(t, exitError)
	if !strings.Contains(r.stderr, "never come back") {
		t.Fatalf("re-adding 3: %s", r)
	}

	// Kill another: node 1. Nodes 2 and 4 are a quorum of {1, 2, 4}.
	if err := nodes[1].proc.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	nodes[1].proc.wait()
	held(ep2)
	held(n4.endpoint())
	ctl(t, bin, "lock", resources[0]+"-new", "--endpoints", n4.endpoint()).want(t, exitOK)
	step("locks held after node 1 killed too")

	// Node 1 restarts on its data with its old flags: its address book
	// knows node 4 and not node 3.
	start(nodes[1])
	nodes[1].proc.waitReady()
	held(ep1)
	step("node 1 back")

	for _, p := range []*proc{nodes[1].proc, nodes[2].proc, n4.proc} {
		if code := p.signal(syscall.SIGTERM); code != 0 {
			t.Errorf("%s: exit code %d after SIGTERM", p.name, code)
		}
		if s := p.stderr.String(); strings.Contains(s, "WARNING: DATA RACE") || strings.Contains(s, "panic:") {
			t.Errorf("%s:\n%s", p.name, tail(s, 60))
		}
	}
}
