package actors

import (
	"bytes"
	"time"

	"github.com/kahunago/kahuna/durability"
	"github.com/kahunago/kahuna/lease"
)

// A persistent lock's renewals are kept in the leader's memory, as etcd
// keeps its leases' keepalives. A holder's first Extend of a plain lock is
// recorded, and marks the record renewed (lease.Entry.Renewed). Its later
// Extends that ask for no longer a lease than the stored record's TTL (the
// record's expiry less its last change) write no record: the entry's
// lease moves in the cache, and the holder is answered at once, under the
// leader's lease, as an ephemeral lock's Extend is. Their revision does
// not move: a revision counts the lock's stored writes. An Extend that
// asks for a longer lease or ends the lease earlier, a proclaim, and every
// other write are recorded as before; a grant to a new owner or a release clears the mark.
//
// What the store says of a renewed lease is only a lower bound, so one
// loaded from it is given at least its stored TTL from the start of this
// node's reign over the partition (as the actor counts it: its first read
// of a record of the partition in the current term, which comes after the
// node began to serve): every renewal a former leader answered was decided
// before that, so ended no later than the floor. Every entry of the reign
// is read after it, so the floor stays put while the reign lasts. That is the
// cost: a renewed lock whose holder died is held for up to one TTL past a
// leader change or a restart, as an etcd lease is; a lock never renewed
// keeps its stored expiry. Within a reign an entry renewed in memory is
// never evicted while its lease runs (no live lease is), and one dropped
// from the cache for a write whose outcome is unknown leaves its renewed
// lease behind (kept) for the reload.

// reign is when this actor first read a record of partition p in term.
type reign struct {
	term  uint64
	since time.Time
}

// keptLease is the lease of a cached entry renewed in memory and dropped
// from the cache within the reign; a reload of the same grant takes it.
type keptLease struct {
	partition int
	owner     []byte
	token     int64
	until     time.Time
}

// reignSince is the start of this node's reign over p as the actor counts
// it, or false when p is not served here.
func (a *lockActor) reignSince(p int, now time.Time) (time.Time, bool) {
	term, ok := a.cfg.Serving(p)
	if !ok {
		return time.Time{}, false
	}
	r, known := a.reigns[p]
	if !known || r.term != term {
		r = reign{term: term, since: now}
		a.reigns[p] = r
	}
	return r.since, true
}

// markRenewed sets what d leaves of e's Renewed: set by an Extend of a
// lock's holder, kept by its other writes, cleared by a grant to a new
// owner or a release.
func markRenewed(e lease.Entry, r *lease.Request, d *lease.Decision) {
	switch {
	case d.Next.State != lease.Held || d.Next.IsShared() || r.Op == lease.TryLock && d.Next.Token != e.Token:
		d.Next.Renewed = false
	case r.Op == lease.Extend && d.Write:
		d.Next.Renewed = true
	}
}

// renewInMemory reports whether d, the decision on req over s, is a
// renewal kept in memory: the stored record says the lease was renewed by
// a recorded Extend, and d asks no longer a lease than it grants, nor ends
// the lease earlier than it ends now. If so it makes d's entry keep the
// revision. (An Extend that shortens the lease is recorded: the store then
// says no more than the holder asked for, so a new leader's floor counts
// from the shorter lease. It also keeps every lease of a reign ending no
// earlier than the floor a reload would give it, so an entry evicted after
// its lease ended is not read back held.)
func (a *lockActor) renewInMemory(req *lease.Request, s *slot, d *lease.Decision) bool {
	if req.Op != lease.Extend || d.Status != lease.Extended || !d.Write || !s.Renewed ||
		req.NewOwner != nil || s.IsShared() || s.storedLease() <= 0 || req.TTL > s.storedLease() ||
		d.Next.Expires.Before(s.Expires) {
		return false
	}
	d.Next.Revision = s.Revision
	s.renewed = true
	return true
}

// storedTTL is the lease a stored record grants: its expiry less its last
// change (0 for a free record, a semaphore's or a read/write lock's).
func storedTTL(rec *durability.Record) time.Duration {
	if !rec.Locked || rec.Limit > 0 || rec.RW {
		return 0
	}
	return time.Duration(rec.ExpiresMs-rec.LastModifiedMs) * time.Millisecond
}

// floorLease raises e, just loaded from rec of partition p, to what a
// renewal kept in memory may have promised: its stored TTL from the start
// of this node's reign, or the lease the cache held when it dropped this
// grant within the reign.
func (a *lockActor) floorLease(e *lease.Entry, rec *durability.Record, p int, since time.Time) {
	if e.State != lease.Held || e.IsShared() || !rec.Renewed {
		return
	}
	if k, ok := a.kept[rec.Resource]; ok {
		delete(a.kept, rec.Resource)
		if k.partition == p && k.token == e.Token && bytes.Equal(k.owner, e.Owner) && k.until.After(e.Expires) {
			e.Expires = k.until
		}
	}
	if a.cfg.UnsafeNoRenewalFloor {
		return
	}
	if floor := since.Add(storedTTL(rec)); floor.After(e.Expires) {
		e.Expires = floor
	}
}

// keep leaves s's lease behind as it leaves the cache, if a renewal kept
// in memory moved it past its record's.
func (a *lockActor) keep(name string, s *slot) {
	if s.renewed && s.State == lease.Held && s.kind.durability() == lease.Persistent {
		a.kept[name] = keptLease{partition: s.partition(), owner: s.Owner, token: s.Token, until: s.Expires}
	}
}

// forgetKept drops the kept leases of p (a new reign floors them all), or
// of every partition those that have ended (p < 0).
func (a *lockActor) forgetKept(p int, now time.Time) {
	for res, k := range a.kept {
		if k.partition == p || p < 0 && !now.Before(k.until) {
			delete(a.kept, res)
		}
	}
}
