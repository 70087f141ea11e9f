package durability

import (
	"context"
	"errors"
	"fmt"
	"reflect"
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

// openCluster founds a three-replica cluster on fresh dirs.
func openCluster(t *testing.T, base RaftConfig) *cluster {
	t.Helper()
	seq := clusterSeq.Add(1)
	members := map[uint64]string{}
	for id := uint64(1); id <= 3; id++ {
		members[id] = fmt.Sprintf("cluster%d-node%d:%d", seq, id, chanPort)
	}
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
		c.cfgs[i] = cfg
	}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range c.nodes {
		wg.Go(func() { errs[i] = c.start(i + 1) })
	}
	wg.Wait()
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

func TestThreeReplicas(t *testing.T) {
	c := openCluster(t, RaftConfig{Partitions: 2})
	leaderID, ok := c.awaitLeader(t, 0, 0, testWait)
	if !ok {
		t.Fatal("no leader for partition 0")
	}
	leader := c.nodes[leaderID-1]
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
	if err != nil || !found || !reflect.DeepEqual(got, want) {
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
	if got, _, _ := leader.Load(0, want.Resource); !reflect.DeepEqual(got, next) {
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
	for _, n := range c.nodes {
		if n != survivor {
			if err := n.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	err := propose(t, survivor, 0, rec("q", 1, 2))
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

// A member whose data dir was lost must not come back under its old ID as
// if it were founding the cluster: it would have forgotten its votes and
// acknowledged entries (stack.md §9.7). OpenRaft refuses it.
func TestMemberWithLostDataDirRefused(t *testing.T) {
	c := openCluster(t, RaftConfig{Partitions: 1})
	leaderID, ok := c.awaitLeader(t, 0, 0, testWait)
	if !ok {
		t.Fatal("no leader")
	}
	if err := propose(t, c.nodes[leaderID-1], 0, rec("kept", 1, 1)); err != nil {
		t.Fatal(err)
	}
	victim := int(leaderID%3) + 1 // a follower
	c.stop(victim)
	c.cfgs[victim-1].Dir = t.TempDir() // the disk is replaced by an empty one
	err := c.start(victim)
	if err == nil {
		t.Fatalf("replica %d started on an empty data dir", victim)
	}
	t.Logf("refused: %v", err)
}
