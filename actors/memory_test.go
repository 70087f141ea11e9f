package actors

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/kahunago/kahuna/durability"
	"github.com/kahunago/kahuna/lease"
)

// TestNeverLockedLeavesNoEntry: Gets, Unlocks and Extends of names never
// locked (nothing stored, nothing cached) answer LockDoesNotExist and leave
// no cache entry behind.
func TestNeverLockedLeavesNoEntry(t *testing.T) {
	f := newFixture(t, 4, 100)
	const n = 100_000
	ops := []lease.Op{lease.Get, lease.Unlock, lease.Extend}
	for i := range n {
		op := ops[i%len(ops)]
		d := lease.Durability(i % 2)
		if r := f.do(t, op, fmt.Sprintf("never-%d", i), "a", time.Minute, d); r.Status != lease.LockDoesNotExist {
			t.Fatalf("%v never-%d: %+v, want LockDoesNotExist", op, i, r)
		}
	}
	s := f.stats(t)
	t.Logf("after %d Gets/Unlocks/Extends of never-locked names: %+v", n, s)
	if s.Entries != 0 {
		t.Fatalf("%d entries left behind, want 0", s.Entries)
	}
}

// TestEntryCap: an actor full of entries evicts lapsed ones to make room
// for a new one, never a live lease, and refuses (MustRetry, nothing
// applied) what needs a new entry when every entry is in use; reads of
// uncached names are still answered.
func TestEntryCap(t *testing.T) {
	f := newFixture(t, 1, 100, func(c *Config) { c.MaxEntries = 10 })
	for i := range 5 {
		f.do(t, lease.TryLock, fmt.Sprintf("live-%d", i), "a", time.Hour, lease.Ephemeral)
		f.do(t, lease.TryLock, fmt.Sprintf("short-%d", i), "a", time.Second, lease.Persistent)
	}
	if s := f.stats(t); s.Entries != 10 {
		t.Fatalf("%+v, want 10 entries", s)
	}
	// Full, every lease live: what needs an entry is refused, unapplied.
	for _, d := range []lease.Durability{lease.Ephemeral, lease.Persistent} {
		if r := f.do(t, lease.TryLock, "new", "b", time.Hour, d); r.Status != lease.MustRetry {
			t.Fatalf("%v TryLock at the cap: %+v, want MustRetry", d, r)
		}
	}
	if _, ok := f.backend.store["new"]; ok {
		t.Fatal("a refused persistent TryLock was proposed")
	}
	if _, err := f.ring.Watch(context.Background(), Request{Request: lease.Request{Resource: "new"}, Partition: 1}, 0); !errors.Is(err, ErrFull) {
		t.Fatalf("Watch at the cap: %v, want ErrFull", err)
	}
	// Reads are answered: of a name never locked, and of a stored record,
	// loaded and not cached.
	if r := f.do(t, lease.Get, "new", "", 0, lease.Ephemeral); r.Status != lease.LockDoesNotExist {
		t.Fatalf("Get at the cap: %+v", r)
	}
	f.backend.mu.Lock()
	f.backend.store["stored"] = durability.Record{Resource: "stored", Owner: []byte("x"), Locked: true, Token: 7, ExpiresMs: f.clock.Now().Add(time.Hour).UnixMilli(), Index: 99}
	f.backend.mu.Unlock()
	loads := f.backend.loads.Load()
	for range 2 {
		if r := f.do(t, lease.Get, "stored", "", 0, lease.Persistent); r.Status != lease.Got || r.Token != 7 {
			t.Fatalf("Get of a stored lock at the cap: %+v", r)
		}
	}
	if n := f.backend.loads.Load() - loads; n != 2 {
		t.Fatalf("%d loads for two Gets at the cap, want 2 (not cached)", n)
	}
	if s := f.stats(t); s.Entries != 10 || s.Evictions != 0 || s.Refused != 3 {
		t.Fatalf("%+v, want 10 entries, 0 evictions, 3 refused", s)
	}
	// The short leases lapse: they make room, the live ones stay.
	f.clock.Advance(2 * time.Second)
	if r := f.do(t, lease.TryLock, "new", "b", time.Hour, lease.Persistent); r.Status != lease.Locked {
		t.Fatalf("TryLock with lapsed entries to evict: %+v", r)
	}
	if s := f.stats(t); s.Entries != 6 || s.Evictions != 5 {
		t.Fatalf("%+v, want the 5 lapsed entries evicted", s)
	}
	for i := range 5 {
		if r := f.do(t, lease.TryLock, fmt.Sprintf("live-%d", i), "b", time.Hour, lease.Ephemeral); r.Status != lease.Busy {
			t.Fatalf("live-%d: %+v, want Busy (never evicted)", i, r)
		}
	}
	// An evicted persistent entry comes back from the store, with its
	// token; four fill the actor again, and the fifth finds no room.
	for i := range 4 {
		if r := f.do(t, lease.TryLock, fmt.Sprintf("short-%d", i), "b", time.Hour, lease.Persistent); r.Status != lease.Locked || r.Token != 1 {
			t.Fatalf("short-%d after eviction: %+v, want Locked token 1", i, r)
		}
	}
	if r := f.do(t, lease.TryLock, "short-4", "b", time.Hour, lease.Persistent); r.Status != lease.MustRetry {
		t.Fatalf("short-4 with 10 live entries: %+v, want MustRetry", r)
	}
	if s := f.stats(t); s.Entries != 10 || s.Refused != 4 {
		t.Fatalf("%+v, want 10 entries, 4 refused", s)
	}
}

