package actors

import (
	"context"
	"testing"
	"time"

	"github.com/kahunago/kahuna/lease"
)

const pool = lease.SemaphorePrefix + "pool"

func permitReq(op lease.Op, owner string, n, limit int, wait time.Duration) Request {
	return Request{Request: lease.Request{Op: op, Resource: pool, Owner: []byte(owner), TTL: time.Minute,
		Durability: lease.Persistent, Permits: n, Limit: limit, Wait: wait}, Partition: 1}
}

func (f *fixture) permits(t *testing.T, op lease.Op, owner string, n, limit int) Response {
	t.Helper()
	resp, err := f.ring.Do(context.Background(), permitReq(op, owner, n, limit, 0))
	if err != nil {
		t.Fatalf("%v %s: %v", op, owner, err)
	}
	return resp
}

// waitPermits starts a waiting request for n permits and returns once it
// is in the queue.
func (f *fixture) waitPermits(t *testing.T, ctx context.Context, owner string, n, limit int) <-chan Response {
	t.Helper()
	ch := make(chan Response, 1)
	ctx, stop := context.WithCancel(ctx)
	t.Cleanup(stop) // a failed test's waiters leave with it
	f.waitCall(ctx, permitReq(lease.TryLock, owner, n, limit, lease.WaitForever), func(resp Response, err error) {
		if err != nil {
			resp = Response{Status: lease.Status(-1)}
		}
		ch <- resp
	})
	if got := <-f.waiting; got != pool {
		t.Fatalf("queued on %q", got)
	}
	return ch
}

// A request for several permits at the head of the queue is not passed by
// later requests for fewer, even while enough permits for them are free.
func TestSemaphoreQueueIsFirstComeFirstServed(t *testing.T) {
	f := newFixture(t, 2, 100)
	if r := f.permits(t, lease.TryLock, "a", 2, 3); r.Status != lease.Locked || len(r.Grants) != 2 {
		t.Fatalf("a: %+v", r)
	}
	big := f.waitPermits(t, context.Background(), "big", 2, 3) // one permit is free: it waits
	if r := f.permits(t, lease.TryLock, "newcomer", 1, 3); r.Status != lease.Busy {
		t.Errorf("a newcomer took the permit the queue's head waits for: %+v", r)
	}
	small := f.waitPermits(t, context.Background(), "small", 1, 3)
	if r := f.permits(t, lease.Unlock, "a", 0, 0); r.Status != lease.Unlocked {
		t.Fatalf("unlock a: %+v", r)
	}
	b := <-big
	if b.Status != lease.Locked || len(b.Grants) != 2 || b.Grants[0] != (lease.Grant{Slot: 0, Token: 2}) || b.Grants[1] != (lease.Grant{Slot: 1, Token: 2}) {
		t.Fatalf("big: %+v, want slots 0 and 1 with their second generation", b)
	}
	s := <-small
	if s.Status != lease.Locked || len(s.Grants) != 1 || s.Grants[0] != (lease.Grant{Slot: 2, Token: 1}) {
		t.Fatalf("small: %+v, want slot 2's first generation", s)
	}
	rec := f.backend.store[pool]
	if rec.Limit != 3 || len(rec.Slots) != 3 || string(rec.Slots[0].Owner) != "big" || string(rec.Slots[2].Owner) != "small" ||
		rec.Token != 2 || !rec.Locked || rec.Owner != nil {
		t.Fatalf("stored %+v", rec)
	}
}

// The waiter's timer is set for the first permit to lapse, not the last.
func TestSemaphoreWaiterWokenWhenThePermitItNeedsLapses(t *testing.T) {
	f := newFixture(t, 1, 100)
	f.permits(t, lease.TryLock, "short", 1, 2)
	f.clock.Advance(30 * time.Second)
	f.permits(t, lease.TryLock, "long", 1, 2) // lapses 30 s after short
	w := f.waitPermits(t, context.Background(), "w", 1, 2)
	timer := <-f.timers
	if timer.d > 30*time.Second+time.Millisecond {
		t.Fatalf("timer set for %v, want short's expiry in 30 s", timer.d)
	}
	f.clock.Advance(30*time.Second + time.Millisecond)
	timer.fire()
	if r := <-w; r.Status != lease.Locked || len(r.Grants) != 1 || r.Grants[0] != (lease.Grant{Slot: 0, Token: 2}) {
		t.Fatalf("w after short lapsed: %+v, want slot 0 token 2", r)
	}
}

// When the head of the queue leaves, the requests behind it that fit are
// granted at once.
func TestSemaphoreHeadLeavingLetsTheNextIn(t *testing.T) {
	f := newFixture(t, 1, 100)
	f.permits(t, lease.TryLock, "a", 1, 2)
	ctx, cancel := context.WithCancel(context.Background())
	big := f.waitPermits(t, ctx, "big", 2, 2)
	small := f.waitPermits(t, context.Background(), "small", 1, 2)
	cancel()
	if r := <-big; r.Status != lease.Status(-1) {
		t.Fatalf("big after cancel: %+v", r)
	}
	select {
	case r := <-small:
		if r.Status != lease.Locked || r.Grants[0].Slot != 1 {
			t.Fatalf("small: %+v, want the free slot 1", r)
		}
	case <-time.After(10 * time.Second): // a deadline for a failure, not a wait for success
		t.Fatal("small still waits for the free slot after the head left")
	}
}

// A semaphore's slots are read back from its record: after the cache is
// dropped, its holder extends and releases what it holds, and a limit that
// differs from the stored one is refused with both values.
func TestSemaphoreReloadedFromItsRecord(t *testing.T) {
	f := newFixture(t, 1, 100)
	f.permits(t, lease.TryLock, "a", 2, 4)
	f.permits(t, lease.TryLock, "b", 1, 4)
	if err := f.ring.DropPartition(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if r := f.permits(t, lease.Extend, "a", 0, 0); r.Status != lease.Extended || len(r.Grants) != 2 || r.Grants[1] != (lease.Grant{Slot: 1, Token: 1}) {
		t.Fatalf("extend after reload: %+v", r)
	}
	if r := f.permits(t, lease.TryLock, "c", 1, 5); r.Status != lease.InvalidInput || r.Reason != "semaphore limit is 4; this request states 5" {
		t.Fatalf("other limit: %+v", r)
	}
	if r := f.permits(t, lease.TryLock, "c", 2, 4); r.Status != lease.Busy {
		t.Fatalf("c asking for 2 with 1 free: %+v", r)
	}
	if r := f.permits(t, lease.TryLock, "c", 1, 4); r.Status != lease.Locked || len(r.Grants) != 1 || r.Grants[0] != (lease.Grant{Slot: 3, Token: 1}) {
		t.Fatalf("c: %+v, want slot 3", r)
	}
	if r := f.permits(t, lease.Unlock, "a", 0, 0); r.Status != lease.Unlocked {
		t.Fatalf("unlock a: %+v", r)
	}
	if got := f.backend.store[pool]; got.Slots[0].Owner != nil || string(got.Slots[2].Owner) != "b" {
		t.Fatalf("stored after unlock: %+v", got)
	}
}
