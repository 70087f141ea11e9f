package actors

import (
	"context"
	"testing"
	"time"

	"github.com/kahunago/kahuna/lease"
)

func (f *fixture) blockLoads(res string) {
	f.backend.blockLoad, f.backend.loadEntered, f.backend.loadRelease = res, make(chan struct{}), make(chan struct{})
}

// A slow read of one resource's record does not stall its actor: the
// actor's other resources are served meanwhile, and the requests for the
// slow one wait, in order, and are decided on what the read found.
func TestSlowLoadDoesNotStallTheActor(t *testing.T) {
	f := newFixture(t, 1, 100)
	f.do(t, lease.TryLock, "slow", "a", time.Hour, lease.Persistent)
	f.ring.DropPartition(context.Background(), 1) // forget the cache: the next request reads
	f.blockLoads("slow")
	first := f.async(lease.TryLock, "slow", "b", lease.Persistent)
	<-f.backend.loadEntered
	second := f.async(lease.Get, "slow", "", lease.Persistent)
	// The only actor answers another resource while the read hangs.
	if r := f.do(t, lease.TryLock, "other", "c", time.Hour, lease.Ephemeral); r.Status != lease.Locked {
		t.Fatalf("other resource during the slow read: %+v", r)
	}
	close(f.backend.loadRelease)
	if r := <-first; r.Status != lease.Busy {
		t.Fatalf("TryLock behind the read: %+v, want Busy (a holds it, as stored)", r)
	}
	if r := <-second; r.Status != lease.Got || string(r.Owner) != "a" {
		t.Fatalf("Get behind the read: %+v, want Got by a", r)
	}
	// The first grant's miss, "other"'s, and one read for both requests
	// behind the slow one.
	if n := f.backend.loads.Load(); n != 3 {
		t.Fatalf("%d loads, want 3", n)
	}
}

// A read under way when its partition is dropped (a leader change) is
// thrown away: its requests are answered MustRetry if the node no longer
// serves, or read again.
func TestLoadDroppedMidway(t *testing.T) {
	f := newFixture(t, 1, 100)
	f.do(t, lease.TryLock, "r", "a", time.Hour, lease.Persistent)
	f.ring.DropPartition(context.Background(), 1)
	f.blockLoads("r")
	waiting := f.async(lease.Get, "r", "", lease.Persistent)
	<-f.backend.loadEntered
	f.serving[1].Store(false)
	if err := f.ring.DropPartition(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	f.backend.blockLoad = "" // the next read, if any, goes through
	close(f.backend.loadRelease)
	if r := <-waiting; r.Status != lease.MustRetry {
		t.Fatalf("request behind a dropped read, not serving: %+v, want MustRetry", r)
	}
	f.serving[1].Store(true)
	if r := f.do(t, lease.Get, "r", "", 0, lease.Persistent); r.Status != lease.Got {
		t.Fatalf("after serving again: %+v", r)
	}
}

// A panic in a read costs the requests that waited for it, answered
// Errored, not the actor.
func TestLoadPanicAnswersErrored(t *testing.T) {
	f := newFixture(t, 1, 100)
	f.backend.loadPanic = "boom"
	if r := f.do(t, lease.TryLock, "boom", "a", time.Hour, lease.Persistent); r.Status != lease.Errored {
		t.Fatalf("request behind a panicking read: %+v, want Errored", r)
	}
	if r := f.do(t, lease.TryLock, "fine", "a", time.Hour, lease.Persistent); r.Status != lease.Locked {
		t.Fatalf("after the panic: %+v", r)
	}
}

// DoNow answers a request its actor decides at once, and leaves one that
// waits for its record's read to Finish without waiting for it: the
// caller goes on while the read hangs, and the answer comes once it is
// done, decided on what the read found.
func TestDoNowLeavesAWaitingRequestToFinish(t *testing.T) {
	f := newFixture(t, 1, 100)
	f.do(t, lease.TryLock, "slow", "a", time.Hour, lease.Persistent)
	f.ring.DropPartition(context.Background(), 1) // forget the cache: the next request reads
	req := func(res, owner string) Request {
		return Request{Request: lease.Request{Op: lease.TryLock, Resource: res, Owner: []byte(owner), TTL: time.Minute, Durability: lease.Ephemeral}, Partition: 1}
	}
	f.do(t, lease.TryLock, "other", "c", time.Hour, lease.Ephemeral) // cached, so decided at once
	if resp, now, later := f.ring.DoNow(req("other", "d")); !now || later.Started() || resp.Status != lease.Busy {
		t.Fatalf("DoNow on an idle actor's cached lock = %+v, now %v, later %v; want Busy now", resp.Status, now, later.Started())
	}
	f.blockLoads("slow")
	resp, now, later := f.ring.DoNow(req("slow", "b")) // returns while the read hangs
	if now || !later.Started() {
		t.Fatalf("DoNow of a request waiting for its read = %+v, now %v, later %v; want later", resp.Status, now, later.Started())
	}
	<-f.backend.loadEntered
	answered := make(chan Response, 1)
	f.ring.Finish(context.Background(), later, AnswerFunc(func(r Response, err error) {
		if err != nil {
			t.Errorf("Finish: %v", err)
		}
		answered <- r
	}))
	select {
	case r := <-answered:
		t.Fatalf("answered %+v before the read was done", r)
	case <-time.After(50 * time.Millisecond):
	}
	close(f.backend.loadRelease)
	if r := <-answered; r.Status != lease.Busy {
		t.Fatalf("TryLock behind the read: %+v, want Busy (a holds it, as stored)", r)
	}
}
