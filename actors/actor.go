package actors

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kahunago/kahuna/durability"
	"github.com/kahunago/kahuna/lease"
)

// call is one request travelling to an actor and, for a persistent write,
// on to the backend and back. It is pooled: whoever answers it must not
// touch it after writing to reply.
type call struct {
	req   Request
	reply chan Response // capacity 1: the actor never blocks on it

	// Set while a persistent write is in flight.
	self     *actor.PID
	root     *actor.RootContext
	decision lease.Decision
	rec      durability.Record
	index    uint64 // Raft index the record was applied at
	err      error
	next     *call // queue of calls waiting behind this resource's write
}

// completed is a call whose persistent write has an outcome; the backend
// sends it back to the actor as its own message type.
type completed call

// Releases, extensions and write completions jump the mailbox queue of
// other requests (the mailbox is protoactor's priority mailbox). Requests
// in a mailbox are concurrent, so any order is correct; serving these first
// frees a contended lock sooner (with 64 callers on one lock the release
// otherwise waits behind every caller's TryLock) and unblocks the requests
// queued behind a write.
const urgentPriority = actor.DefaultPriority + 2

// GetPriority implements actor.PriorityMessage.
func (c *call) GetPriority() int8 {
	if c.req.Op == lease.Unlock || c.req.Op == lease.Extend {
		return urgentPriority
	}
	return actor.DefaultPriority
}

// GetPriority implements actor.PriorityMessage.
func (*completed) GetPriority() int8 { return urgentPriority }

// Committed implements durability.Completion. It runs on a backend
// goroutine, so it only sends.
func (c *call) Committed(index uint64, err error) {
	c.index, c.err = index, err
	c.root.Send(c.self, (*completed)(c))
}

// countHeld asks an actor how many live leases it holds.
type countHeld struct {
	reply chan<- [2]int // [ephemeral, persistent]
}

type dropPartition struct {
	partition int
	ack       chan<- struct{}
}

// slot is an actor's cache entry for one resource.
type slot struct {
	lease.Entry
	// index is the Raft index of the stored record Entry reflects (0: none
	// stored): a persistent decision is applied only if the record is still
	// at it (durability's compare-and-set).
	index     uint64
	partition int
	lastUsed  time.Time
	inflight  *call // the call whose write is being committed
	queue     *call // calls waiting for inflight, oldest first
	queueTail *call
	dropped   bool // the partition was dropped while a write was in flight
}

// lockActor owns the entries of its share of resources. The maps live
// outside any per-message state, and the producer returns this same value
// on restart, so a supervisor restart keeps the cache.
type lockActor struct {
	cfg       Config
	root      *actor.RootContext
	self      *actor.PID
	ephemeral map[string]*slot
	durable   map[string]*slot
	countdown int
	oldestUse time.Time // lower bound of every entry's lastUsed (see collect)
	size      atomic.Int64
	evictions atomic.Uint64
}

func newLockActor(cfg Config, root *actor.RootContext) *lockActor {
	return &lockActor{
		cfg:       cfg,
		root:      root,
		ephemeral: make(map[string]*slot),
		durable:   make(map[string]*slot),
		countdown: collectEvery,
	}
}

// Receive implements actor.Actor.
func (a *lockActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *call:
		a.safely(m, a.handle)
	case *completed:
		a.safely((*call)(m), a.complete)
	case *dropPartition:
		a.drop(m.partition)
		a.size.Store(int64(len(a.ephemeral) + len(a.durable))) // before the ack: Stats after DropPartition sees it
		m.ack <- struct{}{}
	case *countHeld:
		now := a.cfg.Now()
		var n [2]int
		for i, t := range []map[string]*slot{a.ephemeral, a.durable} {
			for _, s := range t {
				if s.Live(now) {
					n[i]++
				}
			}
		}
		m.reply <- n
		return
	default:
		return // lifecycle messages
	}
	a.countdown--
	if a.countdown <= 0 {
		a.countdown = collectEvery
		a.collect()
	}
	a.size.Store(int64(len(a.ephemeral) + len(a.durable)))
}

// safely runs fn and turns a panic into an Errored answer for c, so one bad
// message costs one request, not the actor.
func (a *lockActor) safely(c *call, fn func(*call)) {
	defer func() {
		if r := recover(); r != nil {
			a.cfg.Logger.Error("lock actor recovered from panic", "resource", c.req.Resource, "op", c.req.Op, "panic", r)
			c.reply <- Response{Status: lease.Errored}
		}
	}()
	fn(c)
}

func (a *lockActor) table(d lease.Durability) map[string]*slot {
	if d == lease.Persistent {
		return a.durable
	}
	return a.ephemeral
}

