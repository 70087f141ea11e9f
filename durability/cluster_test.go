package durability

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var clusterSeq atomic.Uint64

// cluster is three replicas over the channel transport, each with a data
// dir of its own (a cluster member is never in memory).
type cluster struct {
	t      *testing.T
	cfgs   []RaftConfig // cfgs[i] starts replica i+1
	nodes  []*node      // nodes[i] has replica ID i+1; nil while stopped
	events chan clusterEvent
}

type clusterEvent struct {
	replica uint64
	LeaderEvent
}

// clusterMembers names three replicas, unique in the process (the channel
// transport's listener table is global).
func clusterMembers() map[uint64]string {
	seq := clusterSeq.Add(1)
	members := map[uint64]string{}
	for id := uint64(1); id <= 3; id++ {
		members[id] = fmt.Sprintf("cluster%d-node%d:%d", seq, id, chanPort)
	}
	return members
}

// openCluster founds a three-replica cluster on fresh dirs (unless base
// sets Dir or InitialClusterState). Later starts use base's
// InitialClusterState, by default that of an existing cluster.
func openCluster(t *testing.T, base RaftConfig) *cluster {
	t.Helper()
	return openClusterOn(t, base, clusterMembers(), nil)
}

// openClusterOn is openCluster on the given members' addresses; adjust, if
// not nil, changes replica id's config.
func openClusterOn(t *testing.T, base RaftConfig, members map[uint64]string, adjust func(id uint64, cfg *RaftConfig)) *cluster {
	t.Helper()
	c := &cluster{t: t, cfgs: make([]RaftConfig, 3), nodes: make([]*node, 3), events: make(chan clusterEvent, 1024)}
	for i := range c.cfgs {
		id := uint64(i + 1)
		cfg := base
		cfg.ReplicaID, cfg.Members = id, members
		if cfg.Dir == "" {
			cfg.Dir = t.TempDir()
		}
		cfg.OnLeaderChange = func(e LeaderEvent) {
			select {
			case c.events <- clusterEvent{replica: id, LeaderEvent: e}:
			default:
			}
		}
		if cfg.InitialClusterState == "" {
			cfg.InitialClusterState = ClusterStateNew
		}
		if adjust != nil {
			adjust(id, &cfg)
		}
		c.cfgs[i] = cfg
	}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range c.nodes {
		wg.Go(func() { errs[i] = c.start(i + 1) })
	}
	wg.Wait()
	for i := range c.cfgs {
		c.cfgs[i].InitialClusterState = base.InitialClusterState
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			if n != nil {
				n.Close()
			}
		}
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("replica %d: %v", i+1, err)
		}
	}
	return c
}

// start opens replica id with its config.
func (c *cluster) start(id int) error {
	r, err := OpenRaft(c.cfgs[id-1])
	c.cfgs[id-1].Listener = nil // taken over: a restart binds RaftAddress
	if err == nil {
		c.nodes[id-1] = &node{Raft: r}
	}
	return err
}

// stop closes replica id.
func (c *cluster) stop(id int) {
	c.t.Helper()
	n := c.nodes[id-1]
	c.nodes[id-1] = nil
	if err := n.Close(); err != nil {
		c.t.Fatalf("close replica %d: %v", id, err)
	}
}

// awaitLeader waits for some replica to announce itself leader of p, or,
// if want is not 0, for replica want to.
func (c *cluster) awaitLeader(t *testing.T, p int, want uint64, within time.Duration) (uint64, bool) {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case e := <-c.events:
			if e.Partition == p && e.IsSelf && (want == 0 || e.replica == want) {
				return e.replica, true
			}
		case <-timeout:
			return 0, false
		}
	}
}

