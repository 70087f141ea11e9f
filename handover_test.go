package kahuna_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/internal/testcluster"
)

// A planned move of a partition's leader (a transfer, leader balancing, a
// member's clean close) hands the old leader's live ephemeral leases to the
// new one through Raft: no ephemeral lock is lost and the new leader waits
// for none of them.

func TestClusterTransferKeepsEphemeralLeases(t *testing.T) {
	t.Parallel()
	for _, fencingOnly := range []bool{false, true} {
		name := "grace"
		if fencingOnly {
			name = "fencing-only"
		}
		t.Run(name, func(t *testing.T) {
			const ttl = 30 * time.Second // far longer than the test: a wait for it would fail it
			c := startCluster(t, 1, func(_ uint64, cfg *kahuna.Config) { cfg.EphemeralFencingOnly = fencingOnly })
			ctx := context.Background()
			leader, _ := c.Node(1).Leader(0)
			a := testcluster.Settled(t, func() (kahuna.Result, error) {
				return c.Node(leader).TryLock(ctx, "keep/a", []byte("a"), ttl, kahuna.Ephemeral)
			})
			// A released lease and a lapsed one are not handed over.
			released := testcluster.Settled(t, func() (kahuna.Result, error) {
				return c.Node(leader).TryLock(ctx, "keep/released", []byte("r"), ttl, kahuna.Ephemeral)
			})
			if a.Status != kahuna.Locked || released.Status != kahuna.Locked {
				t.Fatalf("a %+v, released %+v", a, released)
			}
			if r, err := c.Node(leader).Unlock(ctx, "keep/released", []byte("r"), kahuna.Ephemeral); err != nil || r.Status != kahuna.Unlocked {
				t.Fatalf("unlock: %+v %v", r, err)
			}

			to := leader%3 + 1
			start := time.Now()
			c.Transfer(0, to)
			moved := time.Since(start)
			n := c.Node(to)
			var info kahuna.LockInfo
			got := testcluster.Settled(t, func() (r kahuna.Result, err error) {
				info, r, err = n.Get(ctx, "keep/a", kahuna.Ephemeral)
				return r, err
			})
			if got.Status != kahuna.Got || !bytes.Equal(info.Owner, []byte("a")) || info.FencingToken != a.FencingToken {
				t.Fatalf("after the move, Get on the new leader: %+v %+v, want a's lease (token %d)", got, info, a.FencingToken)
			}
			if left := time.Until(info.Expires); left < ttl-10*time.Second || left > ttl+5*time.Second {
				t.Fatalf("kept lease ends in %v, want about %v", left, ttl)
			}
			if moved > ttl/3 {
				t.Fatalf("the move took %v: the new leader waited for the lease", moved)
			}
			t.Logf("moved and serving in %v, a's lease kept (token %d)", moved.Round(time.Millisecond), a.FencingToken)

			if r := testcluster.Settled(t, func() (kahuna.Result, error) {
				return n.TryLock(ctx, "keep/a", []byte("b"), ttl, kahuna.Ephemeral)
			}); r.Status != kahuna.Busy {
				t.Fatalf("b's TryLock while a holds: %+v, want Busy", r)
			}
			if r := testcluster.Settled(t, func() (kahuna.Result, error) {
				return n.TryLock(ctx, "keep/released", []byte("b"), ttl, kahuna.Ephemeral)
			}); r.Status != kahuna.Locked || r.FencingToken <= released.FencingToken {
				t.Fatalf("b's TryLock of the released name: %+v, want Locked above token %d", r, released.FencingToken)
			}
			if r := testcluster.Settled(t, func() (kahuna.Result, error) {
				return n.Extend(ctx, "keep/a", []byte("a"), ttl, kahuna.Ephemeral)
			}); r.Status != kahuna.Extended || r.FencingToken != a.FencingToken {
				t.Fatalf("a's Extend on the new leader: %+v", r)
			}
			if r := testcluster.Settled(t, func() (kahuna.Result, error) {
				return n.Unlock(ctx, "keep/a", []byte("a"), kahuna.Ephemeral)
			}); r.Status != kahuna.Unlocked {
				t.Fatalf("a's Unlock on the new leader: %+v", r)
			}
			if r := testcluster.Settled(t, func() (kahuna.Result, error) {
				return n.TryLock(ctx, "keep/a", []byte("b"), ttl, kahuna.Ephemeral)
			}); r.Status != kahuna.Locked || r.FencingToken <= a.FencingToken {
				t.Fatalf("b's TryLock after a released: %+v, want Locked above a's token %d", r, a.FencingToken)
			}
		})
	}
}
