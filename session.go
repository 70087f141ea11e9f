package kahuna

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// A session is one lease for many locks. It holds a lease of its own, the
// lock "session:" + its ID, whose owner is the ID; every lock acquired
// WithSession is held by that same owner (an election's candidate, by the
// ID followed by its value) with the session's TTL and durability, and has
// no keepalive of its own: one loop renews the session and all its locks
// together, every third of the TTL, in one request where the server takes
// a batch (session_batch.go). The server keeps a lease per lock, each
// renewal sets them all from the same request, so when the session's
// holder dies, its locks free themselves together when the lease ends.
//
// Because the owner is the ID, a process that restarts can take its
// session back (ResumeSession) and, acquiring the names it held with it,
// get them back with the same fencing tokens: no one else can have held
// them in between.

// SessionPrefix is what a session's ID is prefixed with to name its own
// lease: `kahunactl get session:ID` shows it.
const SessionPrefix = lease.SessionPrefix

var (
	// ErrSessionClosed is the cause of the Contexts of a Session and of
	// its locks after Close (it matches ErrReleased), and what Acquire and
	// Campaign return on a closed session.
	ErrSessionClosed error = sessionClosedError{}
	// ErrSessionLost is the cause of a Session's Context when its lease is
	// gone (its deadline passed without a renewal, or a renewal found it
	// lapsed), and of the Context of each lock it held then; it matches
	// ErrLockLost. Acquire and Campaign return it on a lost session.
	ErrSessionLost error = sessionLostError{}
	// ErrNoSession: ResumeSession found no live session with that ID
	// (never created, closed, or its lease ended).
	ErrNoSession = errors.New("kahuna: no such session")
	// ErrHeldInSession: the session already holds that name; a second
	// Acquire or Campaign of it in one session would be the same lock.
	ErrHeldInSession = errors.New("kahuna: the session already holds it")
)

type sessionClosedError struct{}

func (sessionClosedError) Error() string { return "kahuna: session closed" }
func (sessionClosedError) Unwrap() error { return ErrReleased }

type sessionLostError struct{}

func (sessionLostError) Error() string { return "kahuna: session lost" }
func (sessionLostError) Unwrap() error { return ErrLockLost }

// Session is one lease kept alive for many locks and election candidacies
// (WithSession). Methods are safe for concurrent use.
type Session struct {
	id    string
	o     acquireOptions // ttl, durability, margin, clock
	lease *Lock          // the session's own lease

	ctx       context.Context
	cancel    context.CancelCauseFunc
	stopRenew context.CancelFunc
	renewing  chan struct{} // closed when the renewal loop has stopped

	// noBatch: the Locker cannot take a batch (session_batch.go); every
	// lock is renewed and released on its own.
	noBatch atomic.Bool

	mu     sync.Mutex
	locks  map[string]*Lock // held through the session, by resource
	closed bool
	lost   error // why the session was lost, once it is
}

// NewSession starts a session on l with a fresh ID: its lease is taken
// at once (persistent unless WithDurability says otherwise, for
// WithTTL, default 30 s) and renewed in the background until Close,
// Orphan, or its loss. opts are Acquire's; WithOwner and WithWait are
// ignored.
func NewSession(ctx context.Context, l Locker, opts ...AcquireOption) (*Session, error) {
	return startSession(ctx, l, string(NewOwner()), opts, false)
}

// ResumeSession takes back the live session id (a Session.ID of another
// process, or of this one before a restart) and renews it from now on,
// with the TTL and durability of opts (give the ones it was created
// with). It returns ErrNoSession if no live session has that ID, and a
// *StatusError with InvalidInput for an ID that cannot be one. Locks the
// session held are not attached again by themselves: Acquire each name
// WithSession, which gets it back with its fencing token unchanged if the
// session still holds it.
func ResumeSession(ctx context.Context, l Locker, id string, opts ...AcquireOption) (*Session, error) {
	if reason := lease.CheckSessionID(id); reason != "" {
		return nil, &StatusError{Op: "resume session", Resource: id, Status: InvalidInput, Reason: reason}
	}
	return startSession(ctx, l, id, opts, true)
}

