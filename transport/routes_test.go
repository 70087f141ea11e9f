package transport

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// counting counts the calls that reach a Locker.
type counting struct {
	lease.Locker
	n *atomic.Int64
}

func (c counting) TryLock(ctx context.Context, resource string, owner []byte, ttl time.Duration, d lease.Durability) (lease.Result, error) {
	c.n.Add(1)
	return c.Locker.TryLock(ctx, resource, owner, ttl, d)
}

func (c counting) Extend(ctx context.Context, resource string, owner []byte, ttl time.Duration, d lease.Durability) (lease.Result, error) {
	c.n.Add(1)
	return c.Locker.Extend(ctx, resource, owner, ttl, d)
}

func (c counting) Unlock(ctx context.Context, resource string, owner []byte, d lease.Durability) (lease.Result, error) {
	c.n.Add(1)
	return c.Locker.Unlock(ctx, resource, owner, d)
}

func (c counting) Get(ctx context.Context, resource string, d lease.Durability) (lease.LockInfo, lease.Result, error) {
	c.n.Add(1)
	return c.Locker.Get(ctx, resource, d)
}

// TestClientLearnsTheLeader: a node that forwards names the leader in
// ServedFrom, and the client sends the next calls of that partition key
// straight to it. Keys it has not seen still go round robin.
func TestClientLearnsTheLeader(t *testing.T) {
	state := newFake()
	leader := startServer(t, state, ServerOptions{})
	leaderURL := "http://" + leader.native
	var viaFollower atomic.Int64
	follower := startServer(t, counting{forwardedTo{state, leaderURL}, &viaFollower}, ServerOptions{})
	c := dial(t, []string{"http://" + follower.native, leaderURL})
	ctx := testCtx(t)

	const calls = 40
	for i := range calls {
		res := fmt.Sprintf("jobs/%d", i) // one partition key: "jobs"
		r, err := c.TryLock(ctx, res, []byte("o"), time.Minute, lease.Ephemeral)
		if err != nil || r.Status != lease.Locked || r.ServedFrom != leaderURL {
			t.Fatalf("TryLock %s = %+v, %v", res, r, err)
		}
		if r, err := c.Unlock(ctx, res, []byte("o"), lease.Ephemeral); err != nil || r.Status != lease.Unlocked {
			t.Fatalf("Unlock %s = %+v, %v", res, r, err)
		}
	}
	if n := viaFollower.Load(); n > 1 {
		t.Errorf("%d of %d calls for one partition key went to the node that forwards them: the client did not learn the leader", n, 2*calls)
	}

	// Names without '/' are keys of their own: each new one starts round robin.
	viaFollower.Store(0)
	for i := range calls {
		if _, _, err := c.Get(ctx, fmt.Sprintf("solo-%d", i), lease.Ephemeral); err != nil {
			t.Fatal(err)
		}
	}
	if n := viaFollower.Load(); n == 0 || n == calls {
		t.Errorf("%d of %d calls for unseen keys went to the forwarding node, want about half (round robin)", n, calls)
	}
}

// TestRoutesForgetOnMustRetry: a MustRetry answer names no leader, so the
// route learned before is dropped.
func TestRoutesForgetOnMustRetry(t *testing.T) {
	a, b := &endpoint{url: "http://a"}, &endpoint{url: "http://b"}
	c := &Client{endpoints: []*endpoint{a, b}}
	c.routes.learn("jobs", c.servedBy(a, lease.Result{Status: lease.Locked, ServedFrom: "http://b/"}))
	if got := c.routes.get("jobs"); got != b {
		t.Fatalf("after an answer forwarded to b: route %v, want b", got)
	}
	c.routes.learn("jobs", c.servedBy(b, lease.Result{Status: lease.MustRetry}))
	if got := c.routes.get("jobs"); got != nil {
		t.Fatalf("after MustRetry: route %v, want none", got)
	}
	c.routes.learn("jobs", c.servedBy(a, lease.Result{Status: lease.Busy, ServedFrom: "http://elsewhere"}))
	if got := c.routes.get("jobs"); got != nil {
		t.Fatalf("after an answer from a node the client has no endpoint for: route %v, want none", got)
	}
}

