package kahuna_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/internal/testcluster"
)

// A waiting Lock on a node that does not lead the partition waits in the
// leader's queue (one forwarded call, not polling), and is answered
// MustRetry when the partition moves while it waits. A watch through a
// node that does not lead the partition relays the leader's, and resumes
// from its last revision after a move.
func TestClusterNativeForwardAndWatch(t *testing.T) {
	// Fencing-only: the transfers below need not wait out ephemeral leases.
	c := startCluster(t, 3, func(_ uint64, cfg *kahuna.Config) { cfg.EphemeralFencingOnly = true })
	ctx := context.Background()
	n1, n2, n3 := c.Node(1), c.Node(2), c.Node(3)
	res := ""
	for i := 0; res == ""; i++ {
		if name := fmt.Sprintf("nf%d/r", i); n1.Partition(name)%3 == 0 { // led by node 1
			res = name
		}
	}
	p := n1.Partition(res)
	if r := testcluster.Settled(t, func() (kahuna.Result, error) {
		return n1.TryLock(ctx, res, []byte("a"), time.Minute, kahuna.Persistent)
	}); r.Status != kahuna.Locked {
		t.Fatalf("holder: %+v", r)
	}

	// A watcher through node 2.
	cl := dial(t, c.Member(2).Endpoint)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next, stop := pull(cl.Watch(wctx, res))
	defer stop()
	cur := nextEvent(t, next)
	if !cur.Current || cur.Kind != kahuna.EventAcquired || string(cur.Owner) != "a" || cur.ServedFrom != "1" {
		t.Fatalf("current state %+v, want acquired by a, served by node 1", cur)
	}

	// Forwarded wait: it queues on the leader.
	remote := make(chan lockAnswer, 1)
	go func() { // retried while the cluster answers MustRetry, like every client
		for {
			a := <-lockOn(ctx, n2, res, "b", 20*time.Second)
			if a.err != nil || a.r.Status != kahuna.MustRetry {
				remote <- a
				return
			}
		}
	}()
	waiters(t, n1, 1)
	if r := testcluster.Settled(t, func() (kahuna.Result, error) { return n3.Unlock(ctx, res, []byte("a"), kahuna.Persistent) }); r.Status != kahuna.Unlocked {
		t.Fatalf("unlock: %+v", r)
	}
	if a := <-remote; a.err != nil || a.r.Status != kahuna.Locked || a.r.FencingToken != 1 {
		t.Fatalf("forwarded waiter: %+v %v", a.r, a.err)
	}
	wantEvent(t, nextEvent(t, next), kahuna.EventReleased, "")
	got := nextEvent(t, next)
	wantEvent(t, got, kahuna.EventAcquired, "b")
	if got.Durability != kahuna.Ephemeral {
		t.Fatalf("b's grant %+v, want ephemeral (lockOn)", got)
	}
	testcluster.Settled(t, func() (kahuna.Result, error) { return n1.Unlock(ctx, res, []byte("b"), kahuna.Ephemeral) })
	wantEvent(t, nextEvent(t, next), kahuna.EventReleased, "")
	if r := testcluster.Settled(t, func() (kahuna.Result, error) {
		return n1.TryLock(ctx, res, []byte("c"), time.Minute, kahuna.Persistent)
	}); r.Status != kahuna.Locked {
		t.Fatalf("c: %+v", r)
	}
	held := nextEvent(t, next)
	wantEvent(t, held, kahuna.EventAcquired, "c")

	// A forwarded waiter is told MustRetry when the partition moves.
	moved := lockOn(ctx, n2, res, "d", kahuna.WaitForever)
	waiters(t, n1, 1)
	c.Transfer(p, 3)
	if a := <-moved; a.err != nil || a.r.Status != kahuna.MustRetry {
		t.Fatalf("forwarded waiter after the move: %+v %v, want MustRetry", a.r, a.err)
	}

	// The watch resumed on node 3 from c's revision: the next event is the
	// release, not c's grant again.
	if r := testcluster.Settled(t, func() (kahuna.Result, error) { return n3.Unlock(ctx, res, []byte("c"), kahuna.Persistent) }); r.Status != kahuna.Unlocked {
		t.Fatalf("unlock c after the move: %+v", r)
	}
	rel := nextEvent(t, next)
	wantEvent(t, rel, kahuna.EventReleased, "")
	if rel.Revision != held.Revision+1 || rel.ServedFrom != "3" {
		t.Fatalf("release after the move %+v, want revision %d served by node 3", rel, held.Revision+1)
	}
}
