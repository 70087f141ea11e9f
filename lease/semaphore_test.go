package lease

import (
	"strings"
	"testing"
	"time"
)

func semReq(op Op, owner string, n, limit int) *Request {
	return &Request{Op: op, Resource: SemaphorePrefix + "pool", Owner: []byte(owner), TTL: time.Second,
		Durability: Persistent, Permits: n, Limit: limit}
}

// apply decides r on *e and, for a write, moves *e on, as the actor does.
func apply(t *testing.T, e *Entry, r *Request, now time.Time) Decision {
	t.Helper()
	d := DecideRequest(*e, r, now)
	if d.Write {
		*e = d.Next
	}
	return d
}

func TestPermitsGrantSlotsWithTheirOwnGenerations(t *testing.T) {
	now := time.Unix(1000, 0)
	var e Entry
	a := apply(t, &e, semReq(TryLock, "a", 2, 3), now)
	if a.Status != Locked || len(a.Grants) != 2 || a.Grants[0] != (Grant{0, 1}) || a.Grants[1] != (Grant{1, 1}) || a.Free != 1 {
		t.Fatalf("first grant = %+v, want slots 0 and 1 with token 1, one permit left free", a)
	}
	if b := apply(t, &e, semReq(TryLock, "b", 2, 3), now); b.Status != Busy {
		t.Fatalf("2 permits with 1 free = %v, want Busy", b.Status)
	}
	c := apply(t, &e, semReq(TryLock, "c", 1, 3), now)
	if c.Status != Locked || c.Grants[0] != (Grant{2, 1}) || c.Free != 0 {
		t.Fatalf("last permit = %+v, want slot 2 token 1, none left free", c)
	}
	if u := apply(t, &e, semReq(Unlock, "a", 0, 0), now); u.Status != Unlocked {
		t.Fatalf("unlock a = %v", u.Status)
	}
	// Slots 0 and 1 are granted again with their generation bumped.
	b := apply(t, &e, semReq(TryLock, "b", 2, 3), now)
	if b.Status != Locked || b.Grants[0] != (Grant{0, 2}) || b.Grants[1] != (Grant{1, 2}) {
		t.Fatalf("regrant = %+v, want slots 0 and 1 with token 2", b)
	}
	if e.Token != 2 || e.State != Held || e.Limit != 3 {
		t.Fatalf("entry = %+v, want token 2 (the highest), held, limit 3", e)
	}
}

func TestPermitsOfALapsedHolderAreGrantedAgainAbove(t *testing.T) {
	now := time.Unix(1000, 0)
	var e Entry
	apply(t, &e, semReq(TryLock, "a", 1, 1), now)
	if d := apply(t, &e, semReq(TryLock, "b", 1, 1), now.Add(time.Second)); d.Status != Busy {
		t.Fatalf("at its expiry instant the permit is live: %v, want Busy", d.Status)
	}
	later := now.Add(time.Second + time.Nanosecond)
	if d := apply(t, &e, semReq(Extend, "a", 0, 0), later); d.Status != LockDoesNotExist {
		t.Fatalf("extend of a lapsed permit = %v, want LockDoesNotExist", d.Status)
	}
	d := apply(t, &e, semReq(TryLock, "b", 1, 1), later)
	if d.Status != Locked || d.Token != 2 {
		t.Fatalf("grant after lapse = %+v, want token 2", d)
	}
	if d := apply(t, &e, semReq(Unlock, "a", 0, 0), later); d.Status != LockDoesNotExist {
		t.Fatalf("unlock by the lapsed holder after a regrant = %v, want LockDoesNotExist", d.Status)
	}
}

func TestPermitsSameOwnerGetsItsGrantBack(t *testing.T) {
	now := time.Unix(1000, 0)
	var e Entry
	first := apply(t, &e, semReq(TryLock, "a", 2, 4), now)
	again := apply(t, &e, semReq(TryLock, "a", 2, 4), now.Add(time.Millisecond))
	if again.Status != Locked || again.Write || len(again.Grants) != 2 || again.Grants[1] != first.Grants[1] || again.Free != 2 {
		t.Fatalf("retry = %+v, want the same grants, nothing written, two of four left free", again)
	}
	if d := apply(t, &e, semReq(TryLock, "a", 3, 4), now); d.Status != InvalidInput || !strings.Contains(d.Reason, "holds 2") {
		t.Fatalf("another count by the holder = %+v, want InvalidInput naming what it holds", d)
	}
}

func TestPermitsLimitIsTheServers(t *testing.T) {
	now := time.Unix(1000, 0)
	var e Entry
	apply(t, &e, semReq(TryLock, "a", 1, 3), now)
	before := e
	d := apply(t, &e, semReq(TryLock, "b", 1, 5), now)
	if d.Status != InvalidInput || d.Write || !strings.Contains(d.Reason, "limit is 3") || !strings.Contains(d.Reason, "states 5") {
		t.Fatalf("other limit = %+v, want InvalidInput naming both", d)
	}
	if e.Revision != before.Revision {
		t.Fatal("a refused request changed the entry")
	}
}

