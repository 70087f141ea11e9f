package actors

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// records is how many records the backend has applied.
func (b *fakeBackend) records() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.index
}

// renewedInMemory has a hold r from 0 s for a minute, renewed at 10 s
// (recorded: to 70 s) and at 50 s (in memory: to 110 s); it leaves the
// clock at 50 s.
func renewedInMemory(t *testing.T, f *fixture) {
	t.Helper()
	f.do(t, lease.TryLock, "r", "a", time.Minute, lease.Persistent)
	f.clock.Advance(10 * time.Second)
	f.do(t, lease.Extend, "r", "a", time.Minute, lease.Persistent)
	f.clock.Advance(40 * time.Second)
	if r := f.do(t, lease.Extend, "r", "a", time.Minute, lease.Persistent); r.Status != lease.Extended {
		t.Fatalf("extend: %v", r.Status)
	}
}

// expiresIn is how long from now the lease of res runs, as a Get reads it.
func (f *fixture) expiresIn(t *testing.T, res string) time.Duration {
	t.Helper()
	r := f.do(t, lease.Get, res, "", 0, lease.Persistent)
	if r.Status != lease.Got {
		t.Fatalf("get %s: %v", res, r.Status)
	}
	return r.Expires.Sub(f.clock.Now())
}

// A holder's first renewal of a persistent lock is recorded (it marks the
// record renewed); the later ones for no longer than the stored lease
// write no record and keep the revision; a longer one, and every other
// write, is recorded.
func TestRenewalKeptInMemory(t *testing.T) {
	f := newFixture(t, 1, 100)
	if r := f.do(t, lease.TryLock, "r", "a", time.Minute, lease.Persistent); r.Status != lease.Locked {
		t.Fatalf("lock: %v", r.Status)
	}
	granted := f.backend.records()
	f.do(t, lease.Extend, "r", "a", time.Minute, lease.Persistent)
	stored := f.backend.records()
	if rec, _, _ := f.backend.Load(1, "r"); stored != granted+1 || !rec.Renewed {
		t.Fatalf("the first renewal wrote %d records (renewed %v), want one marking the record renewed", stored-granted, rec.Renewed)
	}
	// Each after the one before, the 10 s one with 5 s left: none
	// shortens the lease.
	for _, c := range []struct{ after, ttl time.Duration }{{30 * time.Second, time.Minute}, {55 * time.Second, 10 * time.Second}, {time.Second, time.Minute}} {
		f.clock.Advance(c.after)
		if r := f.do(t, lease.Extend, "r", "a", c.ttl, lease.Persistent); r.Status != lease.Extended {
			t.Fatalf("extend %v: %v", c.ttl, r.Status)
		}
		if got := f.expiresIn(t, "r"); got != c.ttl {
			t.Fatalf("after an extend of %v the lease runs %v", c.ttl, got)
		}
	}
	if got := f.backend.records(); got != stored {
		t.Fatalf("%d records for renewals within the stored lease, want none", got-stored)
	}
	// One that shortens the lease (10 s with a minute left) is recorded.
	if r := f.do(t, lease.Extend, "r", "a", 10*time.Second, lease.Persistent); r.Status != lease.Extended {
		t.Fatalf("shortening extend: %v", r.Status)
	}
	if got := f.backend.records(); got != stored+1 {
		t.Fatalf("a shortening extend wrote %d records, want 1", got-stored)
	}
	stored++
	if r := f.do(t, lease.Extend, "r", "b", time.Minute, lease.Persistent); r.Status != lease.InvalidOwner {
		t.Fatalf("another owner's extend: %v", r.Status)
	}
	if r := f.do(t, lease.Extend, "r", "a", 2*time.Minute, lease.Persistent); r.Status != lease.Extended {
		t.Fatalf("longer extend: %v", r.Status)
	}
	if got := f.backend.records(); got != stored+1 {
		t.Fatalf("a longer lease wrote %d records, want 1", got-stored)
	}
	if r := f.do(t, lease.Unlock, "r", "a", 0, lease.Persistent); r.Status != lease.Unlocked {
		t.Fatalf("unlock: %v", r.Status)
	}
	if got := f.backend.records(); got != stored+2 {
		t.Fatalf("the release wrote %d records, want 1", got-stored-1)
	}
}

