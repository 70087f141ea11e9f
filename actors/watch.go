package actors

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// The change feed of a lock lives where its truth is: in the lock actor of
// the resource. A slot keeps a list of watchers, and every change of its
// entry (a grant, an extension, a release, and the holder's lease lapsing,
// which the slot's timer notices as it does for the head of the wait queue)
// is sent to each of them in the same step that makes it. Like the wait
// queue, watchers are the partition leader's memory only: when the
// partition moves, the node stops serving it or the entry is reloaded from
// the store, every watch of it ends with ErrWatchMoved, and its watcher
// watches again (from the last revision it saw) wherever the lock is
// served now.

// Bounds of watching.
const (
	// MaxWatchers bounds the watchers of one resource: another Watch is
	// refused with ErrTooManyWatchers.
	MaxWatchers = 1024
	// WatchBuffer is how many events a watch holds for its reader. The
	// actor never waits for a reader: a watch whose buffer is full when an
	// event is due ends with ErrWatchSlow.
	WatchBuffer = 64
)

// Why a watch ended, or was refused. ErrWatchMoved and ErrWatchSlow mean
// "watch again from the last revision seen".
var (
	ErrWatchMoved      = errors.New("actors: watch ended: the lock is no longer served here (partition moved or entry reloaded)")
	ErrWatchSlow       = errors.New("actors: watch ended: its reader fell behind")
	ErrTooManyWatchers = errors.New("actors: too many watchers of this resource")
	// ErrFull: the resource's actor caches Config.MaxEntries entries, none
	// of which could be evicted; a watch needs one. Watch again later.
	ErrFull = errors.New("actors: lock actor full (cached entries at MaxEntries): retry later")
)

// EventKind says what changed.
type EventKind uint8

const (
	// Acquired: granted to Owner (a new grant, with a new token).
	Acquired EventKind = iota + 1
	// Extended: Owner's lease now ends at Expires.
	Extended
	// Released: unlocked by its holder (or never locked, for a watch's
	// first event).
	Released
	// Expired: Owner's lease ended without a release.
	Expired
)

func (k EventKind) String() string {
	switch k {
	case Acquired:
		return "acquired"
	case Extended:
		return "extended"
	case Released:
		return "released"
	case Expired:
		return "expired"
	}
	return "unknown"
}

// Event is one change of a watched lock. Owner is shared with the actor's
// cache and must not be modified.
type Event struct {
	Kind    EventKind
	Owner   []byte // the holder (Acquired, Extended, Expired)
	Token   int64
	Expires time.Time // the end of the lease, on the actors' clock
	// Revision counts the lock's writes: each grant, extension and release
	// moves it on by one, but for a persistent renewal kept in memory
	// (renew.go), which is not stored. An Expired event carries the
	// revision of the lease that ended.
	Revision   uint64
	Durability lease.Durability // how the lock was granted
	// Current marks a watch's first event: the state when it started
	// (Acquired while held, Expired once its lease has lapsed, Released
	// when free), not a change.
	Current bool
	// Holders, for a semaphore or a read/write lock, are its live holders
	// once the change is made (Owner is then nil, Expires the last
	// holder's, Token the highest granted): a grant, extension or release
	// of one holder is Acquired, Extended or Released, the lapse of one
	// or more is Expired, each with the holders left.
	Holders []lease.Holder
}

// Watch is one subscription to a lock's changes. Read its events from C;
// C is closed when the watch ends, after which Err says why.
type Watch struct {
	C    <-chan Event
	c    chan Event
	err  error // set by the actor before it closes c
	r    *Ring
	res  string
	stop chan struct{}
	once sync.Once
}

// Err is why the watch ended, once C is closed: ErrWatchMoved or
// ErrWatchSlow (watch again from the last revision), ErrClosed, or nil
// after Stop.
func (w *Watch) Err() error { return w.err }

// Stop ends the watch; C is closed soon after. Idempotent.
func (w *Watch) Stop() {
	w.once.Do(func() {
		close(w.stop)
		w.r.system.Root.Send(w.r.route(w.res), &unwatch{w: w})
	})
}

type watchMsg struct {
	w     *Watch
	req   Request
	from  uint64
	reply chan error
}

type unwatch struct{ w *Watch }

