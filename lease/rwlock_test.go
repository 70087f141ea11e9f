package lease

import (
	"strings"
	"testing"
	"time"
)

func rwReq(op Op, owner string, shared bool) *Request {
	return &Request{Op: op, Resource: RWLockPrefix + "index", Owner: []byte(owner), TTL: time.Second,
		Durability: Persistent, Shared: shared}
}

// Readers share the epoch of the last write; every write takes the next.
func TestRWLockEpochs(t *testing.T) {
	now := time.Unix(1000, 0)
	e := Entry{Token: 5} // Absent, the partition's floor 5
	r1 := apply(t, &e, rwReq(TryLock, "r1", true), now)
	r2 := apply(t, &e, rwReq(TryLock, "r2", true), now)
	if r1.Status != Locked || r2.Status != Locked || r1.Token != 5 || r2.Token != 5 {
		t.Fatalf("two readers: %+v %+v, want both Locked at epoch 5", r1, r2)
	}
	if w := apply(t, &e, rwReq(TryLock, "w", false), now); w.Status != Busy {
		t.Fatalf("writer while readers hold: %v, want Busy", w.Status)
	}
	apply(t, &e, rwReq(Unlock, "r1", false), now)
	apply(t, &e, rwReq(Unlock, "r2", false), now)
	w := apply(t, &e, rwReq(TryLock, "w", false), now)
	if w.Status != Locked || w.Token != 6 || !e.Exclusive {
		t.Fatalf("writer: %+v, want Locked at epoch 6", w)
	}
	if r := apply(t, &e, rwReq(TryLock, "r3", true), now); r.Status != Busy {
		t.Fatalf("reader while the writer holds: %v, want Busy", r.Status)
	}
	if w2 := apply(t, &e, rwReq(TryLock, "w2", false), now); w2.Status != Busy {
		t.Fatalf("second writer: %v, want Busy", w2.Status)
	}
	apply(t, &e, rwReq(Unlock, "w", false), now)
	if r := apply(t, &e, rwReq(TryLock, "r3", true), now); r.Status != Locked || r.Token != 6 {
		t.Fatalf("reader after the write: %+v, want epoch 6", r)
	}
	apply(t, &e, rwReq(Unlock, "r3", false), now)
	if w := apply(t, &e, rwReq(TryLock, "w2", false), now); w.Token != 7 {
		t.Fatalf("next writer: %+v, want epoch 7", w)
	}
}

// A lapsed writer's lock is taken by the next writer with the next epoch,
// and the lapsed one can no longer extend it.
func TestRWLockLapsedWriter(t *testing.T) {
	now := time.Unix(1000, 0)
	var e Entry
	apply(t, &e, rwReq(TryLock, "w1", false), now)
	later := now.Add(time.Second + time.Nanosecond)
	if r := apply(t, &e, rwReq(TryLock, "r", true), later); r.Status != Locked || r.Token != 0 {
		t.Fatalf("reader after the writer lapsed: %+v, want epoch 0", r)
	}
	if d := apply(t, &e, rwReq(Extend, "w1", false), later); d.Status != LockDoesNotExist {
		t.Fatalf("the lapsed writer extends: %v", d.Status)
	}
	if d := apply(t, &e, rwReq(Unlock, "w1", false), later); d.Status != LockDoesNotExist || len(e.Slots) != 1 {
		t.Fatalf("the lapsed writer unlocks after its slot went: %v (%d holders)", d.Status, len(e.Slots))
	}
}

func TestRWLockSameOwnerAndUpgrade(t *testing.T) {
	now := time.Unix(1000, 0)
	var e Entry
	apply(t, &e, rwReq(TryLock, "a", true), now)
	if d := apply(t, &e, rwReq(TryLock, "a", true), now); d.Status != Locked || d.Write {
		t.Fatalf("reader again: %+v, want its grant, nothing written", d)
	}
	if d := apply(t, &e, rwReq(TryLock, "a", false), now); d.Status != InvalidInput || !strings.Contains(d.Reason, "holds a read lock") {
		t.Fatalf("upgrade: %+v, want InvalidInput", d)
	}
	apply(t, &e, rwReq(Unlock, "a", false), now)
	apply(t, &e, rwReq(TryLock, "a", false), now)
	if d := apply(t, &e, rwReq(TryLock, "a", true), now); d.Status != InvalidInput || !strings.Contains(d.Reason, "holds the write lock") {
		t.Fatalf("read by the writer: %+v, want InvalidInput", d)
	}
	if d := apply(t, &e, rwReq(Extend, "a", false), now.Add(time.Millisecond)); d.Status != Extended {
		t.Fatalf("writer extends: %+v", d)
	}
}

func TestRWLockManyReadersAndTheLimit(t *testing.T) {
	now := time.Unix(1000, 0)
	var e Entry
	for i := range MaxReaders {
		if d := apply(t, &e, rwReq(TryLock, "r"+strings.Repeat("x", i%7)+string(rune('A'+i%26))+string(rune('a'+i/26)), true), now); d.Status != Locked {
			t.Fatalf("reader %d: %v", i, d.Status)
		}
	}
	if d := apply(t, &e, rwReq(TryLock, "one-more", true), now); d.Status != Busy {
		t.Fatalf("reader past MaxReaders: %v, want Busy", d.Status)
	}
}

func TestCheckRWLockRequests(t *testing.T) {
	ok := *rwReq(TryLock, "a", true)
	cases := []struct {
		name string
		edit func(*Request)
		want string
	}{
		{"read", func(*Request) {}, ""},
		{"write, as Kahuna's TryLock", func(r *Request) { r.Shared = false }, ""},
		{"ephemeral", func(r *Request) { r.Durability = Ephemeral }, "persistent"},
		{"get", func(r *Request) { r.Op, r.Shared = Get, false }, ""},
		{"get naming ephemeral", func(r *Request) { r.Op, r.Shared, r.Durability = Get, false, Ephemeral }, ""},
		{"shared extend", func(r *Request) { r.Op = Extend }, "not Extend"},
		{"shared on a lock", func(r *Request) { r.Resource = "plain" }, "shared is for read/write locks"},
		{"permits", func(r *Request) { r.Permits, r.Limit = 1, 1 }, "permits and limit are for semaphores"},
		{"empty name", func(r *Request) { r.Resource = RWLockPrefix }, "name is empty"},
	}
	for _, c := range cases {
		r := ok
		c.edit(&r)
		_, reason := r.Check()
		if (c.want == "") != (reason == "") || !strings.Contains(reason, c.want) {
			t.Errorf("%s: reason %q, want %q", c.name, reason, c.want)
		}
	}
}