// leaderNow waits until a replica leads p by its own account now, and
// returns it. (A leader event can be stale by the time it is read: a
// loaded machine may elect another replica right after the first.)
func (c *cluster) leaderNow(t *testing.T, p int) *node {
	t.Helper()
	deadline := time.Now().Add(testWait)
	for {
		for _, n := range c.nodes {
			if n == nil {
				continue
			}
			if id, _, ok := n.LeaderID(p); ok && id == n.ReplicaID() {
				return n
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no replica leads partition %d after %v", p, testWait)
		}
		time.Sleep(10 * time.Millisecond) // Raft state has no signal to wait on
	}
}

func TestThreeReplicas(t *testing.T) {
	c := openCluster(t, RaftConfig{Partitions: 2})
	if _, ok := c.awaitLeader(t, 0, 0, testWait); !ok {
		t.Fatal("no leader for partition 0")
	}
	leader := c.leaderNow(t, 0)
	leaderID := leader.ReplicaID()
	follower := c.nodes[leaderID%3] // another replica
	want := Record{Resource: "tenant/x", Owner: []byte("me"), ExpiresMs: 123456, Token: 1, Revision: 1, Locked: true, LastModifiedMs: 99}
	if err := propose(t, leader, 0, want); err != nil {
		t.Fatalf("propose on leader %d: %v", leaderID, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	if err := follower.Barrier(ctx, 0); err != nil {
		t.Fatalf("Barrier on follower %d: %v", follower.ReplicaID(), err)
	}
	got, found, err := follower.Load(0, want.Resource)
	if err != nil || !found || !sameRecord(got, want) {
		t.Fatalf("follower Load = %+v, %v, %v", got, found, err)
	}

	// A transfer can be refused while the target catches up: retry.
	target := follower.ReplicaID()
	moved := false
	for attempt := 0; attempt < 10 && !moved; attempt++ {
		if err := leader.TransferLeadership(0, target); err != nil {
			t.Logf("transfer attempt %d: %v", attempt, err)
		}
		_, moved = c.awaitLeader(t, 0, target, 2*time.Second)
	}
	if !moved {
		t.Fatalf("leadership of partition 0 did not move to %d", target)
	}
	if id, _, ok := follower.LeaderID(0); !ok || id != target {
		t.Fatalf("new leader sees leader %d, %v", id, ok)
	}

	next := want
	next.Revision, next.Locked, next.Owner = 2, false, nil
	if err := propose(t, follower, 0, next); err != nil {
		t.Fatalf("propose on new leader: %v", err)
	}
	if err := leader.Barrier(ctx, 0); err != nil {
		t.Fatalf("Barrier on old leader: %v", err)
	}
	if got, _, _ := leader.Load(0, want.Resource); !sameRecord(got, next) {
		t.Fatalf("old leader Load = %+v, want %+v", got, next)
	}
}

// Without a quorum nothing commits: proposals end as unknown outcomes (or
// refusals) within ProposalTimeout, and Barrier gives up with ErrRetry.
func TestQuorumLoss(t *testing.T) {
	c := openCluster(t, RaftConfig{Partitions: 1, ProposalTimeout: time.Second})
	leaderID, ok := c.awaitLeader(t, 0, 0, testWait)
	if !ok {
		t.Fatal("no leader")
	}
	survivor := c.nodes[leaderID-1]
	if err := propose(t, survivor, 0, rec("q", 1, 1)); err != nil {
		t.Fatal(err)
	}
	// Taken now: once the others are gone, CheckQuorum may depose the
	// survivor before the next proposal, which must then fail too.
	term := survivor.term(t, 0)
	for _, n := range c.nodes {
		if n != survivor {
			if err := n.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	err := proposeIn(t, survivor, 0, term, rec("q", 1, 2))
	if !errors.Is(err, ErrUnknownOutcome) && !errors.Is(err, ErrRetry) {
		t.Fatalf("propose without quorum: %v", err)
	}
	t.Logf("propose without quorum: %v", err)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := survivor.Barrier(ctx, 0); !errors.Is(err, ErrRetry) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Barrier without quorum: %v", err)
	}
}

// leader waits for a leader of partition 0 and returns its replica ID.
func (c *cluster) leader(t *testing.T) uint64 {
	t.Helper()
	id, ok := c.awaitLeader(t, 0, 0, testWait)
	if !ok {
		t.Fatal("no leader for partition 0")
	}
	return id
}

// readOn checks that replica id, after a read barrier, holds want in
// partition 0.
func (c *cluster) readOn(t *testing.T, id uint64, want Record) {
	t.Helper()
	n := c.nodes[id-1]
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	if err := n.Barrier(ctx, 0); err != nil {
		t.Fatalf("Barrier on replica %d: %v", id, err)
	}
	if got, ok, err := n.Load(0, want.Resource); err != nil || !ok || !sameRecord(got, want) {
		t.Fatalf("replica %d: Load(%s) = %+v, %v, %v; want %+v", id, want.Resource, got, ok, err, want)
	}
}

// A member whose data dir was lost must not come back under its old ID as
// if it were founding the cluster: it would have forgotten its votes and
// acknowledged entries. OpenRaft refuses it, by default
// and with InitialClusterState existing, and the rest of the cluster goes
// on.
func TestMemberWithLostDataDirRefused(t *testing.T) {
	c := openCluster(t, RaftConfig{Partitions: 1})
	leaderID := c.leader(t)
	kept := rec("kept", 1, 1)
	if err := propose(t, c.nodes[leaderID-1], 0, kept); err != nil {
		t.Fatal(err)
	}
	victim := int(leaderID%3) + 1 // a follower
	c.stop(victim)
	empty := t.TempDir() // the disk was replaced by an empty one
	c.cfgs[victim-1].Dir = empty
	for _, state := range []ClusterState{"", ClusterStateExisting} {
		c.cfgs[victim-1].InitialClusterState = state
		err := c.start(victim)
		if err == nil {
			t.Fatalf("state %q: replica %d started on an empty data dir", state, victim)
		}
		msg := err.Error()
		if !errors.Is(err, ErrNoRaftState) || !strings.Contains(msg, empty) || !strings.Contains(msg, "new ID") ||
			!strings.Contains(msg, "--initial-cluster-state new") {
			t.Fatalf("state %q: refused with %v", state, err)
		}
		t.Logf("state %q: %v", state, err)
	}
	next := kept
	next.Revision++
	if err := propose(t, c.nodes[leaderID-1], 0, next); err != nil {
		t.Fatalf("the two others after the refusal: %v", err)
	}
}

// A restart of a member on its data works whatever InitialClusterState
// says, and resumes from that data: with "new" it does not found again.
func TestMemberRestartWithEitherState(t *testing.T) {
	c := openCluster(t, RaftConfig{Partitions: 1})
	leaderID := c.leader(t)
	r := rec("r", 1, 1)
	if err := propose(t, c.nodes[leaderID-1], 0, r); err != nil {
		t.Fatal(err)
	}
	follower := leaderID%3 + 1
	c.readOn(t, follower, r)
	for _, state := range []ClusterState{"", ClusterStateExisting, ClusterStateNew} {
		c.stop(int(follower))
		// Committed while the follower is down: it must catch up from its
		// log position, which a founding start would have reset.
		r.Revision++
		if err := propose(t, c.nodes[leaderID-1], 0, r); err != nil {
			t.Fatalf("state %q: propose with a follower down: %v", state, err)
		}
		c.cfgs[follower-1].InitialClusterState = state
		if err := c.start(int(follower)); err != nil {
			t.Fatalf("state %q: restart: %v", state, err)
		}
		c.readOn(t, follower, r)
	}
}

// A new cluster is founded only when told: a member's first start without
// InitialClusterState new is refused, before it needs any peer.
func TestMemberFoundsOnlyWhenTold(t *testing.T) {
	members := clusterMembers()
	for _, state := range []ClusterState{"", ClusterStateExisting} {
		dir := t.TempDir()
		r, err := OpenRaft(RaftConfig{Dir: dir, ReplicaID: 2, Members: members, Partitions: 1, InitialClusterState: state})
		if err == nil {
			r.Close()
			t.Fatalf("state %q: a member founded a cluster", state)
		}
		if !errors.Is(err, ErrNoRaftState) || !strings.Contains(err.Error(), dir) {
			t.Fatalf("state %q: %v", state, err)
		}
	}
	if _, err := OpenRaft(RaftConfig{Dir: t.TempDir(), Members: members, InitialClusterState: "old"}); err == nil || !strings.Contains(err.Error(), `"old"`) {
		t.Fatalf("InitialClusterState old: %v", err)
	}
}

// A cluster member in memory would forget its votes and log on every
// restart: refused.
func TestMemberInMemoryRefused(t *testing.T) {
	members := clusterMembers()
	for _, state := range []ClusterState{"", ClusterStateNew, ClusterStateExisting} {
		r, err := OpenRaft(RaftConfig{ReplicaID: 1, Members: members, Partitions: 1, InitialClusterState: state})
		if err == nil {
			r.Close()
			t.Fatalf("state %q: in-memory cluster member opened", state)
		}
		if !strings.Contains(err.Error(), "data dir") {
			t.Fatalf("state %q: %v", state, err)
		}
	}
}

// Two clusters with different tokens never talk, even given each other's
// addresses: replica 1 with token "a" among replicas 2 and 3 with token "b"
// is alone (its messages are dropped, and it drops theirs), while 2 and 3
// form a quorum.
func TestClusterTokensKeepClustersApart(t *testing.T) {
	members := clusterMembers()
	nodes := make([]*node, 3)
	for i := range nodes {
		token := "b"
		if i == 0 {
			token = "a"
		}
		nodes[i] = openNode(t, RaftConfig{Dir: t.TempDir(), ReplicaID: uint64(i + 1), Members: members, Partitions: 1,
			InitialClusterState: ClusterStateNew, ClusterToken: token})
	}
	if nodes[0].cfg.deploymentID == nodes[1].cfg.deploymentID {
		t.Fatalf("tokens a and b give one deployment ID %d", nodes[0].cfg.deploymentID)
	}
	var leader *node
	timeout := time.After(testWait)
	for leader == nil {
		select {
		case e := <-nodes[1].events:
			if e.LeaderID == 1 {
				t.Fatal("replica 2 follows replica 1 of another cluster")
			}
			if e.LeaderID != 0 {
				leader = nodes[e.LeaderID-1]
			}
		case <-timeout:
			t.Fatal("replicas 2 and 3 elected no leader")
		}
	}
	r := rec("b-only", 1, 1)
	if err := propose(t, leader, 0, r); err != nil {
		t.Fatalf("propose in cluster b: %v", err)
	}
	// Ten election timeouts: time enough for replica 1 to have joined in
	// if any message got through.
	ctx, cancel := context.WithTimeout(context.Background(), 10*electionRTT*DefaultRTT)
	defer cancel()
	if err := nodes[0].Barrier(ctx, 0); !errors.Is(err, ErrRetry) {
		t.Fatalf("Barrier on the replica of cluster a: %v", err)
	}
	if _, found, _ := nodes[0].Load(0, r.Resource); found {
		t.Fatal("the replica of cluster a applied cluster b's record")
	}
	if id, _, ok := nodes[0].LeaderID(0); ok {
		t.Fatalf("the replica of cluster a sees leader %d", id)
	}
}

// The deployment ID is recorded in the data dir: stable across restarts,
// and a restart with another token or member list, or as a single node, is
// refused with ErrOtherCluster before dragonboat's bare "deployment ID
// changed".
func TestMemberDeploymentIDBoundToDataDir(t *testing.T) {
	c := openCluster(t, RaftConfig{Partitions: 1, ClusterToken: "prod"})
	c.leader(t)
	want := deploymentIDFor("prod", c.cfgs[0].Members)
	for i := range c.nodes {
		if got, ok, err := recordedDeploymentID(filepath.Join(c.cfgs[i].Dir, "raft")); err != nil || !ok || got != want {
			t.Fatalf("replica %d recorded deployment ID %d, %v, %v; want %d", i+1, got, ok, err, want)
		}
	}
	c.stop(2)
	base := c.cfgs[1]
	otherAddrs := maps.Clone(base.Members)
	otherAddrs[3] = "elsewhere:2073"
	for name, mutate := range map[string]func(*RaftConfig){
		"another token":       func(c *RaftConfig) { c.ClusterToken = "staging" },
		"no token":            func(c *RaftConfig) { c.ClusterToken = "" },
		"another member list": func(c *RaftConfig) { c.Members = otherAddrs },
		"a single node":       func(c *RaftConfig) { c.Members, c.ClusterToken = nil, "" },
	} {
		cfg := base
		mutate(&cfg)
		r, err := OpenRaft(cfg)
		if err == nil {
			r.Close()
			t.Fatalf("%s: opened", name)
		}
		if !errors.Is(err, ErrOtherCluster) || !strings.Contains(err.Error(), base.Dir) {
			t.Fatalf("%s: %v", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
	if err := c.start(2); err != nil {
		t.Fatalf("restart with the original config: %v", err)
	}
	if got, _, _ := recordedDeploymentID(filepath.Join(base.Dir, "raft")); got != want {
		t.Fatalf("recorded deployment ID %d after restart, want %d", got, want)
	}
}

// A cluster member's data dir created before cluster tokens (constant
// deployment ID, members passed on every start) keeps opening with no
// token; a single node's data dir does not pass for a member's.
func TestPreTokenDataDirs(t *testing.T) {
	c := openCluster(t, RaftConfig{Partitions: 1, preTokenDeployment: true})
	leaderID := c.leader(t)
	r := rec("old", 1, 1)
	if err := propose(t, c.nodes[leaderID-1], 0, r); err != nil {
		t.Fatal(err)
	}
	for id := 1; id <= 3; id++ {
		c.stop(id)
		c.cfgs[id-1].preTokenDeployment = false
	}
	for id := 1; id <= 3; id++ {
		if err := c.start(id); err != nil {
			t.Fatalf("replica %d on its pre-token data dir: %v", id, err)
		}
		if !c.nodes[id-1].cfg.preToken || c.nodes[id-1].cfg.deploymentID != singleDeploymentID {
			t.Fatalf("replica %d: deployment ID %d, pre-token %v", id, c.nodes[id-1].cfg.deploymentID, c.nodes[id-1].cfg.preToken)
		}
	}
	c.readOn(t, c.leader(t)%3+1, r)

	// A single node's data dir has the same constant, but its partitions
	// were founded alone: as a member of three it is refused.
	dir := t.TempDir()
	single := openNode(t, RaftConfig{Dir: dir, Partitions: 1})
	addr := single.cfg.selfAddr
	if err := single.Close(); err != nil {
		t.Fatal(err)
	}
	members := clusterMembers()
	members[1] = addr
	m, err := OpenRaft(RaftConfig{Dir: dir, ReplicaID: 1, Members: members, Partitions: 1})
	if err == nil {
		m.Close()
		t.Fatal("a single node's data dir opened as a cluster member")
	}
	if !strings.Contains(err.Error(), "differ from those the data was created with") {
		t.Fatalf("single node's data dir as a member: %v", err)
	}
}

// A deposed leader's record, decided in its old epoch and proposed after
// the new leader fenced its own, is forwarded by dragonboat and commits,
// but no replica applies it. With the fence off (the negative control) it
// overwrites the new leader's write.
func TestStaleEpochRecordRejectedEverywhere(t *testing.T) {
	for _, unsafe := range []bool{false, true} {
		t.Run(fmt.Sprintf("unsafeNoFence=%v", unsafe), func(t *testing.T) {
			c := openCluster(t, RaftConfig{Partitions: 1, UnsafeNoFence: unsafe})
			oldID, ok := c.awaitLeader(t, 0, 0, testWait)
			if !ok {
				t.Fatal("no leader")
			}
			old := c.nodes[oldID-1]
			oldTerm := old.term(t, 0)
			first := Record{Resource: "r", Owner: []byte("A"), Token: 0, Revision: 1, Locked: true}
			if err := propose(t, old, 0, first); err != nil {
				t.Fatal(err)
			}
			stored, _, _ := old.Load(0, "r")

			target := c.nodes[oldID%3]
			moved := false
			for attempt := 0; attempt < 10 && !moved; attempt++ {
				_ = old.TransferLeadership(0, target.ReplicaID())
				_, moved = c.awaitLeader(t, 0, target.ReplicaID(), 2*time.Second)
			}
			if !moved {
				t.Fatal("leadership did not move")
			}
			// The new leader grants B from what it stores.
			granted := Record{Resource: "r", Owner: []byte("B"), Token: 1, Revision: 2, Locked: true}
			if err := propose(t, target, 0, granted); err != nil {
				t.Fatal(err)
			}
			// The old leader's late Extend of A, from A's record, in its old
			// epoch: proposed straight to dragonboat as a stale lane would.
			late := Record{Resource: "r", Owner: []byte("A"), Token: 1, Revision: 9, Locked: true, Base: stored.Index}
			cmd := encodeBatch(nil, Epoch{Term: oldTerm, Replica: old.ReplicaID()}, []Record{late})
			rs, err := old.nh.Propose(old.lanes[0].session, cmd, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			res := <-rs.ResultC()
			if !res.Completed() {
				t.Fatalf("late record not committed: %+v", res)
			}
			want := granted
			if unsafe {
				want = late // advance-only: (1, 9) beats (1, 2)
			}
			if applied := res.GetResult().Value != 0; applied != unsafe {
				t.Fatalf("late record applied=%v (result %+v)", applied, res.GetResult())
			}
			ctx, cancel := context.WithTimeout(context.Background(), testWait)
			defer cancel()
			for _, n := range c.nodes {
				if err := n.Barrier(ctx, 0); err != nil {
					t.Fatal(err)
				}
				if got, _, _ := n.Load(0, "r"); !sameRecord(got, want) {
					t.Errorf("replica %d holds %+v, want %+v", n.ReplicaID(), got, want)
				}
			}
		})
	}
}
