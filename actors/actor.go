package actors

import (
	"bytes"
	"errors"
	"slices"
	"strings"
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
	// async, for a call of Ring.DoAsync, takes the answer instead of
	// reply, on the actor's goroutine.
	async asyncCall

	// Set while a persistent write is in flight.
	inbox    *mailbox // the deciding actor's, where the write's outcome goes
	decision lease.Decision
	rec      durability.Record
	index    uint64 // Raft index the record was applied at
	err      error
	next     *call // queue of calls waiting behind this resource's write
	// handoff is the waiter granted by this call's record: a persistent
	// Unlock with a persistent waiter at the head writes the waiter's
	// grant as its one record (the release and the grant commit together).
	handoff *call
	// batch is the calls whose writes were folded into this call's record
	// (fold), in the order they were decided; each is answered by its
	// outcome.
	batch []*call
	// held: its record waits in lockActor.held to be proposed.
	held bool

	// For waiting calls (req.Wait != 0), set by the actor only.
	queuedAt time.Time     // when it joined the wait queue (zero: it has not)
	waited   time.Duration // from queuedAt to the first decision that granted it
	// granted: a grant to this waiter was decided (it may have committed
	// even if its write's outcome is unknown). Waited then stays the wait
	// up to that first grant, the earliest its lease can have begun: a
	// later re-decision (the same grant found in the reloaded record) must
	// not make the holder think its lease began, and ends, later.
	granted bool
	// unsure: a grant to this waiter whose outcome is unknown was decided
	// earlier (it may hold the lock from then). granted stays set for good,
	// and it is never told anything that means "not granted".
	unsure   bool
	waitOver bool // its wait ended: decide it as a TryLock from now on
	gone     bool // its caller left (context ended): drop it unanswered
	// abandoned: the caller of a TryLock that does not wait left before
	// it was decided (set by Ring.do and DoAsync, read by the actor). Its caller's
	// next request, a release to clean up, may be decided first (releases
	// jump the queue); granted after that, the lock would have no holder
	// anyone knows of. It is not granted then.
	abandoned atomic.Bool
	// group: one name of a lock of several names (group.go). Its write is
	// held for the group, not proposed, and it never queues behind a write.
	group bool
	// direct: c is being decided on its caller's goroutine, which reads
	// an answer given meanwhile from now, with no channel (DoNowEach).
	direct   bool
	answered bool // now holds the answer given while direct
	now      Response
}

// answer gives c its answer; c belongs to its caller from then on.
func (c *call) answer(r Response) {
	if c.direct {
		c.now, c.answered = r, true
		return
	}
	if c.async.done != nil {
		c.async.ring.answered(c, r)
		return
	}
	c.reply <- r
}

// completed is a call whose persistent write has an outcome; the backend
// sends it back to the actor as its own message type.
type completed call

// Releases, extensions, write completions and leaves jump the mailbox
// queue of other requests (the mailbox is protoactor's priority mailbox).
// Requests in a mailbox are concurrent, so any order is correct; serving these first
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
// goroutine, which runs the actor on the outcome itself when the actor is
// idle (postInline), as a caller runs its call: handing every outcome to
// a worker cost a goroutine hand-off per write (on one hot persistent
// lock, 10–20 µs of each hand-off). The backend calls it holding none of
// its locks, so the actor may propose again from here.
func (c *call) Committed(index uint64, err error) {
	c.index, c.err = index, err
	c.inbox.postInline((*completed)(c))
}

// leave tells the actor that a waiting call's wait ended (waitOver: answer
// it Busy if it is still queued) or that its caller is gone (answer
// nothing; a DoAsync call is answered err). Ring.Do and DoAsync send it;
// the call's flags make it right whenever it arrives, before or after the
// call itself is handled. A gone caller's leave is acknowledged on left
// (or by the answer err) once handled: from then on no grant reaches the
// call unless it was answered before (or a persistent hand-off to it was
// in flight, whose outcome is then unknown).
type leave struct {
	c        *call
	waitOver bool
	left     chan<- struct{}
	err      error
}

// GetPriority implements actor.PriorityMessage: a leave keeps its place
// before the releases sent after it, which jump the queue of requests.
// Behind them, a release would hand the lock to a waiter whose caller had
// left (and had already sent its clean-up), leaving it held by no one
// until its lease ends.
func (*leave) GetPriority() int8 { return urgentPriority }

// wake is sent by a slot's timer when its holder's lease should have
// ended, so a lapsed holder is noticed without a request. gen tells a
// stale timer's wake from the current one's.
type wake struct {
	s   *slot
	x   *slotExtra // s.x when the timer was set: a later one counts its own gens
	gen uint64
}

// GetPriority implements actor.PriorityMessage: a hand-off is a release.
func (*wake) GetPriority() int8 { return urgentPriority }

// countHeld asks an actor how many live leases it holds.
type countHeld struct {
	reply chan<- [2]int // [ephemeral, persistent]
}

// liveLeases asks an actor for the live ephemeral leases of a partition.
type liveLeases struct {
	partition int
	reply     chan<- []durability.HandedLease
}

// listLive asks an actor for the live leases, of either durability, of
// a partition whose names req wants (lease.ListRequest.Wants): its first
// limit of them in name order.
type listLive struct {
	partition int
	req       lease.ListRequest
	limit     int
	reply     chan<- []lease.ListedLock
}

// install gives an actor the slots of leases handed over to this node
// (Ring.Install).
type install struct {
	leases []handed
	ack    chan<- struct{}
}

// handed is a lease handed over: its slot, built from the stored record
// and the lease, and how long the lease has left.
type handed struct {
	s    *slot
	name string
	left time.Duration
}

type dropPartition struct {
	partition int
	ack       chan<- struct{}
}