// A new reign loads a lease at least its stored TTL from the reign's
// start: a renewal a former leader kept in memory may have promised that
// long. Its negative control loads the stored expiry alone, and grants the
// lock while the renewed lease runs.
func TestRenewalFloorAfterLeaderChange(t *testing.T) {
	for _, control := range []bool{false, true} {
		f := newFixture(t, 1, 100, func(c *Config) { c.UnsafeNoRenewalFloor = control })
		start := f.clock.Now()
		renewedInMemory(t, f)
		// Another leader's reign (the renewal is lost with the old one's
		// memory), past the stored expiry, inside the renewed lease.
		if err := f.ring.DropPartition(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
		f.term.Store(2)
		f.clock.Advance(30 * time.Second)
		reign := f.clock.Now()
		r := f.do(t, lease.TryLock, "r", "b", time.Minute, lease.Persistent)
		if control {
			if r.Status != lease.Locked {
				t.Fatalf("control: %v, want b granted inside a's renewed lease (the control broken)", r.Status)
			}
			continue
		}
		if r.Status != lease.Busy {
			t.Fatalf("b at %v: %v, want Busy: a's renewal runs to %v", f.clock.Now().Sub(start), r.Status, 110*time.Second)
		}
		if got, want := f.expiresIn(t, "r"), reign.Add(time.Minute).Sub(f.clock.Now()); got != want {
			t.Fatalf("the loaded lease runs %v, want a full TTL from the reign (%v)", got, want)
		}
		f.clock.Advance(time.Minute + time.Millisecond)
		if r := f.do(t, lease.TryLock, "r", "b", time.Minute, lease.Persistent); r.Status != lease.Locked || r.Token != 1 {
			t.Fatalf("b after the floor: %v token %d", r.Status, r.Token)
		}
	}
}

// An entry renewed in memory and dropped from the cache within the reign
// (a write of it whose outcome is unknown) leaves its lease behind for the
// reload: the stored expiry and the reign's floor are both older.
func TestRenewalKeptAcrossAReload(t *testing.T) {
	f := newFixture(t, 1, 100)
	renewedInMemory(t, f)
	f.holdWrites(t, "r")
	unlock := f.doAsync(Request{Request: lease.Request{Op: lease.Unlock, Resource: "r", Owner: []byte("a"), Durability: lease.Persistent}, Partition: 1})
	p := <-f.backend.held
	p.c.Committed(0, errors.New("lost on the way")) // outcome unknown: the entry is dropped
	if r := answer(t, unlock); r.Status != lease.Errored {
		t.Fatalf("unlock: %v, want Errored", r.Status)
	}
	f.backend.setHold("r", false)
	f.clock.Advance(30 * time.Second) // 80 s: past the stored expiry and the reign's floor
	if r := f.do(t, lease.TryLock, "r", "b", time.Minute, lease.Persistent); r.Status != lease.Busy {
		t.Fatalf("b inside a's renewed lease: %v, want Busy", r.Status)
	}
	f.clock.Advance(30*time.Second + time.Millisecond) // past 110 s
	if r := f.do(t, lease.TryLock, "r", "b", time.Minute, lease.Persistent); r.Status != lease.Locked {
		t.Fatalf("b after a's renewed lease: %v", r.Status)
	}
}

// longerExtend is owner's Extend of a persistent res for two minutes:
// longer than the fixtures' one-minute grants, so it is recorded.
func longerExtend(res, owner string) Request {
	return Request{Request: lease.Request{Op: lease.Extend, Resource: res, Owner: []byte(owner), TTL: 2 * time.Minute, Durability: lease.Persistent}, Partition: 1}
}

// A renewal kept in memory is told to watchers as Extended, with the new
// expiry and the revision left as it was.
func TestRenewalKeptInMemoryIsWatched(t *testing.T) {
	f, w, _ := watchedHolder(t) // a holds r for a minute, at revision 1
	f.do(t, lease.Extend, "r", "a", time.Minute, lease.Persistent)
	expect(t, next(t, w), Extended, "a", 0, 2) // the first renewal: recorded
	f.clock.Advance(10 * time.Second)
	if r := f.do(t, lease.Extend, "r", "a", time.Minute, lease.Persistent); r.Status != lease.Extended {
		t.Fatalf("extend: %v", r.Status)
	}
	ev := next(t, w)
	expect(t, ev, Extended, "a", 0, 2)
	if !ev.Expires.Equal(f.clock.Now().Add(time.Minute)) {
		t.Fatalf("event expires %v after now, want a minute", ev.Expires.Sub(f.clock.Now()))
	}
}

// A lock never renewed keeps its stored expiry across a reign: no floor,
// so a holder that died frees it when its lease ends, as before.
func TestUnrenewedLockHasNoFloor(t *testing.T) {
	f := newFixture(t, 1, 100)
	f.do(t, lease.TryLock, "r", "a", time.Minute, lease.Persistent)
	f.clock.Advance(30 * time.Second)
	if err := f.ring.DropPartition(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	f.term.Store(2)
	if got := f.expiresIn(t, "r"); got != 30*time.Second {
		t.Fatalf("loaded in the new reign, the lease runs %v, want its stored 30s", got)
	}
	f.clock.Advance(30*time.Second + time.Millisecond)
	if r := f.do(t, lease.TryLock, "r", "b", time.Minute, lease.Persistent); r.Status != lease.Locked {
		t.Fatalf("b after a's stored lease: %v", r.Status)
	}
}

// A read that completes while the partition is not served for a moment
// (its leader lease lapsing within the term) is not taken: its calls are
// answered MustRetry, and once serving resumes the record is read again
// and given its renewal floor, so a renewal a former leader kept in
// memory still holds.
func TestRenewalFloorForALoadWhileNotServing(t *testing.T) {
	f := newFixture(t, 1, 100)
	renewedInMemory(t, f)
	if err := f.ring.DropPartition(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	f.term.Store(2)
	f.clock.Advance(30 * time.Second) // 80 s: past the stored expiry
	f.blockLoads("r")
	waiting := f.async(lease.Get, "r", "", lease.Persistent)
	<-f.backend.loadEntered
	f.serving[1].Store(false)
	f.backend.blockLoad = ""
	close(f.backend.loadRelease)
	if r := <-waiting; r.Status != lease.MustRetry {
		t.Fatalf("a read completed while not serving: %+v, want MustRetry", r)
	}
	f.serving[1].Store(true)
	if r := f.do(t, lease.TryLock, "r", "b", time.Minute, lease.Persistent); r.Status != lease.Busy {
		t.Fatalf("b inside a's renewed lease once serving resumes: %v, want Busy", r.Status)
	}
}

// Within a reign a lease never ends before its renewal floor (every
// recorded renewal ends later than the floor it gives, and one that would
// end the lease earlier is recorded), so an entry evicted once its lease
// ended and read again does not come back held: a Get that saw the lock
// free never sees its old holder again.
func TestRenewalFloorDoesNotReviveAnEndedLease(t *testing.T) {
	f := newFixture(t, 1, 100, func(c *Config) { c.MaxEntries = 1 })
	renewedInMemory(t, f) // 50 s, to 110 s
	if err := f.ring.DropPartition(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	f.term.Store(2) // a reign from 50 s: the floor is 110 s
	if got := f.expiresIn(t, "r"); got != time.Minute {
		t.Fatalf("loaded in the new reign, the lease runs %v, want a minute", got)
	}
	if r := f.do(t, lease.Extend, "r", "a", 10*time.Second, lease.Persistent); r.Status != lease.Extended {
		t.Fatalf("extend: %v", r.Status)
	}
	f.clock.Advance(11 * time.Second) // 61 s: the lease ended at 60 s
	free := f.do(t, lease.Get, "r", "", 0, lease.Persistent)
	if free.Status == lease.Got && string(free.Owner) == "a" {
		t.Fatalf("after its lease ended: %+v", free)
	}
	// Another name takes the actor's only entry: r, lapsed, is evicted.
	if r := f.do(t, lease.TryLock, "x", "c", time.Minute, lease.Ephemeral); r.Status != lease.Locked {
		t.Fatalf("x: %v", r.Status)
	}
	f.do(t, lease.Unlock, "x", "c", 0, lease.Ephemeral)
	if again := f.do(t, lease.Get, "r", "", 0, lease.Persistent); again.Status != free.Status || string(again.Owner) != string(free.Owner) {
		t.Fatalf("read again after its eviction: %+v, want as before it (%+v)", again, free)
	}
}
