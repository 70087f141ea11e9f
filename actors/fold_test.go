package actors

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kahunago/kahuna/durability"
	"github.com/kahunago/kahuna/lease"
)

// holdWrites holds the proposals of resource (fakeBackend.hold) until
// the test completes them; a test that stops early fails those still
// held, so the ring can close.
func (f *fixture) holdWrites(t *testing.T, resource string) {
	f.backend.setHold(resource, true)
	t.Cleanup(func() {
		f.backend.setHold(resource, false)
		for {
			select {
			case p := <-f.backend.held:
				p.c.Committed(0, durability.ErrRetry)
			default:
				return
			}
		}
	})
}

// answer is ch's answer; t fails if there is none within 10s (a call
// left waiting for a record that will not come on a broken actor).
func answer(t *testing.T, ch <-chan Response) Response {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no answer after 10s")
		return Response{}
	}
}

// heldSlots counts the slots rec gives an owner.
func heldSlots(rec durability.Record) int {
	n := 0
	for _, s := range rec.Slots {
		if s.Owner != nil {
			n++
		}
	}
	return n
}

// doAsync sends req and returns where its answer will be.
func (f *fixture) doAsync(req Request) <-chan Response {
	ch := make(chan Response, 1)
	go func() {
		resp, err := f.ring.Do(context.Background(), req)
		if err != nil {
			resp = Response{Status: lease.Status(-1)}
		}
		ch <- resp
	}()
	return ch
}

// queuePermits sends a request for one permit of pool as owner that
// queues behind the write in flight, and returns once it has.
func (f *fixture) queuePermits(t *testing.T, op lease.Op, owner string, limit int) <-chan Response {
	t.Helper()
	ch := f.doAsync(permitReq(op, owner, 1, limit, 0))
	if got := <-f.queued; got != pool {
		t.Fatalf("queued on %q", got)
	}
	return ch
}

// noAnswer fails t if one of chs was answered.
func noAnswer(t *testing.T, what string, chs ...<-chan Response) {
	t.Helper()
	for i, ch := range chs {
		select {
		case r := <-ch:
			t.Fatalf("%s %d answered %+v before its record committed", what, i, r)
		default:
		}
	}
}

// noProposal fails t if a record of a held resource was proposed.
func (f *fixture) noProposal(t *testing.T) {
	t.Helper()
	select {
	case p := <-f.backend.held:
		t.Fatalf("unexpected proposal %+v", p.rec)
	default:
	}
}

// Requests queued behind a semaphore's write in flight are decided
// together once it commits and share one record: seven permits granted
// by one commit, each answered by it with its own slot.
func TestQueuedWritesShareOneRecord(t *testing.T) {
	f := newFixture(t, 1, 100)
	f.holdWrites(t, pool)
	first := f.doAsync(permitReq(lease.TryLock, "a", 1, 8, 0))
	p := <-f.backend.held
	var rest []<-chan Response
	for i := range 7 {
		rest = append(rest, f.queuePermits(t, lease.TryLock, fmt.Sprint("b", i), 8))
	}
	p.c.Committed(f.backend.apply(p.rec))
	if r := answer(t, first); r.Status != lease.Locked {
		t.Fatalf("a: %+v", r)
	}
	p = <-f.backend.held // the seven, in one record
	if n := heldSlots(p.rec); n != 8 {
		t.Fatalf("the second record has %d slots held, want 8", n)
	}
	noAnswer(t, "queued request", rest...)
	p.c.Committed(f.backend.apply(p.rec))
	slots := map[int]bool{}
	for i, ch := range rest {
		r := answer(t, ch)
		if r.Status != lease.Locked || len(r.Grants) != 1 {
			t.Fatalf("b%d: %+v", i, r)
		}
		slots[r.Grants[0].Slot] = true
	}
	if len(slots) != 7 || slots[0] {
		t.Fatalf("slots granted %v, want 1..7", slots)
	}
	f.noProposal(t)
	if r := f.permits(t, lease.TryLock, "c", 1, 8); r.Status != lease.Busy {
		t.Fatalf("c: %+v, want Busy (8 of 8 held)", r)
	}
}

