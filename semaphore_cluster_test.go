package kahuna_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/internal/testcluster"
)

// Permits asked of a member that does not lead the semaphore's partition
// are forwarded whole (permits, limit, the grants in the answer), and a
// Client carries them too, over gRPC and over REST (a follower forwards
// the REST request whole).
func TestClusterSemaphoreForwardedOverTheWire(t *testing.T) {
	c := startCluster(t, 4, nil)
	ctx := context.Background()
	const name = "runners"
	leader, follower := leaderAndFollower(c, kahuna.SemaphorePrefix+name)
	sem := kahuna.NewSemaphore(c.Node(follower), name, 3)
	var first *kahuna.Permit
	testcluster.Eventually(t, "two permits through a follower", func() bool {
		var err error
		first, err = sem.TryAcquire(ctx, 2, kahuna.WithTTL(time.Minute))
		return err == nil
	})
	if g := first.Grants(); len(g) != 2 || g[0].Slot != 0 || g[1].Slot != 1 {
		t.Fatalf("forwarded grants: %v", g)
	}

	cl, err := kahuna.Dial(ctx, []string{c.Member(follower).Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	overWire := kahuna.NewSemaphore(cl, name, 3)
	if _, err := overWire.TryAcquire(ctx, 2); !errors.Is(err, kahuna.ErrBusy) {
		t.Fatalf("two permits with one free, over gRPC: %v, want busy", err)
	}
	if _, err := kahuna.NewSemaphore(cl, name, 4).TryAcquire(ctx, 1); !isInvalid(err, "semaphore limit is 3; this request states 4") {
		t.Fatalf("another limit over gRPC: %v", err)
	}
	third, err := overWire.TryAcquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if g := third.Grants(); len(g) != 1 || g[0].Slot != 2 || third.FencingToken() != g[0].Token || third.Free() != 0 {
		t.Fatalf("over gRPC: %v (token %d, %d left free)", g, third.FencingToken(), third.Free())
	}
	if err := third.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("extend over gRPC: %v", err)
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := overWire.TryAcquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if g := again.Grants(); len(g) != 2 || g[0].Token != first.Grants()[0].Token+1 {
		t.Fatalf("regrant over gRPC: %v after %v", g, first.Grants())
	}

	rest, err := kahuna.Dial(ctx, []string{c.Member(follower).Endpoint}, kahuna.WithREST())
	if err != nil {
		t.Fatal(err)
	}
	defer rest.Close()
	// Over REST through the follower: busy while all three are held, then
	// the slot the gRPC holder frees, one generation up.
	if _, err := kahuna.NewSemaphore(rest, name, 3).TryAcquire(ctx, 1); !errors.Is(err, kahuna.ErrBusy) {
		t.Fatalf("over REST with every permit held: %v, want busy", err)
	}
	if err := third.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	viaREST, err := kahuna.NewSemaphore(rest, name, 3).TryAcquire(ctx, 1)
	if err != nil {
		t.Fatalf("over REST: %v", err)
	}
	if g := viaREST.Grants(); len(g) != 1 || g[0].Slot != 2 || g[0].Token != third.Grants()[0].Token+1 {
		t.Fatalf("over REST: %v after %v", g, third.Grants())
	}
	// Resized over REST through the follower; the new slot over gRPC.
	if err := kahuna.NewSemaphore(rest, name, 3).SetLimit(ctx, 4); err != nil {
		t.Fatalf("SetLimit over REST: %v", err)
	}
	fourth, err := kahuna.NewSemaphore(cl, name, 4).TryAcquire(ctx, 1)
	if err != nil || fourth.Grants()[0].Slot != 3 || fourth.Free() != 0 {
		t.Fatalf("the grown slot over gRPC: %v, %v", fourth, err)
	}
	// Get lists the four holders wherever it is asked: the leader, the
	// follower (which asks the leader for its listing of the name), and
	// both kinds of client through the follower.
	var want []holding
	for _, p := range []*kahuna.Permit{again, viaREST, fourth} {
		want = append(want, permitHoldings(p)...)
	}
	top := again.Grants()[0].Token
	for _, p := range []*kahuna.Permit{viaREST, fourth} {
		top = max(top, p.Grants()[0].Token)
	}
	for _, g := range []struct {
		name string
		l    kahuna.Locker
	}{{"leader", c.Node(leader)}, {"follower", c.Node(follower)}, {"gRPC via the follower", cl}, {"REST via the follower", rest}} {
		var (
			info kahuna.LockInfo
			res  kahuna.Result
			err  error
		)
		// A member whose leader lease is being renewed on a loaded
		// machine answers MustRetry for a moment: ask again.
		testcluster.Eventually(t, g.name+" answers", func() bool {
			info, res, err = g.l.Get(ctx, kahuna.SemaphorePrefix+name, kahuna.Persistent)
			return err != nil || res.Status != kahuna.MustRetry
		})
		checkGot(t, g.name, info, res, err, top, want)
	}
}
