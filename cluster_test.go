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
)

// startCluster starts three nodes in this process on loopback (TCP Raft,
// the wire API for forwarding), each with partitions partitions and mod
// (if not nil) changing its config, and spreads the partitions' leaders
// (partition p to node p%3+1), so tests begin from a steady state.
func startCluster(t *testing.T, partitions int, mod func(id uint64, cfg *kahuna.Config)) *testcluster.Cluster {
	t.Helper()
	c := testcluster.Start(t, testcluster.Options{Partitions: partitions, Mod: mod})
	c.Spread()
	return c
}

// steadyLeaders gives a test cluster a Raft tick of 50 ms instead of 10,
// so a leader lease lasts about 350 ms and an election needs 500 ms of
// silence: a test that is not about leader changes must not see its
// partitions change leaders unplanned (which loses ephemeral locks, as
// documented, and leaves a write in flight of unknown outcome) because a
// loaded machine stalled the test's process for a tenth of a second.
func steadyLeaders(_ uint64, cfg *kahuna.Config) { cfg.RaftRTT = 50 * time.Millisecond }

// stopNode closes node id of c, failing the test if its Close fails.
func stopNode(t *testing.T, c *testcluster.Cluster, id uint64) {
	t.Helper()
	if err := c.Stop(id); err != nil {
		t.Fatalf("close node %d: %v", id, err)
	}
}

// leaderAndFollower are the member that leads resource's partition and
// one that does not (which forwards to it).
func leaderAndFollower(c *testcluster.Cluster, resource string) (leader, follower uint64) {
	leader = c.Leader(c.Node(1).Partition(resource))
	for _, id := range c.IDs() {
		if id != leader {
			return leader, id
		}
	}
	return leader, 0
}

// restarted is how an operator restarts a member: with no
// InitialClusterState.
func restarted(cfg *kahuna.Config) { cfg.InitialClusterState = "" }

func TestClusterLeadersSpread(t *testing.T) {
	c := startCluster(t, 6, nil)
	testcluster.Eventually(t, "leaders on all three nodes", func() bool {
		seen := map[uint64]bool{}
		for p := 0; p < 6; p++ {
			id, _ := c.Node(1).Leader(p)
			seen[id] = true
		}
		return len(seen) == 3 && !seen[0]
	})
}

// TestClusterCrossNode is Kahuna's scenario: any node serves any request.
func TestClusterCrossNode(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 4, nil)
	ctx := context.Background()
	for _, d := range durabilities {
		t.Run(d.String(), func(t *testing.T) {
			res := "cross/" + d.String()
			a, b := []byte("owner-a"), []byte("owner-b")
			n1, n2, n3 := c.Node(1), c.Node(2), c.Node(3)
			if r := testcluster.Settled(t, func() (kahuna.Result, error) { return n1.TryLock(ctx, res, a, time.Minute, d) }); r.Status != kahuna.Locked || r.FencingToken != 0 {
				t.Fatalf("lock via node 1: %+v", r)
			}
			if r := testcluster.Settled(t, func() (kahuna.Result, error) { return n2.TryLock(ctx, res, b, time.Minute, d) }); r.Status != kahuna.Busy {
				t.Fatalf("lock via node 2: %+v", r)
			}
			if r := testcluster.Settled(t, func() (kahuna.Result, error) { return n3.Extend(ctx, res, a, time.Minute, d) }); r.Status != kahuna.Extended || r.FencingToken != 0 {
				t.Fatalf("extend via node 3: %+v", r)
			}
			if r := testcluster.Settled(t, func() (kahuna.Result, error) { return n2.Unlock(ctx, res, a, d) }); r.Status != kahuna.Unlocked {
				t.Fatalf("unlock via node 2: %+v", r)
			}
			if r := testcluster.Settled(t, func() (kahuna.Result, error) { return n3.TryLock(ctx, res, b, time.Minute, d) }); r.Status != kahuna.Locked || r.FencingToken != 1 {
				t.Fatalf("lock via node 3: %+v", r)
			}
			var info kahuna.LockInfo
			r := testcluster.Settled(t, func() (kahuna.Result, error) {
				var r kahuna.Result
				var err error
				info, r, err = n1.Get(ctx, res, d)
				return r, err
			})
			if r.Status != kahuna.Got || string(info.Owner) != "owner-b" || info.FencingToken != 1 {
				t.Fatalf("get via node 1: %+v %+v", r, info)
			}
		})
	}
}