// firstThenQueued takes one permit of pool (of limit) as "a", its record
// held, queues b and c's requests behind it, commits a's record and
// returns the next held proposal with b's and c's answers to come.
func (f *fixture) firstThenQueued(t *testing.T, limit int) (heldProposal, <-chan Response, <-chan Response) {
	t.Helper()
	f.holdWrites(t, pool)
	first := f.doAsync(permitReq(lease.TryLock, "a", 1, limit, 0))
	p := <-f.backend.held
	b := f.queuePermits(t, lease.TryLock, "b", limit)
	c := f.queuePermits(t, lease.TryLock, "c", limit)
	p.c.Committed(f.backend.apply(p.rec))
	if r := answer(t, first); r.Status != lease.Locked {
		t.Fatalf("a: %+v", r)
	}
	return <-f.backend.held, b, c
}

// A request that the pending record would answer at once (Busy: the
// permits the record takes are not committed) is not folded: it waits for
// the record and is decided on what committed. Here the record fails
// (certainly not applied), so the permit it took is still free.
func TestFoldedRecordFailsTogetherAndBusyIsNotFolded(t *testing.T) {
	f := newFixture(t, 1, 100)
	p, b, c := f.firstThenQueued(t, 2) // b's grant; c would be Busy on it, and waits
	noAnswer(t, "c", c)
	p.c.Committed(0, fmt.Errorf("queue full: %w", durability.ErrRetry))
	if r := answer(t, b); r.Status != lease.MustRetry {
		t.Fatalf("b: %+v, want MustRetry", r)
	}
	p = <-f.backend.held // c, decided on the committed entry: one of two held
	p.c.Committed(f.backend.apply(p.rec))
	if r := answer(t, c); r.Status != lease.Locked {
		t.Fatalf("c: %+v, want Locked (b's permit never committed)", r)
	}
}

// A folded record of unknown outcome answers every call in it Errored,
// and the entry is reloaded from what did commit.
func TestFoldedRecordOfUnknownOutcome(t *testing.T) {
	f := newFixture(t, 1, 100)
	p, b, c := f.firstThenQueued(t, 4)                // b's and c's grants, folded
	if _, err := f.backend.apply(p.rec); err != nil { // it did commit
		t.Fatal(err)
	}
	p.c.Committed(0, durability.ErrUnknownOutcome)
	for i, ch := range []<-chan Response{b, c} {
		if r := answer(t, ch); r.Status != lease.Errored {
			t.Fatalf("%d: %+v, want Errored", i, r)
		}
	}
	f.backend.setHold(pool, false)
	if r := f.permits(t, lease.TryLock, "d", 1, 4); r.Status != lease.Locked || r.Free != 0 {
		t.Fatalf("d: %+v, want Locked with none left (a, b, c committed)", r)
	}
}

// A writer's release and the grants of the readers waiting behind it are
// one record.
func TestReleaseAndTheGrantsItAllowsShareOneRecord(t *testing.T) {
	f := newFixture(t, 1, 100)
	const rw = lease.RWLockPrefix + "index"
	req := func(op lease.Op, owner string, shared bool, wait time.Duration) Request {
		return Request{Request: lease.Request{Op: op, Resource: rw, Owner: []byte(owner), TTL: time.Minute,
			Durability: lease.Persistent, Shared: shared, Wait: wait}, Partition: 1}
	}
	if r, err := f.ring.Do(context.Background(), req(lease.TryLock, "w", false, 0)); err != nil || r.Status != lease.Locked {
		t.Fatalf("writer: %+v %v", r, err)
	}
	var readers []<-chan Response
	for i := range 5 {
		readers = append(readers, f.doAsync(req(lease.TryLock, fmt.Sprint("r", i), true, lease.WaitForever)))
		if got := <-f.waiting; got != rw {
			t.Fatalf("waiting on %q", got)
		}
	}
	f.holdWrites(t, rw)
	unlock := f.doAsync(req(lease.Unlock, "w", false, 0))
	p := <-f.backend.held
	if n := heldSlots(p.rec); n != 5 || p.rec.Exclusive {
		t.Fatalf("the release's record has %d read holds (exclusive %v), want 5 readers", n, p.rec.Exclusive)
	}
	noAnswer(t, "reader", readers...)
	p.c.Committed(f.backend.apply(p.rec))
	if r := answer(t, unlock); r.Status != lease.Unlocked {
		t.Fatalf("unlock: %+v", r)
	}
	for i, ch := range readers {
		if r := answer(t, ch); r.Status != lease.Locked {
			t.Fatalf("reader %d: %+v", i, r)
		}
	}
	f.noProposal(t)
}
