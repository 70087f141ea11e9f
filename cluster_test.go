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
)

// cluster is three nodes in this process, on loopback: TCP Raft and the
// wire API for forwarding.
type cluster struct {
	t       *testing.T
	members map[uint64]kahuna.Member
	dirs    map[uint64]string
	mu      sync.Mutex
	nodes   map[uint64]*kahuna.Node
	mod     func(id uint64, cfg *kahuna.Config) // if set, changes each node's config
}

func startCluster(t *testing.T, partitions int) *cluster {
	t.Helper()
	return startClusterWith(t, partitions, nil)
}

// startClusterWith is startCluster with mod changing each node's config.
func startClusterWith(t *testing.T, partitions int, mod func(id uint64, cfg *kahuna.Config)) *cluster {
	t.Helper()
	c := &cluster{t: t, members: map[uint64]kahuna.Member{}, dirs: map[uint64]string{}, nodes: map[uint64]*kahuna.Node{}, mod: mod}
	for id := uint64(1); id <= 3; id++ {
		c.members[id] = newMember(t)
		c.dirs[id] = t.TempDir()
	}
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for id := range c.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.start(id, partitions, kahuna.ClusterStateNew); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, n := range c.nodes {
			n.Close()
		}
	})
	// Start-up spreads leaders (partition p to node p%3+1) on a best-effort
	// basis; make sure it happened, re-requesting moves a loaded machine
	// let slip, so tests begin from a steady state.
	for p := 0; p < partitions; p++ {
		c.transfer(p, uint64(p%3+1))
	}
	return c
}

// transfer moves partition p's leadership to node to and waits until it
// serves p there. Only the leader may start a transfer, and a transfer can
// be ignored (another in progress, target catching up), so it is
// re-requested of whoever leads until it happens.
func (c *cluster) transfer(p int, to uint64) {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		leader, _ := c.node(to).Leader(p)
		if n := c.node(leader); n != nil {
			if err := n.TransferLeadership(p, to); err != nil {
				c.t.Logf("transfer of partition %d from %d to %d: %v (retrying)", p, leader, to, err)
			}
		}
		retry := time.Now().Add(time.Second)
		for time.Now().Before(retry) {
			if _, serving := c.node(to).Leader(p); serving {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	c.t.Fatalf("partition %d not led by node %d after 30s", p, to)
}

// start opens node id on its data dir; state is "" on a restart, as an
// operator would leave it, and kahuna.ClusterStateNew on the first start.
func (c *cluster) start(id uint64, partitions int, state kahuna.ClusterState) error {
	cfg := kahuna.Config{
		NodeID:              id,
		DataDir:             c.dirs[id],
		Members:             c.members,
		ListenAddress:       c.members[id].Endpoint[len("http://"):],
		Partitions:          partitions,
		LockActors:          2,
		InitialClusterState: state,
	}
	if c.mod != nil {
		c.mod(id, &cfg)
	}
	n, err := kahuna.Open(withListeners(cfg))
	if err != nil {
		return fmt.Errorf("node %d: %w", id, err)
	}
	c.mu.Lock()
	c.nodes[id] = n
	c.mu.Unlock()
	return nil
}

func (c *cluster) node(id uint64) *kahuna.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id]
}

func (c *cluster) stop(id uint64) {
	c.mu.Lock()
	n := c.nodes[id]
	delete(c.nodes, id)
	c.mu.Unlock()
	if err := n.Close(); err != nil {
		c.t.Fatalf("close node %d: %v", id, err)
	}
}

