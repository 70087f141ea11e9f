package actors

import (
	"fmt"
	"time"

	"github.com/kahunago/kahuna/durability"
	"github.com/kahunago/kahuna/lease"
)

// A cache miss reads the resource's stored record off the actor: a read
// from disk must not stall every other resource of the actor. The
// requests (and watches) for the resource wait, in order, until the read is
// back, then are decided on what it found. A read whose partition was
// dropped meanwhile is thrown away: it may predate the new leader's fence,
// so its requests start over (and read again if this node still serves).

// loading is a resource whose record is being read.
type loading struct {
	partition int
	waiting   []any // *call and *watchMsg, oldest first
	dropped   bool  // the partition was dropped during the read
}

// loaded is a finished read, sent back to the actor.
type loaded struct {
	resource string
	l        *loading
	rec      durability.Record
	found    bool
	err      error
}

// load queues m behind the read of resource's record, starting the read
// if none is under way.
func (a *lockActor) load(resource string, p int, m any) {
	if l := a.loading[resource]; l != nil {
		l.waiting = append(l.waiting, m)
		return
	}
	l := &loading{partition: p, waiting: []any{m}}
	a.loading[resource] = l
	self, root, backend := a.self, a.root, a.cfg.Backend
	go func() {
		msg := &loaded{resource: resource, l: l}
		defer func() {
			if r := recover(); r != nil {
				msg.err = fmt.Errorf("actors: load %q: panic: %v", resource, r)
			}
			root.Send(self, msg)
		}()
		msg.rec, msg.found, msg.err = backend.Load(p, resource)
	}()
}

// loaded decides what waited for a read, on the slot it found.
func (a *lockActor) loaded(m *loaded) {
	delete(a.loading, m.resource) // one read per resource at a time: it is m.l
	if m.err != nil {
		a.cfg.Logger.Error("load lock", "resource", m.resource, "err", m.err)
	}
	now := a.cfg.Now()
	var s *slot
	// A record read while the partition is not served is not taken (its
	// calls start over, and are answered MustRetry): without a reign it
	// could not be given its renewal floor.
	since, serving := a.reignSince(m.l.partition, now)
	if m.err == nil && !m.l.dropped && serving {
		s = &slot{part: int32(m.l.partition), lastUsed: a.since(now)}
		if m.found {
			s.Entry, s.kind = entryOf(&m.rec, now), kindOf(lease.Persistent)
			s.stored(m.rec.Index, storedTTL(&m.rec))
			a.floorLease(&s.Entry, &m.rec, m.l.partition, since)
		} else {
			s.Token = m.rec.Token // the store's floor: a first grant's token
		}
		s.Floor = a.floor(m.l.partition)
	}
	for _, w := range m.l.waiting {
		switch w := w.(type) {
		case *call:
			switch {
			case m.err != nil:
				if !w.gone {
					w.answer(Response{Status: lease.Errored})
				}
			case s == nil || a.entries[m.resource] != nil:
				// Start over: read again, or the slot is cached by an
				// earlier request of this batch.
				a.safely(w, a.handle)
			default:
				a.safely(w, func(c *call) { a.proceed(c, s) })
			}
		case *watchMsg:
			switch {
			case m.err != nil:
				w.reply <- m.err
			case s == nil || a.entries[m.resource] != nil:
				a.watch(w)
			default:
				a.watchLoaded(w, s)
			}
		}
	}
}

// entryOf turns a stored record into an entry. The recorded expiry is wall
// time; from here on the lease is measured on this node's monotonic clock.
func entryOf(rec *durability.Record, now time.Time) lease.Entry {
	e := lease.Entry{
		State:    lease.Released,
		Token:    rec.Token,
		Revision: rec.Revision,
		Expires:  now.Add(time.Duration(rec.ExpiresMs-now.UnixMilli()) * time.Millisecond),
	}
	if rec.Locked {
		e.State, e.Owner, e.Renewed = lease.Held, rec.Owner, rec.Renewed
	}
	if rec.Limit > 0 || rec.RW {
		e.Owner, e.Limit, e.RW, e.Exclusive = nil, rec.Limit, rec.RW, rec.Exclusive
		e.Slots = make([]lease.Slot, len(rec.Slots))
		for i, s := range rec.Slots {
			e.Slots[i] = lease.Slot{Owner: s.Owner, Token: s.Token,
				Expires: now.Add(time.Duration(s.ExpiresMs-now.UnixMilli()) * time.Millisecond)}
		}
	}
	return e
}

// slotsOf is the stored form of a semaphore's slots.
func slotsOf(e *lease.Entry) []durability.Slot {
	if !e.IsShared() {
		return nil
	}
	out := make([]durability.Slot, len(e.Slots))
	for i, s := range e.Slots {
		out[i] = durability.Slot{Owner: s.Owner, ExpiresMs: s.Expires.UnixMilli(), Token: s.Token}
	}
	return out
}
