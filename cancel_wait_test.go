package kahuna_test

import (
	"context"
	"errors"
	"fmt"
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
	t.Parallel()
	n := openElectionNode(t, kahuna.Config{})
	ep, _, _ := serveCounted(t, n)
	eachWay(t, n, dial(t, ep), n, "hot", cancelledWaitsStrandNothing)
}

// TestCancelledForwardedWaitsStrandNothing: the same through a member
// that does not lead the lock's partition and forwards to its leader.
func TestCancelledForwardedWaitsStrandNothing(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, 1, steadyLeaders) // one partition: every name's leader is the same
	leader, follower := leaderAndFollower(cl, "hot")
	ep, _, _ := serveCounted(t, cl.Node(follower))
	eachWay(t, cl.Node(follower), dial(t, ep), cl.Node(leader), "hot", cancelledWaitsStrandNothing)
}

// eachWay runs check with the embedded Locker and the wire one, for each
// durability, on names under prefix; got reads the locks.
func eachWay(t *testing.T, embedded, wire, got kahuna.Locker, prefix string, check func(t *testing.T, l, got kahuna.Locker, prefix string, d kahuna.Durability)) {
	for _, tc := range []struct {
		name string
		l    kahuna.Locker
	}{{"embedded", embedded}, {"wire", wire}} {
		for _, d := range []kahuna.Durability{kahuna.Ephemeral, kahuna.Persistent} {
			t.Run(tc.name+"/"+d.String(), func(t *testing.T) {
				check(t, tc.l, got, prefix+"/"+tc.name+"/"+d.String(), d)
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

// TestCancelledTryLocksStrandNothing: callers whose context ends while
// their TryLock is on its way (Acquire without a wait, deadlines about as
// long as an attempt takes, 64 names, 32 callers) leave nothing behind, embedded and over the
// wire: soon after the last caller has returned (a clean-up over the wire
// follows its attempt's answer), every name is free, where a lock left
// behind would stay held for its minute-long lease. A clean-up sent at
// once used to overtake its TryLock (a release jumps a lock actor's
// queue) and find nothing, and the TryLock then granted the lock to no
// one.
func TestCancelledTryLocksStrandNothing(t *testing.T) {
	t.Parallel()
	n := openElectionNode(t, kahuna.Config{})
	ep, _, _ := serveCounted(t, n)
	eachWay(t, n, dial(t, ep), n, "try", cancelledTryLocksStrandNothing)
}

// TestCancelledForwardedTryLocksStrandNothing: the same through a member
// that does not lead the names' partition.
func TestCancelledForwardedTryLocksStrandNothing(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, 1, steadyLeaders)
	leader, follower := leaderAndFollower(cl, "try/x")
	ep, _, _ := serveCounted(t, cl.Node(follower))
	eachWay(t, cl.Node(follower), dial(t, ep), cl.Node(leader), "try", cancelledTryLocksStrandNothing)
}

// cancelledTryLocksStrandNothing runs 32 callers for a second (longer, up
// to 15 s, until both outcomes below are counted 50 times) on 64 names
// of prefix through l, each attempt with a deadline drawn up to four
// times the time an attempt takes under that load (so that some are
// granted and some cut short, on a quick machine or under the race
// detector), and fails unless every name is free (as got reads it) soon
// after.
func cancelledTryLocksStrandNothing(t *testing.T, l, got kahuna.Locker, prefix string, d kahuna.Durability) {
	name := func(k int) string { return fmt.Sprintf("%s/%d", prefix, k) }
	var took atomic.Int64 // about the time of an attempt, in ns, as it goes
	took.Store(int64(time.Millisecond))
	var cancelled, held atomic.Int64
	// At least a second, and on until both outcomes are counted 50 times:
	// on a loaded machine the deadlines take longer to find their range.
	began := time.Now()
	more := func() bool {
		since := time.Since(began)
		return since < time.Second || since < 15*time.Second && (cancelled.Load() < 50 || held.Load() < 50)
	}
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for more() {
				ctx, cancel := context.WithTimeout(context.Background(), rand.N(4*time.Duration(took.Load())))
				start := time.Now()
				lk, err := kahuna.Acquire(ctx, l, name(rand.IntN(64)), kahuna.WithDurability(d), kahuna.WithTTL(time.Minute))
				cancel()
				switch {
				case err == nil:
					took.Store((7*took.Load() + int64(time.Since(start))) / 8)
					held.Add(1)
					if err := lk.Unlock(context.Background()); err != nil {
						t.Errorf("unlock: %v", err)
					}
				case errors.Is(err, context.DeadlineExceeded):
					took.Store(took.Load() * 17 / 16) // until some are granted
					cancelled.Add(1)
				case errors.Is(err, kahuna.ErrBusy):
				default:
					t.Errorf("acquire: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	if cancelled.Load() < 50 || held.Load() < 50 {
		t.Fatalf("%d attempts cut short, %d granted: the test did not exercise both", cancelled.Load(), held.Load())
	}
	t.Logf("%d attempts cut short, %d granted", cancelled.Load(), held.Load())
	// Clean-ups over the wire follow their attempts' answers: wait for
	// them, well short of the leases' minute.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		h := heldName(t, got, name, d)
		if h == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("20 s after the last caller returned, %s", h)
		}
	}
}

// heldName describes the first of the 64 names that is held, or is "".
func heldName(t *testing.T, n kahuna.Locker, name func(int) string, d kahuna.Durability) string {
	t.Helper()
	for k := range 64 {
		info, r, err := n.Get(context.Background(), name(k), d)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status == kahuna.Got {
			return fmt.Sprintf("%s is held by %x (token %d)", name(k), info.Owner, info.FencingToken)
		}
	}
	return ""
}
