package actors

import (
	"context"
	"testing"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// stored returns the stored record's index of res, and whether one is stored.
func (f *fixture) stored(res string) (uint64, bool) {
	f.backend.mu.Lock()
	defer f.backend.mu.Unlock()
	r, ok := f.backend.store[res]
	return r.Index, ok
}

func (f *fixture) forget(t *testing.T, res string, index uint64) bool {
	t.Helper()
	ok, err := f.ring.Forget(context.Background(), 1, res, index)
	if err != nil {
		t.Fatalf("Forget %s: %v", res, err)
	}
	return ok
}

// A released record is removed, and the name's next grant still gets a
// larger token than any it had (the floor), from a cached entry or not.
func TestForgetKeepsTokensGrowing(t *testing.T) {
	for _, cached := range []bool{true, false} {
		f := newFixture(t, 2, 100)
		for i := range 3 {
			if r := f.do(t, lease.TryLock, "r", "a", time.Minute, lease.Persistent); r.Status != lease.Locked || r.Token != int64(i) {
				t.Fatalf("grant %d: %+v", i, r)
			}
			f.do(t, lease.Unlock, "r", "a", 0, lease.Persistent)
		}
		if !cached {
			f.ring.DropPartition(context.Background(), 1)
		}
		idx, _ := f.stored("r")
		if !f.forget(t, "r", idx) {
			t.Fatalf("cached %v: the released record was not removed", cached)
		}
		if _, ok := f.stored("r"); ok {
			t.Fatalf("cached %v: the record is still stored", cached)
		}
		if r := f.do(t, lease.Get, "r", "", 0, lease.Persistent); r.Status != lease.LockDoesNotExist {
			t.Fatalf("Get after removal: %+v", r)
		}
		if r := f.do(t, lease.TryLock, "r", "b", time.Minute, lease.Persistent); r.Status != lease.Locked || r.Token != 3 {
			t.Fatalf("cached %v: grant after removal: %+v, want Locked token 3", cached, r)
		}
	}
}

// A record that is not free, or not the one the sweep saw, stays.
func TestForgetRefusesWhatIsNotFree(t *testing.T) {
	f := newFixture(t, 2, 100)
	f.do(t, lease.TryLock, "held", "a", time.Minute, lease.Persistent)
	idx, _ := f.stored("held")
	if f.forget(t, "held", idx) {
		t.Error("a live holder's record was removed")
	}

	f.do(t, lease.TryLock, "moved", "a", time.Minute, lease.Persistent)
	old, _ := f.stored("moved")
	f.do(t, lease.Unlock, "moved", "a", 0, lease.Persistent)
	if f.forget(t, "moved", old) {
		t.Error("a record that moved on since the sweep saw it was removed")
	}

	// An ephemeral grant moved the entry on from the stored record.
	f.do(t, lease.TryLock, "mixed", "a", time.Minute, lease.Persistent)
	f.do(t, lease.Unlock, "mixed", "a", 0, lease.Persistent)
	f.do(t, lease.TryLock, "mixed", "b", time.Minute, lease.Ephemeral)
	idx, _ = f.stored("mixed")
	if f.forget(t, "mixed", idx) {
		t.Error("a record under an ephemeral holder was removed")
	}

	if f.forget(t, "never", 0) {
		t.Error("Forget of a name never locked reported a removal")
	}
	for _, res := range []string{"held", "moved", "mixed"} {
		if _, ok := f.stored(res); !ok {
			t.Errorf("%s: record gone", res)
		}
	}
}

// An expired holder's record is free: removed, and the late holder's
// Unlock finds nothing.
func TestForgetExpired(t *testing.T) {
	f := newFixture(t, 2, 100)
	f.do(t, lease.TryLock, "r", "a", time.Second, lease.Persistent)
	f.clock.Advance(2 * time.Second)
	idx, _ := f.stored("r")
	if !f.forget(t, "r", idx) {
		t.Fatal("an expired holder's record was not removed")
	}
	if r := f.do(t, lease.Unlock, "r", "a", 0, lease.Persistent); r.Status != lease.LockDoesNotExist {
		t.Fatalf("late Unlock: %+v", r)
	}
	if r := f.do(t, lease.TryLock, "r", "b", time.Minute, lease.Persistent); r.Token != 1 {
		t.Fatalf("grant after removal: %+v, want token 1", r)
	}
}

// Requests that arrive while a removal is in flight wait for it, and are
// decided on the floor.
func TestForgetInFlightQueuesRequests(t *testing.T) {
	f := newFixture(t, 2, 100)
	f.do(t, lease.TryLock, "r", "a", time.Minute, lease.Persistent)
	f.do(t, lease.Unlock, "r", "a", 0, lease.Persistent)
	idx, _ := f.stored("r")
	f.backend.setHold("r", true)
	done := make(chan bool, 1)
	go func() {
		ok, _ := f.ring.Forget(context.Background(), 1, "r", idx)
		done <- ok
	}()
	p := <-f.backend.held
	if !p.rec.Remove {
		t.Fatalf("held record %+v is not a removal", p.rec)
	}
	grant := f.async(lease.TryLock, "r", "b", lease.Persistent)
	if got := <-f.queued; got != "r" {
		t.Fatalf("queued %q", got)
	}
	f.backend.setHold("r", false)
	p.c.Committed(f.backend.apply(p.rec))
	if !<-done {
		t.Fatal("removal not reported")
	}
	if r := <-grant; r.Status != lease.Locked || r.Token != 1 {
		t.Fatalf("grant queued behind the removal: %+v, want Locked token 1", r)
	}
}