// Watch subscribes to the changes of req.Resource (req.Partition set by
// the caller; Op, Owner, TTL and Durability are ignored) on this node,
// which must serve its partition (lease.MustRetry-like ErrWatchMoved if
// not). The watch's first event is the current state, unless from is that
// state's revision and the state is not an expiry (the watcher has seen
// it); then come the changes, in the order the actor made them. It ends
// when ctx ends or Stop is called (C is closed, Err is nil), or as Err
// says. Close of the ring leaves C open: a reader also watches its ctx.
func (r *Ring) Watch(ctx context.Context, req Request, from uint64) (*Watch, error) {
	if r.closed.Load() {
		return nil, ErrClosed
	}
	c := make(chan Event, WatchBuffer)
	w := &Watch{C: c, c: c, r: r, res: req.Resource, stop: make(chan struct{})}
	m := &watchMsg{w: w, req: req, from: from, reply: make(chan error, 1)}
	r.system.Root.Send(r.route(req.Resource), m)
	select {
	case err := <-m.reply:
		if err != nil {
			return nil, err
		}
	case <-ctx.Done():
		w.Stop()
		return nil, ctx.Err()
	case <-r.done:
		return nil, ErrClosed
	}
	context.AfterFunc(ctx, w.Stop)
	return w, nil
}

// watch adds a watcher to its resource's slot and gives it the current state.
func (a *lockActor) watch(m *watchMsg) {
	if !a.watchable(m) {
		return
	}
	s := a.entries[m.req.Resource]
	if s == nil {
		a.load(m.req.Resource, m.req.Partition, m) // watched once its record is read
		return
	}
	a.watchOn(m, s, true)
}

// watchLoaded adds m's watcher to s, the slot its resource's record was
// just loaded into.
func (a *lockActor) watchLoaded(m *watchMsg, s *slot) {
	if a.watchable(m) {
		a.watchOn(m, s, false)
	}
}

// watchable answers m and reports false if its watch is over already or
// this node does not serve its partition.
func (a *lockActor) watchable(m *watchMsg) bool {
	select {
	case <-m.w.stop:
		m.reply <- context.Canceled
		return false
	default:
	}
	if _, ok := a.cfg.Serving(m.req.Partition); !ok {
		m.reply <- ErrWatchMoved
		return false
	}
	return true
}

// watchOn adds m's watcher to s (cached: s is in the cache).
func (a *lockActor) watchOn(m *watchMsg, s *slot, cached bool) {
	now := a.cfg.Now()
	if !cached {
		if !a.room(now) {
			a.refused.Add(1)
			m.reply <- ErrFull
			return
		}
		a.entries[m.w.res] = s
	}
	if len(s.watching()) >= MaxWatchers {
		m.reply <- ErrTooManyWatchers
		return
	}
	x := s.ext(m.w.res) // tellHolders below notes what the watchers were told
	a.noteLapse(s, now) // the others hear of a lapse before the newcomer's state
	ev := Event{Kind: Released, Token: s.Token, Revision: s.Revision, Durability: s.kind.durability(), Current: true}
	if s.State == lease.Held {
		ev.Kind, ev.Owner, ev.Expires = Acquired, s.Owner, s.Expires
		if !s.Live(now) {
			ev.Kind = Expired
		}
	}
	if s.IsShared() {
		// Expired when a holder of this revision has lapsed since (so a
		// watcher that saw the revision is told again: the lapse does not
		// move it), else Acquired while held, Released when free.
		a.tellHolders(s, &ev, now)
		switch {
		case len(ev.Holders) < s.HeldSlots():
			ev.Kind = Expired
		case len(ev.Holders) > 0:
			ev.Kind = Acquired
		default:
			ev.Kind = Released
		}
	}
	if m.from == 0 || ev.Revision != m.from || ev.Kind == Expired {
		m.w.c <- ev // a fresh buffer has room
	}
	x.watchers = append(x.watchers, m.w)
	s.lastUsed = a.since(now)
	a.arm(s) // before the reply: once Watch returns, the expiry is watched
	m.reply <- nil
}

// unwatch removes a watcher and closes its channel.
func (a *lockActor) unwatch(m *unwatch) {
	s := a.entries[m.w.res]
	if s == nil {
		return
	}
	if i := slices.Index(s.watching(), m.w); i >= 0 {
		s.x.watchers = slices.Delete(s.x.watchers, i, i+1)
		close(m.w.c)
		a.arm(s)
		s.tidy()
		a.forgetIfBlank(m.w.res, s)
	}
}

