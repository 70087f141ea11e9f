package actors

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/kahunago/kahuna/durability"
	"github.com/kahunago/kahuna/lease"
)

// groupReq is a lock of names (the first is Resource, the rest Also) for
// owner, persistent.
func groupReq(owner string, names ...string) Request {
	return Request{Request: lease.Request{Op: lease.TryLock, Resource: names[0], Also: names[1:], Owner: []byte(owner),
		TTL: time.Minute, Durability: lease.Persistent}}
}

func lockReq(owner, name string) Request {
	return Request{Request: lease.Request{Op: lease.TryLock, Resource: name, Owner: []byte(owner), TTL: time.Minute, Durability: lease.Persistent}}
}

// holders is who the backend's store says holds each name ("" for none).
func (f *fixture) holders(names ...string) []string {
	f.backend.mu.Lock()
	defer f.backend.mu.Unlock()
	out := make([]string, len(names))
	for i, n := range names {
		if r, ok := f.backend.store[n]; ok && r.Locked {
			out[i] = string(r.Owner)
		}
	}
	return out
}

var accounts = []string{"acct/1", "acct/2", "acct/3"}

// Every name of a group is granted, in one proposal of all their
// records, each with its own token; a name the owner already holds is
// granted again with its token.
func TestGroupGrantsEveryNameInOneProposal(t *testing.T) {
	f := newFixture(t, 4, 0)
	ctx := context.Background()
	if r, _ := f.ring.Do(ctx, lockReq("a", "acct/3")); r.Status != lease.Locked {
		t.Fatal(r)
	}
	if r, _ := f.ring.Do(ctx, lockReq("a", "acct/3")); r.Status != lease.Locked {
		t.Fatal(r)
	}
	r, err := f.ring.Do(ctx, groupReq("a", accounts...))
	if err != nil || r.Status != lease.Locked || len(r.Grants) != 3 {
		t.Fatalf("group: %+v %v", r, err)
	}
	for i, g := range r.Grants {
		if g.Slot != i {
			t.Fatalf("grants %+v: want one per name, in order", r.Grants)
		}
	}
	if got := f.holders(accounts...); !slices.Equal(got, []string{"a", "a", "a"}) {
		t.Fatalf("holders %q", got)
	}
	if n := f.backend.groups.Load(); n != 1 {
		t.Fatalf("%d group proposals, want 1 (acct/3 was held already: no record of it)", n)
	}
}

// A group one of whose names another owner holds is Busy and changes
// nothing: the records of the names that were granted are not proposed,
// and those names are free for the next caller at once.
func TestGroupOneBusyGrantsNone(t *testing.T) {
	f := newFixture(t, 4, 0)
	ctx := context.Background()
	if r, _ := f.ring.Do(ctx, lockReq("b", "acct/2")); r.Status != lease.Locked {
		t.Fatal(r)
	}
	if r, err := f.ring.Do(ctx, groupReq("a", accounts...)); err != nil || r.Status != lease.Busy || r.Grants != nil {
		t.Fatalf("group with acct/2 held: %+v %v, want Busy", r, err)
	}
	if got := f.holders(accounts...); !slices.Equal(got, []string{"", "b", ""}) {
		t.Fatalf("holders %q: the group left something behind", got)
	}
	if n := f.backend.groups.Load(); n != 0 {
		t.Fatalf("%d group proposals, want none", n)
	}
	for _, name := range []string{"acct/1", "acct/3"} {
		if r, _ := f.ring.Do(ctx, lockReq("c", name)); r.Status != lease.Locked {
			t.Fatalf("%s after the refused group: %v", name, r.Status)
		}
	}
}

// A group whose one record the fence refuses (its name's stored record
// moved on) applies none of them, and answers MustRetry; with the group
// applied apart (the negative control) the other names are left granted.
func TestGroupFencedAppliesNone(t *testing.T) {
	for _, apart := range []bool{false, true} {
		f := newFixture(t, 4, 0)
		f.backend.groupApart = apart
		ctx := context.Background()
		// acct/2 is cached, then its stored record moves on behind the
		// actor's back (as a deposed leader's cache would see it).
		if r, _ := f.ring.Do(ctx, lockReq("b", "acct/2")); r.Status != lease.Locked {
			t.Fatal(r)
		}
		if r, _ := f.ring.Do(ctx, Request{Request: lease.Request{Op: lease.Unlock, Resource: "acct/2", Owner: []byte("b"), Durability: lease.Persistent}}); r.Status != lease.Unlocked {
			t.Fatal(r)
		}
		f.backend.mu.Lock()
		moved := f.backend.store["acct/2"]
		f.backend.index++
		moved.Index, moved.Revision = f.backend.index, moved.Revision+1
		f.backend.store["acct/2"] = moved
		f.backend.mu.Unlock()
		r, err := f.ring.Do(ctx, groupReq("a", accounts...))
		got := f.holders(accounts...)
		switch {
		case err != nil:
			t.Fatal(err)
		case !apart && (r.Status != lease.MustRetry || !slices.Equal(got, []string{"", "", ""})):
			t.Fatalf("fenced group: %v, holders %q; want MustRetry and nothing applied", r.Status, got)
		case apart && !slices.Equal(got, []string{"a", "", "a"}):
			t.Fatalf("control (applied apart): holders %q, want the partial grant", got)
		}
	}
}

// A group's call does not queue behind a write in flight: it is answered
// at once (Busy when the committed entry is another owner's live lease,
// else MustRetry), so groups over the same names never wait for each
// other.
func TestGroupDoesNotQueueBehindAWrite(t *testing.T) {
	f := newFixture(t, 4, 0)
	ctx := context.Background()
	f.holdWrites(t, "acct/2")
	pending := f.doAsync(lockReq("b", "acct/2")) // its record is held in flight
	p := <-f.backend.held
	r, err := f.ring.Do(ctx, groupReq("a", accounts...))
	if err != nil || r.Status != lease.MustRetry {
		t.Fatalf("group beside a grant in flight on a free name: %+v %v, want MustRetry", r, err)
	}
	p.c.Committed(f.backend.apply(p.rec))
	if got := answer(t, pending); got.Status != lease.Locked {
		t.Fatal(got)
	}
	extend := f.doAsync(Request{Request: lease.Request{Op: lease.Extend, Resource: "acct/2", Owner: []byte("b"), TTL: 2 * time.Minute, Durability: lease.Persistent}})
	p = <-f.backend.held
	if r, _ := f.ring.Do(ctx, groupReq("a", accounts...)); r.Status != lease.Busy {
		t.Fatalf("group beside the holder's extend in flight: %v, want Busy", r.Status)
	}
	p.c.Committed(0, durability.ErrRetry)
	answer(t, extend)
	if got := f.holders(accounts...); !slices.Equal(got, []string{"", "b", ""}) {
		t.Fatalf("holders %q", got)
	}
}