// TestQueueCap: requests queued behind one resource's write in flight are
// capped; the next is answered MustRetry at once, the queued ones when the
// write completes.
func TestQueueCap(t *testing.T) {
	f := newFixture(t, 1, 100, func(c *Config) { c.MaxQueued = 2 })
	f.backend.setHold("r", true)
	first := f.async(lease.TryLock, "r", "a", lease.Persistent)
	p := <-f.backend.held
	queued := []<-chan Response{f.async(lease.TryLock, "r", "b", lease.Ephemeral)}
	<-f.queued
	queued = append(queued, f.async(lease.Get, "r", "", lease.Ephemeral))
	<-f.queued
	if r := f.do(t, lease.TryLock, "r", "c", time.Minute, lease.Ephemeral); r.Status != lease.MustRetry {
		t.Fatalf("third request behind the write: %+v, want MustRetry", r)
	}
	p.c.Committed(f.backend.apply(p.rec))
	if r := <-first; r.Status != lease.Locked {
		t.Fatalf("the write: %+v", r)
	}
	if r := <-queued[0]; r.Status != lease.Busy {
		t.Fatalf("queued TryLock: %+v, want Busy", r)
	}
	if r := <-queued[1]; r.Status != lease.Got {
		t.Fatalf("queued Get: %+v, want Got", r)
	}
	if s := f.ring.Stats(); s.Refused != 1 {
		t.Fatalf("%+v, want 1 refused", s)
	}
	// The queue is counted afresh behind the next write.
	f.backend.setHold("r", true)
	unlock := f.async(lease.Unlock, "r", "a", lease.Persistent)
	p = <-f.backend.held
	again := []<-chan Response{f.async(lease.Get, "r", "", lease.Ephemeral), f.async(lease.Get, "r", "", lease.Ephemeral)}
	<-f.queued
	<-f.queued
	p.c.Committed(f.backend.apply(p.rec))
	if r := <-unlock; r.Status != lease.Unlocked {
		t.Fatalf("unlock: %+v", r)
	}
	for _, ch := range again {
		if r := <-ch; r.Status != lease.LockDoesNotExist {
			t.Fatalf("Get after the release: %+v", r)
		}
	}
}

