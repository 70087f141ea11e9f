package kahuna_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/internal/testcluster"
	"github.com/kahunago/kahuna/internal/testknobs"
)

// lockEverywhere takes n persistent locks spread over the partitions, via
// node 1, and returns resource → owner.
func lockEverywhere(t *testing.T, c *testcluster.Cluster, n int) map[string]string {
	t.Helper()
	ctx := context.Background()
	held := map[string]string{}
	for i := range n {
		res, owner := fmt.Sprintf("member/r%d", i), fmt.Sprintf("owner-%d", i)
		if r := testcluster.Settled(t, func() (kahuna.Result, error) {
			return c.Node(1).TryLock(ctx, res, []byte(owner), time.Hour, kahuna.Persistent)
		}); r.Status != kahuna.Locked {
			t.Fatalf("lock %s: %+v", res, r)
		}
		held[res] = owner
	}
	return held
}

// checkHeld asserts, through node via, that every lock in held is still
// held by its owner.
func checkHeld(t *testing.T, via *kahuna.Node, held map[string]string) {
	t.Helper()
	ctx := context.Background()
	for res, owner := range held {
		deadline := time.Now().Add(20 * time.Second)
		for {
			info, r, err := via.Get(ctx, res, kahuna.Persistent)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status == kahuna.Got && string(info.Owner) == owner {
				break
			}
			if r.Status != kahuna.MustRetry || time.Now().After(deadline) {
				t.Fatalf("%s: %+v %+v, want held by %s", res, r, info, owner)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// addNode adds node id to c through node via, then starts it joining.
func addNode(t *testing.T, c *testcluster.Cluster, via, id uint64) {
	t.Helper()
	m := c.AddMember(id)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Node(via).AddMember(ctx, id, m); err != nil {
		t.Fatalf("add member %d via %d: %v", id, via, err)
	}
	if err := c.StartNode(id, func(cfg *kahuna.Config) { cfg.InitialClusterState = kahuna.ClusterStateExisting }); err != nil {
		t.Fatal(err)
	}
}

// A fourth node joins and takes a partition; a member is removed, another
// stopped: every persistent lock is still held, by the new node's account
// too; the removed ID cannot come back.
func TestMemberAddRemove(t *testing.T) {
	t.Parallel()
	const partitions = 3
	c := startCluster(t, partitions, nil)
	held := lockEverywhere(t, c, 12)

	addNode(t, c, 2, 4)
	for id := uint64(1); id <= 4; id++ {
		if got := len(c.Node(id).Members()); got != 4 {
			t.Errorf("node %d knows %d members: %v", id, got, c.Node(id).Members())
		}
	}
	testcluster.Eventually(t, "node 4 running every partition with 4 voters", func() bool {
		for _, p := range testknobs.Inner(c.Node(4)).Status().Partitions {
			if !p.Running || len(p.Voters) != 4 || p.Leader == 0 || p.Applied == 0 {
				return false
			}
		}
		return true
	})
	c.Transfer(0, 4)
	checkHeld(t, c.Node(4), held)
	// Idempotent: adding it again changes nothing.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Node(1).AddMember(ctx, 4, c.Member(4)); err != nil {
		t.Fatalf("re-adding member 4: %v", err)
	}

	// Remove node 3 (through node 1, leading none of it necessarily),
	// then stop it: {1, 2, 4} remain.
	if err := c.Node(1).RemoveMember(ctx, 3); err != nil {
		t.Fatalf("remove member 3: %v", err)
	}
	stopNode(t, c, 3)
	for _, id := range []uint64{1, 2, 4} {
		testcluster.Eventually(t, fmt.Sprintf("node %d seeing 3 voters", id), func() bool {
			for _, p := range testknobs.Inner(c.Node(id)).Status().Partitions {
				if len(p.Voters) != 3 {
					return false
				}
			}
			return true
		})
		if _, ok := c.Node(id).Members()[3]; ok {
			t.Errorf("node %d still lists member 3", id)
		}
	}
	if err := c.Node(1).RemoveMember(ctx, 3); err != nil {
		t.Fatalf("removing member 3 again: %v", err)
	}
	// Two of three are a quorum: stop node 1 and read through 2 and 4.
	stopNode(t, c, 1)
	checkHeld(t, c.Node(2), held)
	checkHeld(t, c.Node(4), held)

	// A removed ID never comes back, whichever node is asked.
	for _, via := range []uint64{2, 4} {
		err := c.Node(via).AddMember(ctx, 3, testcluster.UnstartedMember(t))
		if !errors.Is(err, kahuna.ErrMemberRemoved) {
			t.Fatalf("re-adding removed member 3 via %d: %v, want ErrMemberRemoved", via, err)
		}
	}
	// Node 1 restarts with its book: it knows member 4 and not 3.
	if err := c.StartNode(1, restarted); err != nil {
		t.Fatal(err)
	}
	if ms := c.Node(1).Members(); len(ms) != 3 || ms[4] != c.Member(4) {
		t.Fatalf("node 1 after a restart knows %v", ms)
	}
	checkHeld(t, c.Node(1), held)
}

// Removing an ID that never was a member is refused and changes nothing:
// the ID is not banned, so adding it later works (a typo in
// `kahunactl member remove` must not cost an ID).
func TestMemberRemoveUnknownRefused(t *testing.T) {
	const partitions = 2
	c := startCluster(t, partitions, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := c.Node(2).RemoveMember(ctx, 9)
	if !errors.Is(err, kahuna.ErrNotMember) || !strings.Contains(err.Error(), "members: 1, 2, 3") {
		t.Fatalf("removing never-member 9: %v, want ErrNotMember naming the members", err)
	}
	for id := uint64(1); id <= 3; id++ {
		if got := len(c.Node(id).Members()); got != 3 {
			t.Errorf("node %d knows %d members after the refused removal: %v", id, got, c.Node(id).Members())
		}
	}
	// Not banned: 9 can be added (as a voter that never starts: 3 of 4
	// are still a quorum), and then removed for real.
	if err := c.Node(1).AddMember(ctx, 9, testcluster.UnstartedMember(t)); err != nil {
		t.Fatalf("adding 9 after the refused removal: %v", err)
	}
	if err := c.Node(1).RemoveMember(ctx, 9); err != nil {
		t.Fatalf("removing member 9: %v", err)
	}
	if err := c.Node(1).RemoveMember(ctx, 9); err != nil {
		t.Fatalf("removing removed member 9 again: %v, want nothing to do", err)
	}
}

// The leader proposing a membership change has dropped its lease and
// does not renew it while the change is pending; the change is proposed
// by the partition's leader even when asked of another node.
func TestMemberChangeDropsLease(t *testing.T) {
	const partitions = 2
	c := startCluster(t, partitions, nil)
	lease := testknobs.LeaderLease(c.Node(1))
	if lease <= 0 {
		t.Fatal("a cluster node has no leader lease")
	}
	var (
		mu       sync.Mutex
		proposed = map[int]uint64{} // partition → proposing node
		failures []string
	)
	for id := uint64(1); id <= 3; id++ {
		n := c.Node(id)
		testknobs.SetConfigChangeHook(n, func(p int, phase string) {
			leader, _ := n.Leader(p)
			var bad []string
			if leader != id {
				bad = append(bad, fmt.Sprintf("node %d proposes a change of partition %d led by %d", id, p, leader))
			}
			// Hold the change pending for several renewal periods: the
			// lease must stay dropped all along, not just at the start.
			until := time.Now().Add(3 * lease)
			if phase == "applied" {
				until = time.Now()
			}
			for {
				if _, serving := n.Leader(p); serving {
					bad = append(bad, fmt.Sprintf("node %d serves partition %d at membership change phase %q", id, p, phase))
					break
				}
				if !time.Now().Before(until) {
					break
				}
				time.Sleep(time.Millisecond)
			}
			mu.Lock()
			defer mu.Unlock()
			if phase == "proposing" {
				proposed[p] = id
			}
			failures = append(failures, bad...)
		})
	}
	held := lockEverywhere(t, c, 6)
	// Ask node 3, which leads neither partition (startCluster puts
	// partition p on node p%3+1): it must pass both changes on.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Node(3).AddMember(ctx, 4, testcluster.UnstartedMember(t)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(failures) > 0 {
		t.Error(failures)
	}
	for p := range partitions {
		if proposed[p] != uint64(p%3+1) {
			t.Errorf("partition %d: change proposed by node %d, want its leader %d", p, proposed[p], p%3+1)
		}
	}
	mu.Unlock()
	// With four voters and one not started, three are needed: all serve
	// again once they renew.
	for p := range partitions {
		testcluster.Eventually(t, fmt.Sprintf("partition %d served again", p), func() bool {
			_, serving := c.Node(uint64(p%3 + 1)).Leader(p)
			return serving
		})
	}
	checkHeld(t, c.Node(3), held)
}