func TestPermitsExtendAndUnlockEveryPermitOfTheOwner(t *testing.T) {
	now := time.Unix(1000, 0)
	var e Entry
	apply(t, &e, semReq(TryLock, "a", 2, 3), now)
	apply(t, &e, semReq(TryLock, "b", 1, 3), now)
	r := semReq(Extend, "a", 0, 0)
	r.TTL = time.Hour
	d := apply(t, &e, r, now.Add(time.Millisecond))
	if d.Status != Extended || len(d.Grants) != 2 || !e.Slots[0].Expires.Equal(now.Add(time.Millisecond+time.Hour)) ||
		!e.Slots[1].Expires.Equal(e.Slots[0].Expires) || e.Slots[2].Expires.After(now.Add(time.Second)) {
		t.Fatalf("extend = %+v, slots %+v", d, e.Slots)
	}
	if !e.Expires.Equal(e.Slots[0].Expires) {
		t.Fatalf("entry expires %v, want the latest permit's %v", e.Expires, e.Slots[0].Expires)
	}
	if at, ok := e.NextLapse(now); !ok || !at.Equal(now.Add(time.Second)) {
		t.Fatalf("next lapse = %v %v, want b's expiry", at, ok)
	}
	if d := apply(t, &e, semReq(Unlock, "a", 0, 0), now); d.Status != Unlocked || e.Slots[0].Owner != nil || e.Slots[1].Owner != nil || e.State != Held {
		t.Fatalf("unlock a = %v, entry %+v: want a's two slots free, b's held", d.Status, e)
	}
	apply(t, &e, semReq(Unlock, "b", 0, 0), now)
	if e.State != Released || e.Token != 1 {
		t.Fatalf("all released: entry %+v, want Released keeping token 1", e)
	}
}

func TestPermitsStartAboveTheFloor(t *testing.T) {
	now := time.Unix(1000, 0)
	e := Entry{Token: 40} // Absent: the partition's token floor
	d := apply(t, &e, semReq(TryLock, "a", 1, 2), now)
	if d.Token != 40 {
		t.Fatalf("first permit token = %d, want the floor 40", d.Token)
	}
	e.Floor = 90 // ephemeral grants this entry does not know of
	d = apply(t, &e, semReq(TryLock, "b", 1, 2), now)
	if d.Token != 90 {
		t.Fatalf("token with a floor of 90 = %d", d.Token)
	}
}

func TestPermitsDecisionLeavesTheCachedSlotsAlone(t *testing.T) {
	now := time.Unix(1000, 0)
	var e Entry
	apply(t, &e, semReq(TryLock, "a", 1, 2), now)
	snapshot := append([]Slot(nil), e.Slots...)
	DecideRequest(e, semReq(TryLock, "b", 1, 2), now) // not applied (a write in flight)
	DecideRequest(e, semReq(Unlock, "a", 0, 0), now)  // nor this
	DecideRequest(e, semReq(Extend, "a", 0, 0), now.Add(time.Millisecond))
	for i := range snapshot {
		if string(e.Slots[i].Owner) != string(snapshot[i].Owner) || e.Slots[i].Expires != snapshot[i].Expires {
			t.Fatalf("slot %d changed by an unapplied decision: %+v", i, e.Slots[i])
		}
	}
}

func TestPermitsALiveLockOfTheNameIsBusy(t *testing.T) {
	now := time.Unix(1000, 0)
	e := Entry{State: Held, Owner: []byte("old"), Expires: now.Add(time.Second), Token: 7}
	if d := DecideRequest(e, semReq(TryLock, "a", 1, 2), now); d.Status != Busy {
		t.Fatalf("permit on a live lock's entry = %v, want Busy", d.Status)
	}
}