func startSession(ctx context.Context, l Locker, id string, opts []AcquireOption, resume bool) (*Session, error) {
	o := acquireOptionsOf(opts)
	o.wait, o.session, o.suffix = 0, nil, nil
	o.owner, o.ownOwner = []byte(id), !resume
	name := SessionPrefix + id
	var before LockInfo
	if resume {
		info, r, err := l.Get(ctx, name, o.durability)
		switch {
		case err != nil:
			return nil, fmt.Errorf("kahuna: resume session %s: %w", lease.Excerpt(id), err)
		case r.Status == LockDoesNotExist || (r.Status == Got && string(info.Owner) != id):
			return nil, fmt.Errorf("kahuna: resume session %s: %w", lease.Excerpt(id), ErrNoSession)
		case r.Status != Got:
			return nil, &StatusError{Op: "resume session", Resource: id, Status: r.Status, Reason: r.Reason}
		}
		before = info
	}
	lk, err := Acquire(ctx, l, name, withOptions(o))
	if err != nil {
		return nil, err
	}
	if resume {
		// The lease may have ended between the Get and the TryLock, which
		// then began a new one: that is not the session asked for.
		if lk.FencingToken() != before.FencingToken {
			_ = lk.Unlock(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("kahuna: resume session %s: %w", lease.Excerpt(id), ErrNoSession)
		}
		// A TryLock by the holder does not refresh the lease: renew it
		// before counting on the deadline.
		if err := lk.Extend(ctx, o.ttl); err != nil {
			return nil, fmt.Errorf("kahuna: resume session %s: %w", lease.Excerpt(id), err)
		}
	}
	inner, cancel := context.WithCancelCause(lk.Context())
	renewCtx, stopRenew := context.WithCancel(context.Background())
	s := &Session{id: id, o: o, lease: lk, cancel: cancel, stopRenew: stopRenew,
		renewing: make(chan struct{}), locks: map[string]*Lock{}}
	s.ctx = &sessionContext{lockChildContext{Context: inner, lock: lk}, s}
	lk.mu.Lock()
	lk.leaseOf = s
	lk.mu.Unlock()
	go func() {
		defer close(s.renewing)
		// Every third of the TTL, until Close or Orphan (renewCtx) or the
		// session's loss (its lease's end).
		lk.keepAlive(renewCtx, o.ttl/3, s.renewAll)
	}()
	return s, nil
}

// sessionContext is a session's Context. Its Err also looks at the
// deadlines of the locks the session holds, and so reports the session's
// end as soon as any of them has passed, before that lock's timer fires
// (a lock lost ends its session).
type sessionContext struct {
	lockChildContext
	s *Session
}

func (c *sessionContext) Err() error {
	if lk := c.s.pastDeadline(); lk != nil {
		_ = lk.ctx.Err() // ends the lock, and so the session
	}
	return c.lockChildContext.Err()
}

// pastDeadline returns a lock the session holds whose deadline has
// passed, or one another goroutine is ending (still attached: a lock lost
// on its own ends the session before it detaches), or nil; the caller's
// lk.ctx.Err() then ends it or waits for its end. It allocates nothing:
// Err runs it on every check of the session's Context. (s.mu is taken
// before a lock's mu, never after.)
func (s *Session) pastDeadline() *Lock {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, lk := range s.locks {
		lk.mu.Lock()
		due := lk.state != held || lk.pastDeadline()
		lk.mu.Unlock()
		if due {
			return lk
		}
	}
	return nil
}

// withOptions sets every acquire option to o's.
func withOptions(o acquireOptions) AcquireOption { return func(p *acquireOptions) { *p = o } }

// ID is the session's ID: give it to ResumeSession to take the session
// back after a restart.
func (s *Session) ID() string { return s.id }

// TTL is the lease length of the session and of each of its locks.
func (s *Session) TTL() time.Duration { return s.o.ttl }

// Expires is the session's deadline: the send time of the last renewal
// the server granted, plus the TTL, minus the safety margin.
func (s *Session) Expires() time.Time { return s.lease.Expires() }

// Context ends when the session does: lost (cause ErrSessionLost, which
// matches ErrLockLost) at its deadline, when a renewal finds its lease
// gone, or when any lock it holds is lost on its own; or closed
// (ErrSessionClosed). So while it is live, every lock the session holds
// is. Its Err, like a Lock's, sees a deadline passed (its own or a held
// lock's) before the timer does.
func (s *Session) Context() context.Context { return s.ctx }

// WithSession makes Acquire or Campaign hold the lock in session s: its
// owner is the session's, its TTL and durability are the session's
// (WithTTL, WithDurability and WithOwner are ignored), and the session
// renews it, so it needs no KeepAlive. The Lock still has its own
// Context and Lost; when the session is lost, so is every lock it holds.
// Acquire returns ErrSessionClosed or ErrSessionLost on a session that
// ended, and ErrHeldInSession for a name the session already holds.
func WithSession(s *Session) AcquireOption {
	return func(o *acquireOptions) { o.session = s }
}

// apply makes o an acquisition in s, or says why it cannot be one.
func (s *Session) apply(o *acquireOptions, resource string) error {
	_ = s.ctx.Err() // not under s.mu: it finds a passed deadline, and ends the session then
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return ErrSessionClosed
	case s.lost != nil:
		return s.lost
	case s.locks[resource] != nil:
		return ErrHeldInSession
	}
	for _, name := range o.also {
		if s.locks[name] != nil {
			return ErrHeldInSession
		}
	}
	o.owner, o.ownOwner = append([]byte(s.id), o.suffix...), false
	o.ttl, o.durability, o.margin, o.marginSet, o.clock = s.o.ttl, s.o.durability, s.o.margin, s.o.marginSet, s.o.clock
	return nil
}