// eventually polls cond until it holds or the deadline passes; for states
// reached asynchronously inside Raft (elections, transfers) that offer no
// signal to wait on.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// settled retries an operation while the cluster answers MustRetry (an
// election or transfer in progress), like every client does.
func settled(t *testing.T, op func() (kahuna.Result, error)) kahuna.Result {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := op()
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != kahuna.MustRetry {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatal("still MustRetry after 20s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestClusterLeadersSpread(t *testing.T) {
	c := startCluster(t, 6)
	eventually(t, "leaders on all three nodes", func() bool {
		seen := map[uint64]bool{}
		for p := 0; p < 6; p++ {
			id, _ := c.node(1).Leader(p)
			seen[id] = true
		}
		return len(seen) == 3 && !seen[0]
	})
}

// TestClusterCrossNode is Kahuna's scenario: any node serves any request.
func TestClusterCrossNode(t *testing.T) {
	c := startCluster(t, 4)
	ctx := context.Background()
	for _, d := range durabilities {
		t.Run(d.String(), func(t *testing.T) {
			res := "cross/" + d.String()
			a, b := []byte("owner-a"), []byte("owner-b")
			n1, n2, n3 := c.node(1), c.node(2), c.node(3)
			if r := settled(t, func() (kahuna.Result, error) { return n1.TryLock(ctx, res, a, time.Minute, d) }); r.Status != kahuna.Locked || r.FencingToken != 0 {
				t.Fatalf("lock via node 1: %+v", r)
			}
			if r := settled(t, func() (kahuna.Result, error) { return n2.TryLock(ctx, res, b, time.Minute, d) }); r.Status != kahuna.Busy {
				t.Fatalf("lock via node 2: %+v", r)
			}
			if r := settled(t, func() (kahuna.Result, error) { return n3.Extend(ctx, res, a, time.Minute, d) }); r.Status != kahuna.Extended || r.FencingToken != 0 {
				t.Fatalf("extend via node 3: %+v", r)
			}
			if r := settled(t, func() (kahuna.Result, error) { return n2.Unlock(ctx, res, a, d) }); r.Status != kahuna.Unlocked {
				t.Fatalf("unlock via node 2: %+v", r)
			}
			if r := settled(t, func() (kahuna.Result, error) { return n3.TryLock(ctx, res, b, time.Minute, d) }); r.Status != kahuna.Locked || r.FencingToken != 1 {
				t.Fatalf("lock via node 3: %+v", r)
			}
			var info kahuna.LockInfo
			r := settled(t, func() (kahuna.Result, error) {
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
	c := startCluster(t, 4)
	for round := 0; round < 5; round++ {
		for _, d := range durabilities {
			res := fmt.Sprintf("race/%d/%s", round, d)
			results := make(chan kahuna.Result, 3)
			var wg sync.WaitGroup
			for id := uint64(1); id <= 3; id++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					n := c.node(id)
					results <- settled(t, func() (kahuna.Result, error) {
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
	const partitions = 4
	c := startCluster(t, partitions)
	ctx := context.Background()
	n1 := c.node(1)
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
			r := settled(t, func() (kahuna.Result, error) { return n1.TryLock(ctx, res, owner, time.Minute, kahuna.Persistent) })
			if r.Status != kahuna.Locked {
				t.Fatalf("round %d %s: %+v", round, res, r)
			}
			if prev, ok := last[res]; ok && r.FencingToken <= prev {
				t.Fatalf("round %d %s: token %d after %d", round, res, r.FencingToken, prev)
			}
			last[res] = r.FencingToken
			if r := settled(t, func() (kahuna.Result, error) { return c.node(2).Unlock(ctx, res, owner, kahuna.Persistent) }); r.Status != kahuna.Unlocked {
				t.Fatalf("round %d unlock %s: %+v", round, res, r)
			}
			leader, _ := n1.Leader(p)
			c.transfer(p, leader%3+1)
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
	c := startCluster(t, 2)
	ctx := context.Background()
	res := "loss/r"
	p := c.node(1).Partition(res)
	leader := uint64(0)
	eventually(t, "a leader", func() bool { leader, _ = c.node(1).Leader(p); return leader != 0 })
	survivor := leader%3 + 1

	// Acknowledged grants, each with its owner and token.
	type grant struct {
		owner string
		token int64
	}
	var granted []grant
	held := "long/" + res
	if r := settled(t, func() (kahuna.Result, error) {
		return c.node(survivor).TryLock(ctx, held, []byte("holder"), time.Hour, kahuna.Persistent)
	}); r.Status != kahuna.Locked {
		t.Fatalf("long lease: %+v", r)
	}
	for i := 0; i < 40; i++ {
		if i == 20 {
			c.stop(leader)
		}
		owner := fmt.Sprintf("o-%d", i)
		r := settled(t, func() (kahuna.Result, error) {
			return c.node(survivor).TryLock(ctx, res, []byte(owner), time.Minute, kahuna.Persistent)
		})
		if r.Status == kahuna.Errored {
			// Outcome unknown: not counted as acknowledged; release it in
			// case it did commit.
			settled(t, func() (kahuna.Result, error) {
				return c.node(survivor).Unlock(ctx, res, []byte(owner), kahuna.Persistent)
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
		if r := settled(t, func() (kahuna.Result, error) {
			return c.node(survivor).Unlock(ctx, res, []byte(owner), kahuna.Persistent)
		}); r.Status != kahuna.Unlocked {
			t.Fatalf("unlock %d: %+v", i, r)
		}
	}
	// The lock held with a long lease stayed held across the leader change.
	if r := settled(t, func() (kahuna.Result, error) {
		return c.node(survivor).TryLock(ctx, held, []byte("intruder"), time.Hour, kahuna.Persistent)
	}); r.Status != kahuna.Busy {
		t.Fatalf("long lease after leader loss: %+v (double grant)", r)
	}
	if err := c.start(leader, 2, ""); err != nil {
		t.Fatal(err)
	}
	// The restarted node serves the latest state, through forwarding or as
	// leader once it catches up.
	last := granted[len(granted)-1]
	c.transfer(p, leader)
	r := settled(t, func() (kahuna.Result, error) {
		return c.node(leader).TryLock(ctx, res, []byte("after"), time.Minute, kahuna.Persistent)
	})
	if r.Status != kahuna.Locked || r.FencingToken <= last.token {
		t.Fatalf("after restart: %+v, last acknowledged token %d", r, last.token)
	}
	// held may sit in the other partition, whose leadership can still be
	// settling after the restart: MustRetry there is an answer to retry.
	var info kahuna.LockInfo
	gr := settled(t, func() (kahuna.Result, error) {
		var r kahuna.Result
		var err error
		info, r, err = c.node(leader).Get(ctx, held, kahuna.Persistent)
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
	c := startCluster(t, 1)
	ctx := context.Background()
	if r := settled(t, func() (kahuna.Result, error) {
		return c.node(1).TryLock(ctx, "lost/r", []byte("a"), time.Minute, kahuna.Persistent)
	}); r.Status != kahuna.Locked {
		t.Fatalf("lock: %+v", r)
	}
	c.stop(3)
	c.dirs[3] = t.TempDir() // the disk was replaced
	for _, state := range []kahuna.ClusterState{"", kahuna.ClusterStateExisting} {
		err := c.start(3, 1, state)
		if err == nil {
			t.Fatalf("state %q: node 3 started on an empty data dir", state)
		}
		if msg := err.Error(); !errors.Is(err, kahuna.ErrNoRaftState) || !strings.Contains(msg, c.dirs[3]) ||
			!strings.Contains(msg, "new ID") || !strings.Contains(msg, "--initial-cluster-state new") {
			t.Fatalf("state %q: %v", state, err)
		}
	}
	if r := settled(t, func() (kahuna.Result, error) {
		return c.node(2).TryLock(ctx, "lost/r", []byte("b"), time.Minute, kahuna.Persistent)
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
