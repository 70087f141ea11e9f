package kahuna_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
)

// TestCancelledWaitsStrandNothing: on a hot lock, callers whose context
// ends while they wait (Acquire with WithWaitForever under a short
// deadline) leave nothing behind, embedded and over the wire: once every
// caller has returned, and every one that got the lock has released it,
// the lock is free. A caller that left the queue while a release was on
// its way to the server used to be granted the lock after its clean-up
// had found nothing to release, so the lock stayed held, by no one, for
// its whole lease.
func TestCancelledWaitsStrandNothing(t *testing.T) {
	n := openElectionNode(t, kahuna.Config{})
	ep, _, _ := serveCounted(t, n)
	c := dial(t, ep)
	for _, tc := range []struct {
		name string
		l    kahuna.Locker
	}{{"embedded", n}, {"wire", c}} {
		for _, d := range []kahuna.Durability{kahuna.Ephemeral, kahuna.Persistent} {
			t.Run(tc.name+"/"+d.String(), func(t *testing.T) {
				cancelledWaitsStrandNothing(t, tc.l, n, "hot/"+tc.name+"/"+d.String(), d)
			})
		}
	}
}

// TestCancelledForwardedWaitsStrandNothing: the same through a member
// that does not lead the lock's partition and forwards to its leader.
func TestCancelledForwardedWaitsStrandNothing(t *testing.T) {
	cl := startCluster(t, 1, nil)
	leader, follower := leaderAndFollower(cl, "hot")
	ep, _, _ := serveCounted(t, cl.Node(follower))
	c := dial(t, ep)
	for _, tc := range []struct {
		name string
		l    kahuna.Locker
	}{{"embedded", cl.Node(follower)}, {"wire", c}} {
		for _, d := range []kahuna.Durability{kahuna.Ephemeral, kahuna.Persistent} {
			t.Run(tc.name+"/"+d.String(), func(t *testing.T) {
				cancelledWaitsStrandNothing(t, tc.l, cl.Node(leader), "hot/"+tc.name+"/"+d.String(), d)
			})
		}
	}
}

// cancelledWaitsStrandNothing runs rounds of 16 callers on res through l,
// half of them with deadlines of up to 2 ms, and fails if the lock is
// held (as got reads it) once a round's callers have all returned.
func cancelledWaitsStrandNothing(t *testing.T, l, got kahuna.Locker, res string, d kahuna.Durability) {
	var cancelled atomic.Int64
	for round := range 5 {
		stop := time.Now().Add(300 * time.Millisecond)
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(stop) {
					// The patient half waits as long as a stranded lock
					// would keep them (2 s against its 30 s).
					limit := 2 * time.Second
					if i%2 == 1 {
						limit = time.Duration(rand.IntN(2000)) * time.Microsecond
					}
					ctx, cancel := context.WithTimeout(context.Background(), limit)
					lk, err := kahuna.Acquire(ctx, l, res, kahuna.WithWaitForever(), kahuna.WithDurability(d), kahuna.WithTTL(30*time.Second))
					cancel()
					switch {
					case err == nil:
						if err := lk.Unlock(context.Background()); err != nil {
							t.Errorf("unlock: %v", err)
						}
					case errors.Is(err, context.DeadlineExceeded):
						cancelled.Add(1)
					default:
						t.Errorf("acquire: %v", err)
					}
				}
			}()
		}
		wg.Wait()
		info, r, err := got.Get(context.Background(), res, d)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status == kahuna.Got {
			t.Fatalf("round %d: every caller has left, but the lock is held by %x (token %d)", round, info.Owner, info.FencingToken)
		}
	}
	if cancelled.Load() < 50 {
		t.Fatalf("only %d waits were cut short: the test did not exercise leaving", cancelled.Load())
	}
	t.Logf("%d waits cut short", cancelled.Load())
}