// attach adds lk, granted in the session, to its locks; if the session
// ended meanwhile, the lock ends with it.
func (s *Session) attach(lk *Lock) {
	s.mu.Lock()
	ended := s.closed || s.lost != nil
	if !ended {
		s.locks[lk.resource] = lk
	}
	s.mu.Unlock()
	switch {
	case ended:
		lk.end(lost, ErrSessionLost)
	case lk.ended() != nil: // it ended before it was added: its end found nothing to detach
		s.detach(lk)
	}
}

// detach forgets lk (it was released or lost).
func (s *Session) detach(lk *Lock) {
	s.mu.Lock()
	if s.locks[lk.resource] == lk {
		delete(s.locks, lk.resource)
	}
	s.mu.Unlock()
}

// held lists the session's locks.
func (s *Session) held() []*Lock {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Lock, 0, len(s.locks))
	for _, lk := range s.locks {
		out = append(out, lk)
	}
	return out
}

// endLocks ends the session and its locks when its lease is lost (with
// cause): the locks' leases may outlive it on the server by a renewal,
// but no one renews them now. When the server said the session's own
// lease is gone, the locks are then released (their holders have stopped:
// their Contexts ended first), so their waiters need not wait for the
// leases' ends; a session that is gone cannot be resumed meanwhile.
func (s *Session) endLocks(cause error) {
	s.mu.Lock()
	s.lost = cause // no lock attaches after this
	s.mu.Unlock()
	locks := s.held()
	for _, lk := range locks {
		lk.end(lost, cause)
	}
	s.cancel(cause)
	if len(locks) > 0 && s.foundGone(cause) {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			defer cancel()
			_ = s.releaseAll(ctx, locks) // best effort: the leases end anyway
		}()
	}
}

// foundGone reports whether cause says the server found the session's own
// lease gone (not a lapse on this side, nor one of its locks lost).
func (s *Session) foundGone(cause error) bool {
	var se *StatusError
	return errors.As(cause, &se) && se.Resource == s.lease.resource &&
		(se.Status == LockDoesNotExist || se.Status == InvalidOwner)
}

// Close ends the session: renewals stop, the Contexts of the session and
// of every lock it holds end (ErrSessionClosed, which matches
// ErrReleased) before their releases are sent, then its locks and its own
// lease are released, in one request where the server takes a batch. It
// returns the releases whose outcome stayed unknown (those leases end at
// their TTL); closing a closed session does nothing.
func (s *Session) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.stopRenew()
	<-s.renewing
	locks := s.held()
	for _, lk := range locks {
		lk.end(released, ErrSessionClosed)
	}
	s.lease.end(released, ErrSessionClosed)
	s.cancel(ErrSessionClosed)
	return s.releaseAll(ctx, append(locks, s.lease))
}

// Orphan stops renewing the session and releases nothing: its locks stay
// held until their leases end, for another process to ResumeSession
// meanwhile. The Session's and its locks' Contexts end at their
// deadlines.
func (s *Session) Orphan() {
	s.stopRenew()
	<-s.renewing
}