func TestClusterRacingOwners(t *testing.T) {
	c := startCluster(t, 4, nil)
	for round := 0; round < 5; round++ {
		for _, d := range durabilities {
			res := fmt.Sprintf("race/%d/%s", round, d)
			results := make(chan kahuna.Result, 3)
			var wg sync.WaitGroup
			for id := uint64(1); id <= 3; id++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					n := c.Node(id)
					results <- testcluster.Settled(t, func() (kahuna.Result, error) {
						return n.TryLock(context.Background(), res, []byte(fmt.Sprint("owner-", id)), time.Minute, d)
					})
				}()
			}
			wg.Wait()
			close(results)
			locked := 0
			for r := range results {
				switch r.Status {
				case kahuna.Locked:
					locked++
				case kahuna.Busy:
				default:
					t.Fatalf("%s: unexpected %+v", res, r)
				}
			}
			if locked != 1 {
				t.Fatalf("%s: %d owners got the lock", res, locked)
			}
		}
	}
}

// TestClusterTokensAcrossTransfers: persistent tokens strictly increase
// across four rounds of leadership transfer of every partition.
func TestClusterTokensAcrossTransfers(t *testing.T) {
	t.Parallel()
	const partitions = 4
	c := startCluster(t, partitions, nil)
	ctx := context.Background()
	n1 := c.Node(1)
	// One resource per partition.
	resources := map[int]string{}
	for i := 0; len(resources) < partitions; i++ {
		r := fmt.Sprintf("transfer-%d", i) // no "/": the whole name is hashed
		if _, ok := resources[n1.Partition(r)]; !ok {
			resources[n1.Partition(r)] = r
		}
	}
	last := map[string]int64{}
	for round := 0; round < 4; round++ {
		for p, res := range resources {
			owner := []byte(fmt.Sprintf("owner-%d", round))
			r := testcluster.Settled(t, func() (kahuna.Result, error) { return n1.TryLock(ctx, res, owner, time.Minute, kahuna.Persistent) })
			if r.Status != kahuna.Locked {
				t.Fatalf("round %d %s: %+v", round, res, r)
			}
			if prev, ok := last[res]; ok && r.FencingToken <= prev {
				t.Fatalf("round %d %s: token %d after %d", round, res, r.FencingToken, prev)
			}
			last[res] = r.FencingToken
			if r := testcluster.Settled(t, func() (kahuna.Result, error) { return c.Node(2).Unlock(ctx, res, owner, kahuna.Persistent) }); r.Status != kahuna.Unlocked {
				t.Fatalf("round %d unlock %s: %+v", round, res, r)
			}
			leader, _ := n1.Leader(p)
			c.Transfer(p, leader%3+1)
		}
	}
	for res, tok := range last {
		if tok != 3 {
			t.Fatalf("%s ended at token %d, want 3 (one grant per round)", res, tok)
		}
	}
}

// TestClusterLeaderLoss closes the node leading a partition in the middle
// of a persistent load: the survivors keep serving, no acknowledged grant
// is lost, tokens never go backwards, and the restarted node catches up.
func TestClusterLeaderLoss(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 2, nil)
	ctx := context.Background()
	res := "loss/r"
	p := c.Node(1).Partition(res)
	leader := uint64(0)
	testcluster.Eventually(t, "a leader", func() bool { leader, _ = c.Node(1).Leader(p); return leader != 0 })
	survivor := leader%3 + 1

	// Acknowledged grants, each with its owner and token.
	type grant struct {
		owner string
		token int64
	}
	var granted []grant
	held := "long/" + res
	if r := testcluster.Settled(t, func() (kahuna.Result, error) {
		return c.Node(survivor).TryLock(ctx, held, []byte("holder"), time.Hour, kahuna.Persistent)
	}); r.Status != kahuna.Locked {
		t.Fatalf("long lease: %+v", r)
	}
	for i := 0; i < 40; i++ {
		if i == 20 {
			stopNode(t, c, leader)
		}
		owner := fmt.Sprintf("o-%d", i)
		r := testcluster.Settled(t, func() (kahuna.Result, error) {
			return c.Node(survivor).TryLock(ctx, res, []byte(owner), time.Minute, kahuna.Persistent)
		})
		if r.Status == kahuna.Errored {
			// Outcome unknown: not counted as acknowledged; release it in
			// case it did commit.
			testcluster.Settled(t, func() (kahuna.Result, error) {
				return c.Node(survivor).Unlock(ctx, res, []byte(owner), kahuna.Persistent)
			})
			continue
		}
		if r.Status != kahuna.Locked {
			t.Fatalf("grant %d: %+v", i, r)
		}
		if n := len(granted); n > 0 && r.FencingToken <= granted[n-1].token {
			t.Fatalf("grant %d: token %d after %d", i, r.FencingToken, granted[n-1].token)
		}
		granted = append(granted, grant{owner, r.FencingToken})
		if r := testcluster.Settled(t, func() (kahuna.Result, error) {
			return c.Node(survivor).Unlock(ctx, res, []byte(owner), kahuna.Persistent)
		}); r.Status != kahuna.Unlocked {
			t.Fatalf("unlock %d: %+v", i, r)
		}
	}
	// The lock held with a long lease stayed held across the leader change.
	if r := testcluster.Settled(t, func() (kahuna.Result, error) {
		return c.Node(survivor).TryLock(ctx, held, []byte("intruder"), time.Hour, kahuna.Persistent)
	}); r.Status != kahuna.Busy {
		t.Fatalf("long lease after leader loss: %+v (double grant)", r)
	}
	if err := c.StartNode(leader, restarted); err != nil {
		t.Fatal(err)
	}
	// The restarted node serves the latest state, through forwarding or as
	// leader once it catches up.
	last := granted[len(granted)-1]
	c.Transfer(p, leader)
	r := testcluster.Settled(t, func() (kahuna.Result, error) {
		return c.Node(leader).TryLock(ctx, res, []byte("after"), time.Minute, kahuna.Persistent)
	})
	if r.Status != kahuna.Locked || r.FencingToken <= last.token {
		t.Fatalf("after restart: %+v, last acknowledged token %d", r, last.token)
	}
	// held may sit in the other partition, whose leadership can still be
	// settling after the restart: MustRetry there is an answer to retry.
	var info kahuna.LockInfo
	gr := testcluster.Settled(t, func() (kahuna.Result, error) {
		var r kahuna.Result
		var err error
		info, r, err = c.Node(leader).Get(ctx, held, kahuna.Persistent)
		return r, err
	})
	if gr.Status != kahuna.Got || string(info.Owner) != "holder" {
		t.Fatalf("long lease on the restarted leader: %+v %+v", gr, info)
	}
}