func TestCheckSemaphoreRequests(t *testing.T) {
	ok := *semReq(TryLock, "a", 1, 3)
	cases := []struct {
		name string
		edit func(*Request)
		want string // "" = valid
	}{
		{"valid", func(*Request) {}, ""},
		{"ephemeral", func(r *Request) { r.Durability = Ephemeral }, "persistent"},
		{"no limit", func(r *Request) { r.Limit = 0 }, "limit 0 is outside 1..256"},
		{"limit too big", func(r *Request) { r.Limit = MaxPermits + 1 }, "limit 257"},
		{"no permits", func(r *Request) { r.Permits = 0 }, "permits 0 is outside 1..3"},
		{"more permits than the limit", func(r *Request) { r.Permits = 4 }, "permits 4"},
		{"get", func(r *Request) { r.Op, r.Permits, r.Limit = Get, 0, 0 }, ""},
		{"get naming ephemeral", func(r *Request) { r.Op, r.Permits, r.Limit, r.Durability = Get, 0, 0, Ephemeral }, ""},
		{"extend with permits", func(r *Request) { r.Op = Extend }, "not Extend"},
		{"extend", func(r *Request) { r.Op, r.Permits, r.Limit = Extend, 0, 0 }, ""},
		{"unlock", func(r *Request) { r.Op, r.Permits, r.Limit, r.TTL = Unlock, 0, 0, 0 }, ""},
		{"empty name", func(r *Request) { r.Resource = SemaphorePrefix }, "semaphore name is empty"},
		{"lock with permits", func(r *Request) { r.Resource = "plain" }, "permits and limit are for semaphores"},
		{"kahuna lock call on a semaphore", func(r *Request) { r.Permits, r.Limit = 0, 0 }, "a semaphore's: a lock call cannot take it"},
		{"permits without a limit", func(r *Request) { r.Limit = 0 }, "limit 0 is outside"},
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

func TestPermitsOfOwnersTooLongForTheRecordAreRefused(t *testing.T) {
	now := time.Unix(1000, 0)
	var e Entry
	owner := strings.Repeat("o", MaxOwnerBytes)
	for i := range 100 {
		r := semReq(TryLock, owner[:MaxOwnerBytes-i], 1, 100)
		rev := e.Revision
		d := apply(t, &e, r, now)
		if d.Status == InvalidInput {
			// 100 slots take 2,400 bytes; each 1 KiB owner about 1 KiB more.
			if i < 40 || !strings.Contains(d.Reason, "over the limit of 49152") || e.Revision != rev {
				t.Fatalf("grant %d refused with %q (revision %d, was %d)", i, d.Reason, e.Revision, rev)
			}
			return
		}
		if d.Status != Locked {
			t.Fatalf("grant %d = %v", i, d.Status)
		}
	}
	t.Fatal("100 permits of 1 KiB owners were granted: the record would not fit")
}

func resizeReq(limit int) *Request {
	r := semReq(TryLock, "admin", 0, limit)
	r.Resize = true
	return r
}

// Growing adds free slots; shrinking grants nothing on the slots above the
// new limit and revokes no live permit: those count against the new limit
// until they end. Slots are kept, so a slot's generation only rises.
func TestPermitsResize(t *testing.T) {
	now := time.Unix(1000, 0)
	var e Entry
	apply(t, &e, semReq(TryLock, "a", 2, 2), now)
	if d := apply(t, &e, resizeReq(3), now); d.Status != Extended || !d.Write || d.Free != 1 || e.Limit != 3 || len(e.Slots) != 3 {
		t.Fatalf("grow to 3 = %+v, entry limit %d slots %d; want Extended, one free, three slots", d, e.Limit, len(e.Slots))
	}
	if d := apply(t, &e, semReq(TryLock, "b", 1, 2), now); d.Status != InvalidInput || !strings.Contains(d.Reason, "limit is 3; this request states 2") {
		t.Fatalf("the old limit after a resize = %+v, want InvalidInput naming both", d)
	}
	c := apply(t, &e, semReq(TryLock, "c", 1, 3), now)
	if c.Status != Locked || c.Grants[0].Slot != 2 || c.Free != 0 {
		t.Fatalf("the grown slot = %+v", c)
	}
	// Shrink to 1 with three permits live: nothing is revoked, nothing
	// is free until two of them end.
	if d := apply(t, &e, resizeReq(1), now); d.Status != Extended || d.Free != 0 || e.Limit != 1 || len(e.Slots) != 3 || e.State != Held {
		t.Fatalf("shrink to 1 = %+v, entry %+v; want every permit kept, none free", d, e)
	}
	apply(t, &e, semReq(Unlock, "a", 0, 0), now) // frees slots 0 and 1: slot 2 (c) still counts
	if d := apply(t, &e, semReq(TryLock, "d", 1, 1), now); d.Status != Busy {
		t.Fatalf("a permit of 1 while c holds slot 2 = %+v, want Busy", d)
	}
	apply(t, &e, semReq(Unlock, "c", 0, 0), now)
	d := apply(t, &e, semReq(TryLock, "d", 1, 1), now)
	if d.Status != Locked || d.Grants[0] != (Grant{0, 2}) || d.Free != 0 {
		t.Fatalf("the permit of 1 = %+v, want slot 0 at its second generation", d)
	}
	// Growing again reuses the kept slots: slot 2 goes on from c's token.
	apply(t, &e, resizeReq(3), now)
	g := apply(t, &e, semReq(TryLock, "g", 2, 3), now)
	if g.Status != Locked || g.Grants[0] != (Grant{1, 2}) || g.Grants[1] != (Grant{2, c.Grants[0].Token + 1}) {
		t.Fatalf("after growing again = %+v, want slots 1 and 2 one generation up", g)
	}
}

// A resize of a free name makes a semaphore of that many free permits,
// whose first grants start at the name's floor; a live lock of the name
// (stored before names were kinds) is Busy.
func TestPermitsResizeOfAFreeName(t *testing.T) {
	now := time.Unix(1000, 0)
	e := Entry{Token: 40} // Absent: the least token its first grant may take
	if d := apply(t, &e, resizeReq(2), now); d.Status != Extended || d.Free != 2 || e.Limit != 2 || e.State == Held {
		t.Fatalf("resize of a free name = %+v, entry %+v", d, e)
	}
	if d := apply(t, &e, semReq(TryLock, "a", 2, 2), now); d.Status != Locked || d.Grants[0].Token < 40 || d.Grants[1].Token < 40 {
		t.Fatalf("first grants = %+v, want tokens at or above the floor 40", d)
	}
	lock := Entry{State: Held, Owner: []byte("x"), Expires: now.Add(time.Minute), Token: 3}
	if d := DecideRequest(lock, resizeReq(2), now); d.Status != Busy {
		t.Fatalf("resize of a live lock = %+v, want Busy", d)
	}
}

func TestCheckResize(t *testing.T) {
	for _, c := range []struct {
		mod  func(*Request)
		want string
	}{
		{func(r *Request) {}, ""},
		{func(r *Request) { r.Limit = 0 }, "limit 0 is outside"},
		{func(r *Request) { r.Limit = MaxPermits + 1 }, "outside 1..256"},
		{func(r *Request) { r.Permits = 1 }, "takes no permits"},
		{func(r *Request) { r.Wait = time.Second }, "does not wait"},
		{func(r *Request) { r.Op = Extend }, "a request of its own"},
		{func(r *Request) { r.Durability = Ephemeral }, "persistent"},
		{func(r *Request) { r.Resource = "plain" }, "for semaphores"},
	} {
		r := resizeReq(4)
		c.mod(r)
		_, why := r.Check()
		if (c.want == "") != (why == "") || !strings.Contains(why, c.want) {
			t.Errorf("%+v: %q, want %q", r, why, c.want)
		}
	}
}

// Get of a semaphore or a read/write lock is Got while one holder is
// live, with the highest token granted (a read/write lock's write epoch),
// and LockDoesNotExist once the last holder's lease has ended.
func TestGetOfSharedKinds(t *testing.T) {
	now := time.Unix(1000, 0)
	var sem Entry
	if d := apply(t, &sem, semReq(Get, "", 0, 0), now); d.Status != LockDoesNotExist {
		t.Fatalf("get of a semaphore never used = %v", d.Status)
	}
	apply(t, &sem, semReq(TryLock, "a", 1, 3), now)
	apply(t, &sem, semReq(Unlock, "a", 0, 0), now)
	apply(t, &sem, semReq(TryLock, "b", 2, 3), now)
	apply(t, &sem, semReq(TryLock, "c", 1, 3), now.Add(time.Second/2))
	if d := apply(t, &sem, semReq(Get, "", 0, 0), now); d.Status != Got || d.Token != 2 {
		t.Fatalf("get = %+v, want Got with token 2 (slot 0's second grant)", d)
	}
	if hs := HoldersOf(&sem, now); len(hs) != 3 {
		t.Fatalf("holders %+v, want b's two permits and c's", hs)
	}
	if at, ok := sem.LastLapse(now); !ok || !at.Equal(now.Add(3*time.Second/2)) {
		t.Fatalf("last lapse %v %v, want c's expiry", at, ok)
	}
	if d := apply(t, &sem, semReq(Get, "", 0, 0), now.Add(time.Second+time.Nanosecond)); d.Status != Got {
		t.Fatalf("get with c's permit live = %v, want Got", d.Status)
	}
	if d := apply(t, &sem, semReq(Get, "", 0, 0), now.Add(3*time.Second/2+time.Nanosecond)); d.Status != LockDoesNotExist {
		t.Fatalf("get once every permit lapsed = %v, want LockDoesNotExist", d.Status)
	}

	rw := Entry{Token: 5}
	w := apply(t, &rw, rwReq(TryLock, "w", false), now)
	apply(t, &rw, rwReq(Unlock, "w", false), now)
	apply(t, &rw, rwReq(TryLock, "r1", true), now)
	apply(t, &rw, rwReq(TryLock, "r2", true), now)
	if d := apply(t, &rw, rwReq(Get, "", false), now); d.Status != Got || d.Token != w.Token || len(HoldersOf(&rw, now)) != 2 {
		t.Fatalf("get of a read-held lock = %+v, want Got with the writer's epoch %d and two readers", d, w.Token)
	}
}