// changed sets s's entry to next, granted as kind, and tells its watchers
// what happened: a lapse of the previous holder first, if not told yet.
func (a *lockActor) changed(s *slot, next lease.Entry, kind lease.Durability, what EventKind, now time.Time) {
	if what != Extended || s.IsShared() {
		// A lock's Extend was decided on a live lease (committed later,
		// its old expiry may have passed since): it never lapsed.
		a.noteLapse(s, now)
	}
	s.Entry, s.kind, s.lapseTold = next, kindOf(kind), false
	if len(s.watching()) == 0 {
		return
	}
	ev := Event{Kind: what, Token: s.Token, Revision: s.Revision, Durability: kind}
	if what != Released {
		ev.Owner, ev.Expires = s.Owner, s.Expires
	}
	if s.IsShared() {
		a.tellHolders(s, &ev, now)
	}
	a.emit(s, ev)
}

// tellHolders makes ev, an event of s, a shared kind's: its live holders,
// the last one's expiry, no single owner; and notes how many holders the
// watchers now know to be live, whose lapses noteLapse tells.
func (a *lockActor) tellHolders(s *slot, ev *Event, now time.Time) {
	ev.Holders = lease.HoldersOf(&s.Entry, now)
	ev.Owner, ev.Expires = nil, time.Time{}
	if last, ok := s.LastLapse(now); ok {
		ev.Expires = last
	}
	s.x.toldLive = len(ev.Holders) // set: s has watchers, or is getting one (watchOn)
}

// noteLapse tells s's watchers that its holder's lease has ended, once per
// lease.
func (a *lockActor) noteLapse(s *slot, now time.Time) {
	if !s.mayLapse() {
		return
	}
	if s.IsShared() {
		a.noteHolderLapses(s, now)
		return
	}
	if s.lapseTold || s.Live(now) {
		return
	}
	// A lapse seen in the cache is news only from the node that serves the
	// partition: a deposed one (its lease out, no leader event yet) may
	// miss an Extend made through the new leader. Its watchers re-watch.
	if len(s.watching()) > 0 {
		if _, ok := a.cfg.Serving(s.partition()); !ok {
			a.endWatchers(s, ErrWatchMoved)
			return
		}
	}
	s.lapseTold = true
	a.emit(s, Event{Kind: Expired, Owner: s.Owner, Token: s.Token, Expires: s.Expires, Revision: s.Revision, Durability: s.kind.durability()})
}

// mayLapse reports whether s has a lease whose lapse noteLapse could
// tell: a held lock's, or a shared kind's holders'. A free lock has none,
// and settling it reads no clock.
func (s *slot) mayLapse() bool { return s.State == lease.Held || s.IsShared() }

// noteHolderLapses is noteLapse for a semaphore or a read/write lock: it
// tells s's watchers that holders they were told of as live have lapsed
// (one Expired, with the holders left), once per lapse.
func (a *lockActor) noteHolderLapses(s *slot, now time.Time) {
	if len(s.watching()) == 0 || len(lease.HoldersOf(&s.Entry, now)) >= s.x.toldLive {
		return
	}
	if _, ok := a.cfg.Serving(s.partition()); !ok {
		a.endWatchers(s, ErrWatchMoved) // as noteLapse: a deposed node's lapse is no news
		return
	}
	ev := Event{Kind: Expired, Token: s.Token, Revision: s.Revision, Durability: s.kind.durability()}
	a.tellHolders(s, &ev, now)
	a.emit(s, ev)
}

// emit sends ev to every watcher of s, never waiting: a watcher without
// room is ended with ErrWatchSlow.
func (a *lockActor) emit(s *slot, ev Event) {
	if len(s.watching()) == 0 {
		return
	}
	s.x.watchers = slices.DeleteFunc(s.x.watchers, func(w *Watch) bool {
		select {
		case w.c <- ev:
			return false
		default:
			w.err = ErrWatchSlow
			close(w.c)
			return true
		}
	})
}

// endWatchers ends every watch of s with err.
func (a *lockActor) endWatchers(s *slot, err error) {
	for _, w := range s.watching() {
		w.err = err
		close(w.c)
	}
	if s.x != nil {
		s.x.watchers = nil
	}
}

// watchedHeld reports whether s has watchers to tell of its holder's
// lapse (of a shared kind's: of a holder they know of).
func (s *slot) watchedHeld() bool {
	if s.IsShared() {
		return len(s.watching()) > 0 && s.x.toldLive > 0
	}
	return len(s.watching()) > 0 && s.State == lease.Held && !s.lapseTold
}