// stalling parks TryLocks of one resource until their context ends, as a
// paused leader would.
type stalling struct {
	lease.Locker
	resource string
}

func (s stalling) TryLock(ctx context.Context, resource string, owner []byte, ttl time.Duration, d lease.Durability) (lease.Result, error) {
	if resource == s.resource {
		<-ctx.Done()
		return lease.Result{}, ctx.Err()
	}
	return s.Locker.TryLock(ctx, resource, owner, ttl, d)
}

// TestRouteDroppedWhenTheLeaderStalls: a call to the learned leader that
// gets no answer drops the route, so the next calls go round robin again
// instead of all waiting on a node that does not answer.
func TestRouteDroppedWhenTheLeaderStalls(t *testing.T) {
	state := newFake()
	leader := startServer(t, stalling{state, "jobs/stuck"}, ServerOptions{})
	leaderURL := "http://" + leader.native
	follower := startServer(t, forwardedTo{state, leaderURL}, ServerOptions{})
	c := dial(t, []string{"http://" + follower.native, leaderURL})
	ctx := testCtx(t)
	for i := range 4 { // whichever endpoint it starts on, the leader is learned
		if _, _, err := c.Get(ctx, fmt.Sprintf("jobs/%d", i), lease.Ephemeral); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.routes.get("jobs"); got == nil || got.url != leaderURL {
		t.Fatalf("route of jobs = %v, want the leader", got)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := c.TryLock(short, "jobs/stuck", []byte("o"), time.Minute, lease.Ephemeral); err == nil {
		t.Fatal("TryLock on the stalled leader answered")
	}
	if got := c.routes.get("jobs"); got != nil {
		t.Fatalf("after the leader stalled the route of jobs is still %v", got.url)
	}
}

// forwardingWaiter is a follower's WaitLocker: its Locks are counted and
// decided on the leader's state, with the leader's URL in ServedFrom.
type forwardingWaiter struct {
	counting
	state *fakeLocker
}

func (f forwardingWaiter) Lock(ctx context.Context, resource string, owner []byte, ttl, _ time.Duration, d lease.Durability) (lease.Result, error) {
	f.n.Add(1)
	return f.counting.TryLock(ctx, resource, owner, ttl, d)
}

// TestNativeLockFollowsTheRoute: once Kahuna-wire answers have named the
// leader of a partition key, native Locks of that key go straight to it.
func TestNativeLockFollowsTheRoute(t *testing.T) {
	leaderFake := newWaitingFake()
	leader := startServer(t, leaderFake, ServerOptions{})
	leaderURL := "http://" + leader.native
	var viaFollower atomic.Int64
	follower := startServer(t, forwardingWaiter{counting{forwardedTo{leaderFake.fakeLocker, leaderURL}, &viaFollower}, leaderFake.fakeLocker}, ServerOptions{})
	c := dial(t, []string{"http://" + follower.native, leaderURL})
	ctx := testCtx(t)

	// Learn the route: round robin until an answer names the leader.
	for i := 0; c.routes.get("jobs") == nil; i++ {
		if i == 10 {
			t.Fatal("no route to the leader learned from 10 Gets")
		}
		if _, _, err := c.Get(ctx, "jobs/x", lease.Ephemeral); err != nil {
			t.Fatal(err)
		}
	}
	viaFollower.Store(0)
	const calls = 20
	for i := range calls {
		res := fmt.Sprintf("jobs/%d", i)
		if r, err := c.Lock(ctx, res, []byte("o"), time.Minute, time.Second, lease.Ephemeral); err != nil || r.Status != lease.Locked {
			t.Fatalf("Lock %s = %+v, %v", res, r, err)
		}
	}
	if n := viaFollower.Load(); n != 0 {
		t.Errorf("%d of %d Locks of a routed key went to the node that forwards them", n, calls)
	}
	if n := leaderFake.locks.Load(); n != calls {
		t.Errorf("the leader served %d Locks, want %d", n, calls)
	}
}