// slot is an actor's cache entry for one resource: the one lock of that
// name, whatever durability its requests name. A node caches one per lock
// it serves, so what only a lock being written, waited for or watched
// needs is kept apart, in x, allocated when first needed and dropped when
// the lock is at rest again (tidy): an idle held lock takes about half the
// memory it would otherwise (BenchmarkHeldLockMemory).
type slot struct {
	lease.Entry
	// kind is the durability of the grant Entry describes: Persistent when
	// Entry is the stored record (as of its index), Ephemeral when an
	// in-memory grant (or its release) has moved it on. Extend and Unlock
	// write the way the lock was granted, whatever durability they name.
	kind grantKind
	// renewed: a renewal kept in memory has moved the lease past the
	// stored record's (renew.go).
	renewed   bool
	lapseTold bool          // the watchers have been told that Entry's lease lapsed
	dropped   bool          // the partition was dropped while a write was in flight
	part      int32         // the partition (partition())
	lastUsed  time.Duration // when it was last used, as a.since says
	rec       *storedRef    // the stored record, nil if none
	x         *slotExtra    // nil while the lock is at rest
	// The resource's name is the key of the actor's map: not kept here.
}

// grantKind is a lease.Durability in a byte.
type grantKind uint8

func kindOf(d lease.Durability) grantKind { return grantKind(d) }

func (k grantKind) durability() lease.Durability { return lease.Durability(k) }

// storedRef is what a slot knows of its stored record.
type storedRef struct {
	// index is the record's Raft index: a persistent decision is applied
	// only if the record is still at it (durability's compare-and-set).
	index uint64
	ttl   time.Duration // the lease the record grants (renew.go)
}

func (s *slot) partition() int { return int(s.part) }

// index is the Raft index of the stored record (0: none stored).
func (s *slot) index() uint64 {
	if s.rec == nil {
		return 0
	}
	return s.rec.index
}

// storedLease is the lease the stored record grants (0: none stored).
func (s *slot) storedLease() time.Duration {
	if s.rec == nil {
		return 0
	}
	return s.rec.ttl
}

// stored notes the record stored for s: its index (0: none) and lease.
func (s *slot) stored(index uint64, ttl time.Duration) {
	switch {
	case index == 0 && ttl == 0:
		s.rec = nil
	case s.rec == nil:
		s.rec = &storedRef{index: index, ttl: ttl}
	default:
		s.rec.index, s.rec.ttl = index, ttl
	}
}

// slotExtra is the part of a slot that a lock at rest does not need.
type slotExtra struct {
	name      string // the resource's, for a timer's wake to find s by
	inflight  *call  // the call whose write is being committed
	queue     *call  // calls waiting for inflight, oldest first
	queueTail *call
	queued    int // calls in queue (at most Config.MaxQueued)

	// waiters wait for the lock to be free, oldest first (at most
	// lease.MaxWaiters). They live only in this actor's memory, that is in
	// the partition leader's: a leader change answers them MustRetry.
	waiters []*call
	// timer fires when the holder's lease ends while waiters wait (one
	// per queue head, not per waiter); timerAt is the expiry it is set for.
	timer    stopper
	timerAt  time.Time
	timerGen uint64

	// watchers are told every change of Entry (watch.go); like waiters,
	// they live only in the partition leader's memory.
	watchers []*Watch
	// toldLive, of a semaphore or a read/write lock, is how many live
	// holders its watchers were last told of (watch.go).
	toldLive int
}

// ext is s's extra part, allocated if s, the slot of resource name, has
// none.
func (s *slot) ext(name string) *slotExtra {
	if s.x == nil {
		s.x = &slotExtra{name: name}
	}
	return s.x
}

// writing is the call whose write is being committed, if any.
func (s *slot) writing() *call {
	if s.x == nil {
		return nil
	}
	return s.x.inflight
}

// waiting is s's waiters, oldest first.
func (s *slot) waiting() []*call {
	if s.x == nil {
		return nil
	}
	return s.x.waiters
}

// watching is s's watchers.
func (s *slot) watching() []*Watch {
	if s.x == nil {
		return nil
	}
	return s.x.watchers
}

// tidy drops s's extra part once nothing in it is in use.
func (s *slot) tidy() {
	if x := s.x; x != nil && x.inflight == nil && x.queue == nil && len(x.waiters) == 0 && x.timer == nil && len(x.watchers) == 0 {
		s.x = nil
	}
}

// stopper is a timer (time.Timer, or a test's).
type stopper interface{ Stop() bool }

// lockActor owns the entries of its share of resources. The map lives
// outside any per-message state, and the producer returns this same value
// on restart, so a supervisor restart keeps the cache.
type lockActor struct {
	cfg     Config
	root    *actor.RootContext
	self    *actor.PID
	mailbox *mailbox
	entries map[string]*slot
	touched int                 // touch's sum, kept so that its loads are made
	loading map[string]*loading // resources whose record is being read (load.go)
	// floors, per partition, is above the token of every ephemeral grant
	// whose entry this actor dropped from its cache (uncache): the store
	// never saw those tokens, so a name's next entry starts above them.
	floors    map[int]int64
	countdown int
	oldestUse time.Time // lower bound of every entry's last use (see collect)
	epoch     time.Time // what slots' lastUsed count from (since)
	nwaiting  int       // waiters over all slots
	size      atomic.Int64
	waiting   atomic.Int64
	evictions atomic.Uint64
	refused   atomic.Uint64 // requests answered MustRetry for a bound (MaxEntries, MaxQueued, MaxPending)
	// pending counts the calls Ring.Do sent to this actor that it has not
	// taken from its mailbox yet (bounded by MaxPending).
	pending atomic.Int64
	// reigns and kept are what renewals kept in memory need (renew.go).
	reigns map[int]reign
	kept   map[string]keptLease
	// held is the writes decided while handling the current message,
	// proposed once it is handled (proposeHeld): until then, later writes
	// of the same resource decided in that message join their record.
	held []*call
}

func newLockActor(cfg Config, root *actor.RootContext) *lockActor {
	return &lockActor{
		cfg:       cfg,
		root:      root,
		entries:   make(map[string]*slot),
		loading:   make(map[string]*loading),
		floors:    make(map[int]int64),
		reigns:    make(map[int]reign),
		kept:      make(map[string]keptLease),
		countdown: collectEvery,
		epoch:     cfg.Now(),
	}
}

// since is now as a slot's lastUsed: the time from the actor's epoch
// (8 bytes a slot where a time.Time takes 24).
func (a *lockActor) since(now time.Time) time.Duration { return now.Sub(a.epoch) }