// handle decides one request, or queues it behind an in-flight write.
func (a *lockActor) handle(c *call) {
	req := &c.req
	// Checked at decision time, on every decision (queued ones included):
	// the answer below comes from the cache, which is only right while this
	// node provably leads the partition.
	term, ok := a.cfg.Serving(req.Partition)
	if !ok {
		c.reply <- Response{Status: lease.MustRetry}
		return
	}
	now := a.cfg.Now()
	s, err := a.slot(req, now)
	if err != nil {
		a.cfg.Logger.Error("load persistent lock", "resource", req.Resource, "err", err)
		c.reply <- Response{Status: lease.Errored}
		return
	}
	if s.inflight != nil {
		c.next = nil
		if s.queueTail == nil {
			s.queue = c
		} else {
			s.queueTail.next = c
		}
		s.queueTail = c
		if a.cfg.onQueued != nil {
			a.cfg.onQueued(req.Resource)
		}
		return
	}
	s.lastUsed = now
	d := lease.Decide(s.Entry, req.Op, req.Owner, req.TTL, now)
	if !d.Write {
		resp := Response{Status: d.Status, Token: d.Token}
		if d.Status == lease.Got {
			resp.Owner, resp.Expires = s.Owner, s.Expires
		}
		c.reply <- resp
		return
	}
	if req.Op == lease.TryLock {
		// Next.Owner aliases the caller's buffer, which it may reuse.
		d.Next.Owner = append([]byte(nil), req.Owner...)
	}
	if req.Durability == lease.Ephemeral {
		s.Entry = d.Next
		c.reply <- Response{Status: d.Status, Token: d.Token}
		return
	}
	c.decision = d
	c.rec = durability.Record{
		Resource:       req.Resource,
		Owner:          d.Next.Owner,
		ExpiresMs:      d.Next.Expires.UnixMilli(),
		Token:          d.Next.Token,
		Revision:       d.Next.Revision,
		Locked:         d.Next.State == lease.Held,
		LastModifiedMs: now.UnixMilli(),
		Base:           s.index,
		Term:           term,
	}
	c.self, c.root = a.self, a.root
	s.inflight = c
	a.cfg.Backend.Propose(req.Partition, &c.rec, c)
}

// slot returns the cached entry of the request's resource, loading a
// persistent one from the store on a miss.
func (a *lockActor) slot(req *Request, now time.Time) (*slot, error) {
	t := a.table(req.Durability)
	if s, ok := t[req.Resource]; ok {
		return s, nil
	}
	s := &slot{partition: req.Partition, lastUsed: now}
	if req.Durability == lease.Persistent {
		rec, found, err := a.cfg.Backend.Load(req.Partition, req.Resource)
		if err != nil {
			return nil, err
		}
		if found {
			s.Entry, s.index = entryOf(&rec, now), rec.Index
		}
	}
	t[req.Resource] = s
	return s, nil
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
		e.State, e.Owner = lease.Held, rec.Owner
	}
	return e
}

// complete answers a call whose persistent write has an outcome, then
// replays the calls that queued behind it.
func (a *lockActor) complete(c *call) {
	t := a.table(c.req.Durability)
	s := t[c.req.Resource] // never evicted while in flight
	s.inflight = nil
	resp := Response{Status: c.decision.Status, Token: c.decision.Token}
	switch {
	case c.err == nil:
		s.Entry, s.index = c.decision.Next, c.index
		s.lastUsed = a.cfg.Now()
	case errors.Is(c.err, durability.ErrRetry):
		// Certainly not committed: the cached entry is still right.
		resp = Response{Status: lease.MustRetry}
	case errors.Is(c.err, durability.ErrFenced):
		// Committed but rejected: nothing changed, but the entry it was
		// decided from is stale (a newer epoch or a newer record): reload.
		resp = Response{Status: lease.MustRetry}
		s.dropped = true
	default:
		// Outcome unknown, or the store refused it: forget the entry so the
		// next request reloads what was really committed.
		a.cfg.Logger.Warn("persistent write not confirmed", "resource", c.req.Resource, "err", c.err)
		resp = Response{Status: lease.Errored}
		s.dropped = true
	}
	waiting := s.queue
	s.queue, s.queueTail = nil, nil
	if s.dropped {
		delete(t, c.req.Resource)
	}
	c.reply <- resp // c belongs to its caller from here on
	for waiting != nil {
		next := waiting.next
		waiting.next = nil
		a.safely(waiting, a.handle)
		waiting = next
	}
}

// drop forgets every entry of partition p. An entry with a write in flight
// is forgotten when the write completes.
func (a *lockActor) drop(p int) {
	for _, t := range []map[string]*slot{a.ephemeral, a.durable} {
		for k, s := range t {
			if s.partition != p {
				continue
			}
			if s.inflight != nil {
				s.dropped = true
				continue
			}
			delete(t, k)
		}
	}
}