// A member restarted on an empty data dir under its old ID is refused with
// a message saying what happened and what to do (not founded again, which
// would forget its votes and log), and the others go on serving.
func TestClusterMemberWithLostDataDirRefused(t *testing.T) {
	c := startCluster(t, 1, nil)
	ctx := context.Background()
	if r := testcluster.Settled(t, func() (kahuna.Result, error) {
		return c.Node(1).TryLock(ctx, "lost/r", []byte("a"), time.Minute, kahuna.Persistent)
	}); r.Status != kahuna.Locked {
		t.Fatalf("lock: %+v", r)
	}
	stopNode(t, c, 3)
	dir := c.NewDir(3) // the disk was replaced
	for _, state := range []kahuna.ClusterState{"", kahuna.ClusterStateExisting} {
		err := c.StartNode(3, func(cfg *kahuna.Config) { cfg.InitialClusterState = state })
		if err == nil {
			t.Fatalf("state %q: node 3 started on an empty data dir", state)
		}
		if msg := err.Error(); !errors.Is(err, kahuna.ErrNoRaftState) || !strings.Contains(msg, dir) ||
			!strings.Contains(msg, "new ID") || !strings.Contains(msg, "--initial-cluster-state new") {
			t.Fatalf("state %q: %v", state, err)
		}
	}
	if r := testcluster.Settled(t, func() (kahuna.Result, error) {
		return c.Node(2).TryLock(ctx, "lost/r", []byte("b"), time.Minute, kahuna.Persistent)
	}); r.Status != kahuna.Busy {
		t.Fatalf("lock held through the two others: %+v", r)
	}
}

// Open refuses a cluster member without a DataDir, and a bad
// InitialClusterState, before starting anything.
func TestClusterMemberConfigRefused(t *testing.T) {
	members := map[uint64]kahuna.Member{
		1: {RaftAddress: "127.0.0.1:1", Endpoint: "http://127.0.0.1:2"},
		2: {RaftAddress: "127.0.0.1:3", Endpoint: "http://127.0.0.1:4"},
		3: {RaftAddress: "127.0.0.1:5", Endpoint: "http://127.0.0.1:6"},
	}
	for _, c := range []struct {
		cfg  kahuna.Config
		want string
	}{
		{kahuna.Config{Members: members, InitialClusterState: kahuna.ClusterStateNew}, "needs a DataDir"},
		{kahuna.Config{Members: members}, "needs a DataDir"},
		{kahuna.Config{InitialClusterState: kahuna.ClusterStateExisting}, "needs a DataDir"},
		{kahuna.Config{DataDir: t.TempDir(), InitialClusterState: "old"}, `"old"`},
	} {
		c.cfg.StartTimeout = time.Second // an error about waiting for leaders would be the bug
		n, err := kahuna.Open(c.cfg)
		if err == nil {
			n.Close()
			t.Fatalf("Open(%+v) succeeded", c.cfg)
		}
		if !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "kahuna: invalid config: ") {
			t.Fatalf("Open(%+v): %v, want %q", c.cfg, err, c.want)
		}
	}
}