// Receive implements actor.Actor.
func (a *lockActor) Receive(ctx actor.Context) {
	defer a.proposeHeld()
	switch m := ctx.Message().(type) {
	case *call:
		a.pending.Add(-1)
		a.safely(m, a.handle)
	case *callBatch:
		a.pending.Add(-int64(len(m.calls)))
		now := a.cfg.Now()
		a.touch(m.calls)
		for _, c := range m.calls {
			if !m.direct {
				a.handleSafely(c, now) // c is its caller's once answered
				continue
			}
			c.direct = true
			a.handleSafely(c, now)
			c.direct = false // an answer that comes later is sent
		}
		a.countdown -= len(m.calls) - 1 // one below
	case *completed:
		a.safely((*call)(m), a.complete)
	case *loaded:
		a.loaded(m)
		a.publish()
		return // not a request: collections count requests
	case *leave:
		a.leave(m)
		if m.left != nil {
			close(m.left)
		}
	case *watchMsg:
		a.watch(m)
	case *unwatch:
		a.unwatch(m)
	case *wake:
		if x := m.x; x == m.s.x && a.entries[x.name] == m.s && m.gen == x.timerGen {
			x.timer = nil
			a.settle(m.s)
		}
	case *dropPartition:
		a.drop(m.partition)
		a.publish() // before the ack: Stats after DropPartition sees it
		m.ack <- struct{}{}
		return
	case *liveLeases:
		now := a.cfg.Now()
		var leases []durability.HandedLease
		for name, s := range a.entries {
			if s.partition() == m.partition && s.kind.durability() == lease.Ephemeral && s.Live(now) {
				leases = append(leases, durability.HandedLease{
					Resource: name, Owner: s.Owner, Token: s.Token, Revision: s.Revision,
					Left: s.Expires.Sub(now) + time.Nanosecond, // live up to and including Expires
				})
			}
		}
		m.reply <- leases
		return
	case *listLive:
		m.reply <- a.listLive(m)
		return
	case *install:
		now := a.cfg.Now()
		for _, h := range m.leases {
			s := h.s
			if a.entries[h.name] != nil {
				a.cfg.Logger.Warn("handed-over lease not installed: the name is cached already", "resource", h.name)
				continue
			}
			// From now: the lease ends no earlier than on the node that
			// handed it over, which measured left before this node began
			// to take the partition over.
			s.Expires, s.lastUsed = now.Add(h.left), a.since(now)
			s.Floor = a.floor(s.partition())
			a.entries[h.name] = s
		}
		a.publish()
		m.ack <- struct{}{}
		return
	case *countHeld:
		now := a.cfg.Now()
		var n [2]int
		for _, s := range a.entries {
			if s.Live(now) {
				n[s.kind]++
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
	a.publish()
}

// listLive answers m from the cache. Eviction never drops a live entry
// (evict.go), so the cache holds every live ephemeral lease of the
// partitions this node serves; a persistent one is here if cached, with
// its lease measured on this node's monotonic clock.
func (a *lockActor) listLive(m *listLive) []lease.ListedLock {
	now := a.cfg.Now()
	var out []lease.ListedLock
	for name, s := range a.entries {
		if s.partition() != m.partition || !s.Live(now) || !m.req.Wants(name) {
			continue
		}
		out = append(out, lease.ListedLock{
			Resource: name, Owner: bytes.Clone(s.Owner), FencingToken: s.Token, Durability: s.kind.durability(),
			Expires: s.Expires.Round(0), // the wall reading: the caller may be another process
			Holders: lease.HoldersOf(&s.Entry, now),
		})
	}
	slices.SortFunc(out, func(x, y lease.ListedLock) int { return strings.Compare(x.Resource, y.Resource) })
	if len(out) > m.limit {
		out = out[:m.limit:m.limit]
	}
	return out
}

// publish makes the actor's sizes visible to Stats.
func (a *lockActor) publish() {
	a.size.Store(int64(len(a.entries)))
	a.waiting.Store(int64(a.nwaiting))
}

// safely runs fn and turns a panic into an Errored answer for c, so one bad
// message costs one request, not the actor.
func (a *lockActor) safely(c *call, fn func(*call)) {
	defer a.recovered(c)
	fn(c)
}

// handleSafely is safely's handle of c at now, without a function value
// made for each call of a batch.
func (a *lockActor) handleSafely(c *call, now time.Time) {
	defer a.recovered(c)
	a.handleAt(c, now)
}

// recovered, deferred, answers c Errored if the actor panicked deciding it.
func (a *lockActor) recovered(c *call) {
	if r := recover(); r != nil {
		a.cfg.Logger.Error("lock actor recovered from panic", "resource", c.req.Resource, "op", c.req.Op, "panic", r)
		c.answer(Response{Status: lease.Errored})
	}
}

// waits reports whether c is to join the wait queue when the lock is busy.
func (c *call) waits() bool {
	return c.req.Op == lease.TryLock && c.req.Wait != 0 && !c.waitOver
}

// touch looks up the slots of calls before any is decided, so their
// cache misses overlap (the lookups do not wait on each other) instead of
// stalling each decision in turn.
func (a *lockActor) touch(calls []*call) {
	var sum int
	for _, c := range calls {
		if s := a.entries[c.req.Resource]; s != nil {
			sum += int(s.State) + int(s.kind) // the slot's first and last lines
		}
	}
	a.touched = sum
}

// handle decides one request, or queues it behind an in-flight write.
func (a *lockActor) handle(c *call) { a.handleAt(c, a.cfg.Now()) }

// handleAt is handle at now, a reading of the clock taken in this step:
// the calls of a batch share one.
func (a *lockActor) handleAt(c *call, now time.Time) {
	if c.gone || c.abandoned.Load() {
		return // its caller left before it was decided: nothing to answer
	}
	req := &c.req
	// Checked at decision time, on every decision (queued ones included):
	// the answer below comes from the cache, which is only right while this
	// node provably leads the partition.
	term, ok := a.cfg.Serving(req.Partition)
	if !ok {
		if s := a.entries[req.Resource]; s != nil {
			a.flush(s, lease.MustRetry) // nor can its waiters be served
		}
		c.answer(a.notServing(c))
		return
	}
	s := a.entries[req.Resource]
	if s == nil {
		a.load(req.Resource, req.Partition, c) // decided once its record is read (proceed)
		return
	}
	a.decideOn(c, s, true, term, now)
}

// proceed decides c on s, the slot its resource's record was just loaded
// into (not cached: admit decides whether it is).
func (a *lockActor) proceed(c *call, s *slot) {
	if c.gone || c.abandoned.Load() {
		return
	}
	term, ok := a.cfg.Serving(c.req.Partition)
	if !ok {
		c.answer(a.notServing(c))
		return
	}
	a.decideOn(c, s, false, term, a.cfg.Now())
}

// decideOn decides c on s (cached: s is in the cache), or queues it
// behind s's write in flight.
func (a *lockActor) decideOn(c *call, s *slot, cached bool, term uint64, now time.Time) {
	req := &c.req
	if req.forget {
		a.forget(c, s, cached, term, now)
		return
	}
	if !cached && !a.admit(c, s, term, now) {
		return // answered without an entry left behind, or refused
	}
	// A lapsed holder with waiters: the head goes first, then c.
	a.handOff(s)
	if s.writing() != nil && c.group {
		// Not queued, so that no group waits for another: Busy if the
		// committed entry is another owner's live lease now, else MustRetry.
		st := lease.MustRetry
		if d := a.decideLease(s.Entry, &req.Request, now); d.Status == lease.Busy {
			st = lease.Busy
		}
		c.answer(Response{Status: st})
		return
	}
	if x := s.x; x != nil && x.inflight != nil {
		if a.cfg.MaxQueued > 0 && x.queued >= a.cfg.MaxQueued {
			a.refused.Add(1)
			c.answer(Response{Status: a.notGranted(c, lease.MustRetry)}) // backpressure: nothing applied
			return
		}
		x.queued++
		c.next = nil
		if x.queueTail == nil {
			x.queue = c
		} else {
			x.queueTail.next = c
		}
		x.queueTail = c
		if a.cfg.onQueued != nil {
			a.cfg.onQueued(req.Resource)
		}
		return
	}
	a.decide(c, s, term, now)
	a.settleAt(s, now) // c may have freed the lock: the head is granted in this same step
}

// forget proposes the removal of s's stored record (Ring.Forget) if it is
// still the free record stored at the index the sweep saw; otherwise c is
// answered Busy and nothing changes.
func (a *lockActor) forget(c *call, s *slot, cached bool, term uint64, now time.Time) {
	if s.State == lease.Absent || s.kind.durability() != lease.Persistent || s.index() != c.req.forgetAt || s.Live(now) || s.busy() {
		c.answer(Response{Status: lease.Busy})
		return
	}
	if !cached {
		a.entries[c.req.Resource] = s // for its write in flight; dropped once it completes
	}
	c.decision = lease.Decision{Status: lease.Unlocked}
	c.rec = durability.Record{
		Resource:       c.req.Resource,
		Token:          s.Token,
		Revision:       s.Revision + 1,
		LastModifiedMs: now.UnixMilli(),
		Remove:         true,
		Base:           s.index(),
		Term:           term,
	}
	s.ext(c.req.Resource).inflight = c
	a.hold(c)
}

// decide makes c's decision on s, which has no write in flight, and answers
// it, or proposes its record, or queues it as a waiter.
func (a *lockActor) decide(c *call, s *slot, term uint64, now time.Time) {
	req := &c.req
	s.lastUsed = a.since(now)
	d := a.decideLease(s.Entry, &req.Request, now)
	if d.Status == lease.Locked && d.Write && d.Next.IsShared() && len(s.waiting()) > 0 && c.queuedAt.IsZero() {
		// First come, first served: free permits the head of the queue
		// does not have enough of are not taken by a newcomer, nor does a
		// reader join the readers while a writer waits.
		d = lease.Decision{Status: lease.Busy}
	}
	if d.Status == lease.Busy && c.waits() {
		if len(s.waiting()) >= lease.MaxWaiters {
			c.answer(Response{Status: a.notGranted(c, lease.Busy)})
			return
		}
		c.queuedAt = now
		x := s.ext(req.Resource)
		x.waiters = append(x.waiters, c)
		a.nwaiting++
		if a.cfg.onWait != nil {
			a.cfg.onWait(req.Resource)
		}
		return
	}
	if !c.queuedAt.IsZero() && !c.granted {
		c.waited = now.Sub(c.queuedAt)
	}
	if !d.Write {
		resp := Response{Status: d.Status, Token: d.Token, Grants: d.Grants, Free: d.Free, Reason: d.Reason}
		switch {
		case d.Status == lease.Got && s.IsShared():
			resp.Holders = lease.HoldersOf(&s.Entry, now)
			resp.Expires, _ = s.LastLapse(now)
		case d.Status == lease.Got:
			resp.Owner, resp.Expires = s.Owner, s.Expires
		}
		if d.Status == lease.Locked {
			resp.Waited = c.waited
		}
		c.answer(resp)
		return
	}
	kind := s.kind.durability() // Extend and Unlock write the way the lock was granted
	if req.Op == lease.TryLock {
		kind = req.Durability
	}
	ownOwner(&req.Request, &d)
	if kind == lease.Persistent && a.renewInMemory(&req.Request, s, &d) { // kind: s's, for an Extend
		a.changed(s, d.Next, lease.Persistent, Extended, now)
		c.answer(Response{Status: d.Status, Token: d.Token, Waited: c.waited})
		return
	}
	if kind == lease.Ephemeral {
		if !a.windowRoom(c, s.partition(), term, d.Token, req.TTL) {
			return
		}
		a.changed(s, d.Next, lease.Ephemeral, eventOf(req.Op), now)
		c.answer(Response{Status: d.Status, Token: d.Token, Waited: c.waited})
		return
	}
	c.decision = d
	if d.Status == lease.Locked {
		c.granted = true
	}
	write := d.Next
	if w := s.waiting(); req.Op == lease.Unlock && len(w) > 0 && w[0].req.Durability == lease.Persistent && !d.Next.IsShared() {
		// Hand-off in the same record: what is written is the head's
		// grant, decided from the released entry; c is answered Unlocked
		// when it commits.
		h := a.popWaiter(s)
		if !h.granted {
			h.waited = now.Sub(h.queuedAt)
		}
		h.granted = true
		h.decision = a.decideLease(d.Next, &h.req.Request, now)
		h.decision.Next.Owner = append([]byte(nil), h.req.Owner...)
		c.handoff = h
		write = h.decision.Next
	}
	c.rec = recordOf(req.Resource, &write, s.index(), term, now)
	s.ext(req.Resource).inflight = c
	if c.group { // proposed with the group's other records, by doAll
		c.inbox = a.mailbox
		c.answer(Response{ready: true})
		return
	}
	a.hold(c)
}

// recordOf is the record that writes e as resource's entry, applied only
// on the record stored at base and in term's epoch.
func recordOf(resource string, e *lease.Entry, base, term uint64, now time.Time) durability.Record {
	return durability.Record{
		Resource:       resource,
		Owner:          e.Owner,
		ExpiresMs:      e.Expires.UnixMilli(),
		Token:          e.Token,
		Revision:       e.Revision,
		Locked:         e.State == lease.Held,
		LastModifiedMs: now.UnixMilli(),
		Limit:          e.Limit,
		Slots:          slotsOf(e),
		RW:             e.RW,
		Exclusive:      e.Exclusive,
		Renewed:        e.Renewed,
		Base:           base,
		Term:           term,
	}
}

// hold keeps c's record, whose write is now its resource's in flight, to
// be proposed once the current message is handled.
func (a *lockActor) hold(c *call) {
	c.inbox = a.mailbox
	c.held = true
	a.held = append(a.held, c)
}

// proposeHeld proposes the records held while handling a message, in the
// order their writes were decided; a record that writes folded in (fold)
// is made again, once, from the last of them.
func (a *lockActor) proposeHeld() {
	for i, c := range a.held {
		a.held[i] = nil
		c.held = false
		if len(c.batch) > 0 {
			c.rec = recordOf(c.req.Resource, c.pending(), c.rec.Base, c.rec.Term, a.cfg.Now())
		}
		a.cfg.Backend.Propose(c.req.Partition, &c.rec, c)
	}
	a.held = a.held[:0]
}

// fold decides c on the entry its resource will have once the write held
// for proposal (s.inflight, not proposed yet) commits, with the writes
// folded into it before c, and if that decision is a persistent write
// answered only when it commits, folds c's write into the same record:
// the record then writes the last of these entries, and its outcome
// answers each call as it would answer the call alone. Every write of one
// resource decided while handling one message (the calls queued behind a
// commit, the waiters it lets in) so costs one Raft record, which is what
// lets a lock's many readers or a semaphore's many permits be granted and
// released at the rate of the callers, not of one commit each. A
// decision that would answer at once (Busy, a read) is not folded: it
// must be made on what is committed, so c then waits for the record. It
// reports whether c was folded; if not, nothing changed.
func (a *lockActor) fold(s *slot, c *call) bool {
	f := s.writing()
	req := &c.req
	if f == nil || !f.held || f.req.forget || f.handoff != nil || c.gone || req.forget ||
		(req.Op == lease.TryLock && req.Durability != lease.Persistent) {
		return false
	}
	term, ok := a.cfg.Serving(req.Partition)
	if !ok || term != f.rec.Term {
		return false
	}
	now := a.cfg.Now()
	d := a.decideLease(*f.pending(), &req.Request, now)
	switch {
	case !d.Write || d.Status == lease.Busy:
		return false
	case d.Status == lease.Locked && d.Next.IsShared() && len(s.waiting()) > 0 && c.queuedAt.IsZero():
		return false // first come, first served (decide): c is to wait
	case req.Op == lease.Unlock && len(s.waiting()) > 0 && !d.Next.IsShared():
		return false // decided alone, it writes the head waiter's grant with it
	}
	ownOwner(&req.Request, &d)
	if !c.queuedAt.IsZero() && !c.granted {
		c.waited = now.Sub(c.queuedAt)
	}
	c.decision = d
	if d.Status == lease.Locked {
		c.granted = true
	}
	s.lastUsed = a.since(now)
	f.batch = append(f.batch, c) // proposeHeld writes its record from the last
	return true
}

// ownOwner copies the owner d.Next takes from req, which aliases the
// caller's buffer (the caller may reuse it): a lock's grant's, or a
// proclaim's new owner. A semaphore's or read/write lock's slots have
// their own copy.
func ownOwner(req *lease.Request, d *lease.Decision) {
	switch {
	case req.Op == lease.TryLock && !d.Next.IsShared():
		d.Next.Owner = append([]byte(nil), req.Owner...)
	case req.NewOwner != nil:
		d.Next.Owner = append([]byte(nil), req.NewOwner...)
	}
}

// pending is the entry f's record writes: the last decision folded into
// it, or f's own.
func (f *call) pending() *lease.Entry {
	if n := len(f.batch); n > 0 {
		return &f.batch[n-1].decision.Next
	}
	return &f.decision.Next
}

// foldOrHandle folds c into the record held for its resource (fold), or
// else handles it.
func (a *lockActor) foldOrHandle(c *call) {
	if c.abandoned.Load() {
		return
	}
	if s := a.entries[c.req.Resource]; s != nil && (s.x == nil || s.x.queue == nil) && a.fold(s, c) {
		return
	}
	a.handle(c)
}

// decideLease is lease.DecideRequest, with the rules the negative
// controls' knobs break broken: the token rule under
// Config.UnsafeTokenRepeat (a grant to a new owner takes the entry's, a
// slot's, or a read/write lock's last token again instead of one more),
// exclusion under Config.UnsafePermitOvercommit (overcommit).
func (a *lockActor) decideLease(e lease.Entry, r *lease.Request, now time.Time) lease.Decision {
	if a.cfg.UnsafePermitOvercommit && e.IsShared() && r.Op == lease.TryLock && !r.Resize {
		return overcommit(e, r, now)
	}
	if a.cfg.UnsafeProclaimAnyValue && r.NewOwner != nil && len(e.Owner) >= lease.CandidateIDBytes &&
		string(e.Owner[:lease.CandidateIDBytes]) == string(r.Owner[:lease.CandidateIDBytes]) {
		loose := *r
		loose.Owner = e.Owner // any value of the candidate counts as the holder
		r = &loose
	}
	d := lease.DecideRequest(e, r, now)
	if a.cfg.UnsafeTokenRepeat && r.Op == lease.TryLock && d.Write {
		repeatToken(e, &d)
	}
	markRenewed(e, r, &d)
	return d
}

// repeatToken makes grant d, decided on e, take e's last token again
// instead of one more: a lock's, a semaphore slot's, or a read/write
// lock's epoch. Config.UnsafeTokenRepeat only.
func repeatToken(e lease.Entry, d *lease.Decision) {
	switch {
	case d.Next.IsSemaphore() && e.IsSemaphore() && len(d.Grants) > 0: // a resize grants nothing
		for i, g := range d.Grants {
			if old := e.Slots[g.Slot].Token; old > 0 {
				d.Grants[i].Token, d.Next.Slots[g.Slot].Token = old, old
			}
		}
		d.Token = d.Grants[0].Token
	case d.Next.RW && e.RW && d.Token > e.Token:
		d.Token, d.Next.Token, d.Grants[0].Token = e.Token, e.Token, e.Token // a write without a new epoch
		for i := range d.Next.Slots {
			d.Next.Slots[i].Token = min(d.Next.Slots[i].Token, e.Token)
		}
	case !d.Next.IsShared() && e.State != lease.Absent && d.Token > e.Token:
		d.Token, d.Next.Token = e.Token, e.Token
	}
}

// overcommit decides r as if every other holder's lease had lapsed: a
// semaphore's live permits granted again (the others keep theirs), a
// read/write lock granted over its live holders (who are dropped, and
// find out at their next Extend). Config.UnsafePermitOvercommit only.
func overcommit(e lease.Entry, r *lease.Request, now time.Time) lease.Decision {
	real := e
	e.Slots = slices.Clone(e.Slots)
	for i := range e.Slots {
		if string(e.Slots[i].Owner) != string(r.Owner) {
			e.Slots[i].Expires = time.Time{} // taken as lapsed long ago
		}
	}
	d := lease.DecideRequest(e, r, now)
	if d.Write && e.IsSemaphore() {
		for i := range d.Next.Slots { // the slots not granted keep their leases
			if !slices.ContainsFunc(d.Grants, func(g lease.Grant) bool { return g.Slot == i }) {
				d.Next.Slots[i] = real.Slots[i]
			}
		}
		if real.Expires.After(d.Next.Expires) {
			d.Next.Expires = real.Expires
		}
	}
	return d
}

// windowRoom reports whether an ephemeral grant (of token), extension of
// ttl or release may be made for c in p's window of term: a grant's token
// below the window's limit, a TTL within its bound (a new leader waits out
// as long as the longest TTL it allows), and for any of them a window not
// sealed by a hand-over. If not, c is answered MustRetry, with the raise
// to wait for before asking again (Ring.Do), and nothing changes. A grant
// past the window's soon mark raises its limit in the background.
func (a *lockActor) windowRoom(c *call, p int, term uint64, token int64, ttl time.Duration) bool {
	w, ok := a.cfg.Tokens.TokenWindow(p, term)
	grant := c.req.Op == lease.TryLock
	var raise func() <-chan struct{}
	switch {
	case !ok:
	case w.Sealed:
		raise = func() <-chan struct{} { return a.cfg.Tokens.RaiseTTL(p, term, max(ttl, time.Millisecond)) }
	case grant && token >= w.Limit:
		raise = func() <-chan struct{} { return a.cfg.Tokens.RaiseTokens(p, term, token+1) }
	case ttl > w.TTL:
		raise = func() <-chan struct{} { return a.cfg.Tokens.RaiseTTL(p, term, ttl) }
	default:
		if grant && token >= w.Soon {
			a.cfg.Tokens.RaiseTokens(p, term, token+1)
		}
		return true
	}
	resp := Response{Status: a.notGranted(c, lease.MustRetry)}
	if resp.Status == lease.MustRetry && raise != nil {
		resp.raise = raise()
	}
	c.answer(resp)
	return false
}

// uncache drops s, the slot of resource name, from the cache. Its token is
// kept in the partition's floor if an ephemeral grant set it, since no
// store knows it.
func (a *lockActor) uncache(name string, s *slot) {
	a.keep(name, s)
	if s.kind.durability() == lease.Ephemeral && s.State != lease.Absent && s.Token >= a.floors[s.partition()] && !a.cfg.UnsafeNoEvictionFloor {
		a.floors[s.partition()] = s.Token + 1
	}
	delete(a.entries, name)
}

// floor is the least token a first grant of a name of p, loaded now,
// may take.
func (a *lockActor) floor(p int) int64 {
	return max(a.cfg.Tokens.TokenBase(p), a.floors[p])
}

// admit decides whether s, the new slot of c's resource, is cached, and
// reports whether c is to be decided on it as a cached entry.
//   - A decision that changes the entry, or leaves c waiting on it, needs
//     the entry cached. If the actor holds MaxEntries, lapsed idle entries
//     are evicted first (makeRoom); if there is still no room, c is
//     answered MustRetry, with nothing applied (backpressure).
//   - A read (Get, or an Unlock or Extend that finds no lease) is answered
//     from s without caching it when nothing is stored (a name never
//     locked leaves no entry behind: s is what the next miss loads again)
//     or the actor is full; a loaded record is cached while there is room,
//     so the next request need not load it.
func (a *lockActor) admit(c *call, s *slot, term uint64, now time.Time) bool {
	req := &c.req
	d := lease.DecideRequest(s.Entry, &req.Request, now)
	needed := d.Write || (d.Status == lease.Busy && c.waits())
	switch {
	case needed && !a.room(now):
		a.refused.Add(1)
		c.answer(Response{Status: a.notGranted(c, lease.MustRetry)})
		return false
	case needed, s.State != lease.Absent && !a.full():
		a.entries[c.req.Resource] = s
		return true
	}
	a.decide(c, s, term, now) // a read: answered from s, which is not kept
	return false
}

// complete answers a call whose persistent write has an outcome, then
// hands the lock to the next waiter if it is free, and replays the calls
// that queued behind the write.
func (a *lockActor) complete(c *call) {
	s := a.entries[c.req.Resource] // never evicted while in flight
	x := s.x                       // set while in flight
	x.inflight = nil
	h := c.handoff
	c.handoff = nil
	batch := c.batch
	c.batch = nil
	resp := Response{Status: c.decision.Status, Token: c.decision.Token, Grants: c.decision.Grants, Free: c.decision.Free, Waited: c.waited}
	unknown := false // the record may have applied
	switch {
	case c.err == nil && c.req.forget:
		s.dropped = true // removed: the next request loads the floor
	case c.err == nil:
		now := a.cfg.Now()
		a.changed(s, c.decision.Next, lease.Persistent, eventOf(c.req.Op), now)
		s.stored(c.index, storedTTL(&c.rec))
		s.renewed = false
		if h != nil {
			a.changed(s, h.decision.Next, lease.Persistent, Acquired, now)
			h.answer(Response{Status: h.decision.Status, Token: h.decision.Token, Waited: h.waited})
			h = nil
		}
		for _, m := range batch {
			d := &m.decision
			a.changed(s, d.Next, lease.Persistent, eventOf(m.req.Op), now)
			m.answer(Response{Status: d.Status, Token: d.Token, Grants: d.Grants, Free: d.Free, Waited: m.waited})
		}
		batch = nil
		s.lastUsed = a.since(a.cfg.Now())
	case errors.Is(c.err, durability.ErrRetry):
		// Certainly not committed: the cached entry is still right. (An
		// earlier grant to c, if it is a waiter, may have been.)
		c.granted = c.unsure
		resp = Response{Status: a.notGranted(c, lease.MustRetry)}
	case errors.Is(c.err, durability.ErrFenced):
		// Committed but rejected: nothing changed, but the entry it was
		// decided from is stale (a newer epoch or a newer record): reload.
		c.granted = c.unsure
		resp = Response{Status: a.notGranted(c, lease.MustRetry)}
		s.dropped = true
	default:
		// Outcome unknown, or the store refused it: forget the entry so the
		// next request reloads what was really committed.
		a.cfg.Logger.Warn("persistent write not confirmed", "resource", c.req.Resource, "err", c.err)
		resp = Response{Status: lease.Errored}
		s.dropped = true
		unknown = true
	}
	for _, m := range batch { // not applied, or not known to be: as c
		st := lease.Errored
		if !unknown {
			m.granted = m.unsure
			st = a.notGranted(m, lease.MustRetry)
		}
		m.answer(Response{Status: st})
	}
	switch {
	case h == nil:
	case h.gone:
		// Its caller left while the hand-off was in flight: nothing to keep.
	case h.waitOver:
		h.unsure = h.unsure || unknown
		h.granted = h.unsure
		h.answer(Response{Status: a.notGranted(h, lease.Busy)}) // Errored if a grant of its may have applied
	default:
		// Certainly not applied: no lease of its began from this grant
		// (from an earlier one whose outcome is unknown, it may have).
		h.unsure = h.unsure || unknown
		h.granted = h.unsure
		// The hand-off did not commit (or may have): the waiter keeps its
		// place at the head. If its grant did apply, the reload shows it as
		// the holder and it is answered Locked with that token.
		x.waiters = slices.Insert(x.waiters, 0, h)
		a.nwaiting++
	}
	waiting := x.queue
	x.queue, x.queueTail, x.queued = nil, nil, 0
	var replay []*call
	if s.dropped {
		a.uncache(c.req.Resource, s)
		a.stopTimer(s)
		if _, ok := a.cfg.Serving(s.partition()); ok {
			// Decided again from the reloaded record, in their order.
			replay = x.waiters
			a.nwaiting -= len(x.waiters)
			x.waiters = nil
			a.endWatchers(s, ErrWatchMoved) // they watch again, and see the reloaded entry
		} else {
			a.flush(s, lease.MustRetry)
		}
	}
	c.answer(resp) // c belongs to its caller from here on
	if !s.dropped {
		a.settle(s)
	}
	for _, w := range replay {
		a.safely(w, a.handle)
	}
	for waiting != nil {
		next := waiting.next
		waiting.next = nil
		a.safely(waiting, a.foldOrHandle)
		waiting = next
	}
}

// settle hands the lock to the head waiter if it is free, and sets the
// timer that notices when the holder's lease ends.
func (a *lockActor) settle(s *slot) {
	if s.mayLapse() {
		a.noteLapse(s, a.cfg.Now())
	}
	a.settleRest(s)
}

// settleAt is settle right after a decision made at now, in the same
// step: a lapse since then is told when s's timer fires, at most a
// decision's time later.
func (a *lockActor) settleAt(s *slot, now time.Time) {
	a.noteLapse(s, now)
	a.settleRest(s)
}

func (a *lockActor) settleRest(s *slot) {
	a.handOff(s)
	a.arm(s)
	s.tidy()
}

// handOff grants the lock to the waiters at the head of s's queue while
// it is free, and no write is in flight or the one in flight is not
// proposed yet (they join its record): the next waiter is granted in the
// same step as the release or expiry, without a request of its own. Each
// grant is a decision like any other: made only while this node serves the
// partition, tagged with its term.
func (a *lockActor) handOff(s *slot) {
	for len(s.waiting()) > 0 {
		w := s.x.waiters[0]
		e := &s.Entry
		if f := s.x.inflight; f != nil {
			e = f.pending()
		}
		if e.IsSemaphore() && w.req.Permits <= e.Limit {
			// A request that stated the limit when it was queued follows
			// a resize since: it was right when it asked. (One for more
			// permits than a shrink left is refused, naming both limits.)
			w.req.Limit = e.Limit
		}
		if s.x.inflight != nil {
			// Granted with the write in flight if that is not proposed
			// yet: one record for the release and the grants it allows.
			if !a.fold(s, w) {
				return
			}
			a.popWaiter(s)
			continue
		}
		now := a.cfg.Now()
		if s.blocks(w, now) {
			return
		}
		term, ok := a.cfg.Serving(s.partition())
		if !ok {
			a.flush(s, lease.MustRetry)
			return
		}
		a.decide(a.popWaiter(s), s, term, now)
	}
}

// blocks reports whether s cannot be granted to the waiter w now: a lock
// with a live holder; a semaphore without w's permits free, a read/write
// lock held in a mode w cannot share (what w's decision would say). The
// head waits for what it asks, and nobody behind it is served first: a
// request for several permits is never postponed by later smaller ones,
// nor a writer by later readers.
func (s *slot) blocks(w *call, now time.Time) bool {
	if s.IsShared() {
		return lease.DecideRequest(s.Entry, &w.req.Request, now).Status == lease.Busy
	}
	return s.Live(now)
}

func (a *lockActor) popWaiter(s *slot) *call {
	x := s.x
	h := x.waiters[0]
	x.waiters[0] = nil
	x.waiters = x.waiters[1:]
	if len(x.waiters) == 0 {
		x.waiters = nil // let the backing array go
	}
	a.nwaiting--
	return h
}

// arm keeps one timer per slot with waiters, or with watchers of a held
// lock, set for the holder's expiry or before it. One set before it is
// kept: when it fires, the wake finds the lease live and arms again. On a
// hot lock each hand-off's new holder expires later than the last, and a
// timer made anew for each (a timer, its function and its wake message)
// was a tenth of a hand-off's allocations; now it is made once a lease
// term.
func (a *lockActor) arm(s *slot) {
	if (len(s.waiting()) == 0 && !s.watchedHeld()) || s.writing() != nil {
		a.stopTimer(s) // the write's completion settles s again
		return
	}
	now := a.cfg.Now()
	at := s.Expires
	if lapse, ok := s.NextLapse(now); ok && (len(s.waiting()) > 0 || s.IsShared()) {
		// A semaphore's waiter may be served when its first permit lapses;
		// a shared kind's watchers hear of each holder's lapse.
		at = lapse
	}
	x := s.x // waiters or watchers: set
	if x.timer != nil && !x.timerAt.After(at) {
		return
	}
	a.stopTimer(s)
	x.timerGen++
	x.timerAt = at
	// A lease is live up to and including its expiry: fire just after.
	d := at.Sub(now) + time.Nanosecond
	msg := &wake{s: s, x: x, gen: x.timerGen}
	self, root := a.self, a.root
	x.timer = a.cfg.afterFunc(d, func() { root.Send(self, msg) }) // sends only: state stays on the actor
}

func (a *lockActor) stopTimer(s *slot) {
	if x := s.x; x != nil && x.timer != nil {
		x.timer.Stop()
		x.timer = nil
	}
}

// flush answers every waiter of s with st and empties its queue, and ends
// its watches: it is no longer served here.
func (a *lockActor) flush(s *slot, st lease.Status) {
	a.endWatchers(s, ErrWatchMoved)
	for _, w := range s.waiting() {
		w.answer(Response{Status: a.notGranted(w, st)})
	}
	if s.x != nil {
		a.nwaiting -= len(s.x.waiters)
		s.x.waiters = nil
	}
	a.stopTimer(s)
}

// leave marks a waiting call whose wait or caller ended, and takes it out
// of its resource's queue if it is there.
func (a *lockActor) leave(m *leave) {
	c := m.c
	if m.waitOver {
		c.waitOver = true
	} else {
		c.gone = true
		if c.async.done != nil {
			// Answered now, from the actor, so that a release its
			// caller sends after this answer comes after the leave.
			defer c.async.ring.async.finish(c, Response{}, m.err)
		}
	}
	s := a.entries[c.req.Resource]
	if s == nil {
		return
	}
	i := slices.Index(s.waiting(), c)
	if i < 0 {
		return // not queued (yet, or any more): its flags decide
	}
	s.x.waiters = slices.Delete(s.x.waiters, i, i+1)
	a.nwaiting--
	if m.waitOver {
		st := lease.Busy
		if _, ok := a.cfg.Serving(s.partition()); !ok {
			st = lease.MustRetry
		}
		c.answer(Response{Status: a.notGranted(c, st)})
	}
	a.settle(s) // a semaphore's next waiter may ask for fewer permits than the one that left
}

// notServing is the answer to c when this node does not serve its
// partition at decision time: MustRetry with why, so that a client (or a
// test) that sees it knows it was the leadership and not a bound.
func (a *lockActor) notServing(c *call) Response {
	st := a.notGranted(c, lease.MustRetry)
	if st != lease.MustRetry {
		return Response{Status: st}
	}
	return Response{Status: st, Reason: notServingReason}
}

// notServingReason is the reason of a MustRetry answered because the node
// did not serve the partition when it decided: its leader lease lapsed,
// or the partition is between leaders.
const notServingReason = "partition not served here now (its leader lease lapsed, or it is between leaders)"

// notGranted is the answer st (Busy, MustRetry: certainly not granted) to
// the waiter w that leaves the queue without a grant, unless a hand-off
// to w may have applied (its outcome unknown: w.granted, and w put back):
// then w may hold the lock, and is told Errored.
func (a *lockActor) notGranted(w *call, st lease.Status) lease.Status {
	if (w.granted || w.unsure) && !a.cfg.UnsafeUnsureNotGranted {
		return lease.Errored
	}
	return st
}

// drop forgets every entry of partition p and answers its waiters
// MustRetry. An entry with a write in flight is forgotten when the write
// completes.
func (a *lockActor) drop(p int) {
	delete(a.floors, p)          // the next reign's base is above them
	a.forgetKept(p, time.Time{}) // the next reign's floor is above them
	for _, l := range a.loading {
		if l.partition == p {
			l.dropped = true // what is read may predate the new leader's fence
		}
	}
	for k, s := range a.entries {
		if s.partition() != p {
			continue
		}
		a.flush(s, lease.MustRetry)
		if s.writing() != nil {
			s.dropped = true
			continue
		}
		delete(a.entries, k)
	}
}

// eventOf is what a write by op tells watchers.
func eventOf(op lease.Op) EventKind {
	switch op {
	case lease.Extend:
		return Extended
	case lease.Unlock:
		return Released
	}
	return Acquired
}