// TestMailboxCap: an actor with MaxPending requests in its mailbox answers
// the next MustRetry without sending it.
func TestMailboxCap(t *testing.T) {
	f := newFixture(t, 1, 100, func(c *Config) { c.MaxPending = 3 })
	f.blockActor()
	blocked := f.async(lease.TryLock, "block", "x", lease.Persistent)
	<-f.backend.proposeEntered // the only actor is busy: what follows waits in its mailbox
	gone, cancel := context.WithCancel(context.Background())
	cancel() // Do returns as soon as it has sent: the calls stay in the mailbox
	for i := range 3 {
		if _, err := f.ring.Do(gone, Request{Request: lease.Request{Op: lease.Get, Resource: fmt.Sprint("m-", i)}, Partition: 1}); err != context.Canceled {
			t.Fatalf("call %d: %v, want it sent and left", i, err)
		}
	}
	if r, err := f.ring.Do(gone, Request{Request: lease.Request{Op: lease.Get, Resource: "m-3"}, Partition: 1}); err != nil || r.Status != lease.MustRetry {
		t.Fatalf("fourth call with 3 in the mailbox: %+v, %v, want MustRetry unsent", r, err)
	}
	close(f.backend.proposeRelease)
	if r := <-blocked; r.Status != lease.Locked {
		t.Fatalf("blocked lock: %+v", r)
	}
	// Behind the three in the mailbox: answered once they are taken. The
	// blocked lock's completion is urgent and may be answered before the
	// actor has taken them, so until then a call is refused, as a client
	// that retries MustRetry sees it; each refusal is counted.
	refused := uint64(1)
	for deadline := time.Now().Add(10 * time.Second); ; {
		r := f.do(t, lease.Get, "after", "", 0, lease.Ephemeral)
		if r.Status == lease.MustRetry && time.Now().Before(deadline) {
			refused++
			time.Sleep(time.Millisecond)
			continue
		}
		if r.Status != lease.LockDoesNotExist {
			t.Fatalf("after the mailbox drained: %+v (%d calls pending)", r, f.ring.actors[0].pending.Load())
		}
		break
	}
	if s := f.ring.Stats(); s.Refused != refused {
		t.Fatalf("%+v, want %d refused", s, refused)
	}
	if n := f.ring.actors[0].pending.Load(); n != 0 {
		t.Fatalf("%d calls counted pending after the mailbox drained", n)
	}
}

// TestEndedWatchOfNeverLockedNameLeavesNoEntry: a watch takes an entry
// while it lasts, and gives it back when it ends if nothing was locked.
func TestEndedWatchOfNeverLockedNameLeavesNoEntry(t *testing.T) {
	f := newFixture(t, 1, 100)
	w, err := f.ring.Watch(context.Background(), Request{Request: lease.Request{Resource: "w"}, Partition: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if s := f.stats(t); s.Entries != 1 {
		t.Fatalf("%+v, want the watched entry", s)
	}
	w.Stop()
	f.sync(t, "w") // behind the unwatch
	if s := f.stats(t); s.Entries != 0 {
		t.Fatalf("%+v, want no entry after the watch ended", s)
	}
}

// restingExtra reports whether the slot of res still has its extra part
// after every message sent before has been handled (Held visits each
// actor after them).
func (f *fixture) restingExtra(t *testing.T, res string) bool {
	t.Helper()
	f.stats(t)
	for _, a := range f.ring.actors {
		if s := a.entries[res]; s != nil {
			return s.x != nil
		}
	}
	t.Fatalf("%s is not cached", res)
	return false
}

// A slot's extra part (a write in flight, waiters, a timer, watchers) is
// dropped once the lock is at rest again, so a held lock that had waiters,
// watchers or a write takes no more memory than one that never had.
func TestExtraDroppedAtRest(t *testing.T) {
	for _, d := range []lease.Durability{lease.Ephemeral, lease.Persistent} {
		t.Run(d.String(), func(t *testing.T) {
			f := newFixture(t, 1, 100)
			if r := f.do(t, lease.TryLock, "r", "a", time.Minute, d); r.Status != lease.Locked {
				t.Fatalf("lock: %+v", r)
			}
			if f.restingExtra(t, "r") {
				t.Fatal("a held lock keeps its extra part after its grant")
			}
			w := f.waitFor(t, context.Background(), "r", "b", time.Hour, d)
			if r := f.do(t, lease.Unlock, "r", "a", 0, d); r.Status != lease.Unlocked {
				t.Fatalf("unlock: %+v", r)
			}
			if r := <-w; r.Status != lease.Locked {
				t.Fatalf("waiter: %+v", r)
			}
			if f.restingExtra(t, "r") {
				t.Fatal("the lock handed to its waiter keeps its extra part")
			}
			watch, err := f.ring.Watch(context.Background(), Request{Request: lease.Request{Resource: "r", Durability: d}, Partition: 1}, 0)
			if err != nil {
				t.Fatal(err)
			}
			if !f.restingExtra(t, "r") {
				t.Fatal("a watched lock has no extra part")
			}
			watch.Stop()
			if f.restingExtra(t, "r") {
				t.Fatal("the lock keeps its extra part after its watch stopped")
			}
		})
	}
}
