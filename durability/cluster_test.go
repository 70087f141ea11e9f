package durability

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var clusterSeq atomic.Uint64

// cluster is three in-memory replicas over the channel transport.
type cluster struct {
	nodes  []*node // nodes[i] has replica ID i+1
	events chan clusterEvent
}

type clusterEvent struct {
	replica uint64
	LeaderEvent
}

func openCluster(t *testing.T, base RaftConfig) *cluster {
	t.Helper()
	seq := clusterSeq.Add(1)
	members := map[uint64]string{}
	for id := uint64(1); id <= 3; id++ {
		members[id] = fmt.Sprintf("cluster%d-node%d:%d", seq, id, chanPort)
	}
	c := &cluster{nodes: make([]*node, 3), events: make(chan clusterEvent, 1024)}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range c.nodes {
		id := uint64(i + 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := base
			cfg.ReplicaID, cfg.Members = id, members
			cfg.OnLeaderChange = func(e LeaderEvent) {
				select {
				case c.events <- clusterEvent{replica: id, LeaderEvent: e}:
				default:
				}
			}
			r, err := OpenRaft(cfg)
			errs[i] = err
			if err == nil {
				c.nodes[i] = &node{Raft: r}
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("replica %d: %v", i+1, err)
		}
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			n.Close()
		}
	})
	return c
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
