package kahuna

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/kahunago/kahuna/lease"
	"github.com/kahunago/kahuna/transport"
)

// An election is a lock whose holder is the leader: the lock "election:"
// + the election's name (so each election hashes to a partition of its
// own; a name with a '/' shares the partition of its prefix, as lock
// names do), held by an owner that is a fresh candidate ID
// followed by the candidate's value. So a leader's epoch is the lock's
// fencing token, and inherits its rules: it only grows, across every
// term, leader change of the partition, restart and failover, for both
// durabilities. Campaign waits in the lock's first-in first-out queue;
// Leader is a Get; Observe is a Watch.

// ElectionPrefix is what an election's name is prefixed with to name its
// lock: `kahunactl get election:NAME` shows an election's leader.
const ElectionPrefix = lease.ElectionPrefix

// candidateIDLen is the length of the candidate ID at the head of an
// election lock's owner (a NewOwner, or a session's ID).
const candidateIDLen = lease.CandidateIDBytes

// MaxElectionValue is the longest value a candidate may campaign with:
// what an owner can carry after the candidate ID.
const MaxElectionValue = lease.MaxElectionValue

var (
	// ErrNoLeader: the election has no live leader (never had one, or the
	// last one resigned or its lease ended).
	ErrNoLeader = errors.New("kahuna: election has no leader")
	// ErrResigned is the cause (context.Cause) of a Leadership's Context
	// after Resign: the leader stepped down.
	ErrResigned = errors.New("kahuna: leadership resigned")
)

// Leadership is a won election: the lock of the election held by this
// candidate, kept alive in the background until Resign or until it is
// lost. Its Context ends when the leadership ends, before any other
// candidate can be elected: at the lock's deadline (the send time of the
// last renewal the server granted, plus the TTL, minus the safety margin,
// on the monotonic clock), when a renewal finds the lease gone, or when
// Resign starts. Pass Epoch to whatever the leader writes to: a resource
// that rejects epochs older than the newest it has seen (the fence
// module) stops a leader that acts after its Context ended, which no
// lease can prevent (a process paused past its deadline).
type Leadership struct {
	name string
	lock *Lock // its owner is the candidate ID, then the value

	ctx       context.Context
	cancel    context.CancelCauseFunc
	stopAlive context.CancelFunc
}

// Campaign waits to be the leader of the election name on l, with value,
// and returns the Leadership once elected. Candidates are elected in the
// order they started waiting when l waits on the server (a WaitLocker:
// the embedded node, a Client with the native service); on a plain Kahuna
// server they poll, with no order.
//
// opts are Acquire's: WithTTL (default 30 s: how long a crashed leader
// keeps the election), WithDurability (default Persistent), WithWait
// (default WaitForever: until ctx ends), WithSafetyMargin,
// WithRetryNotice, WithSession (the session's lease is the leadership's,
// and its renewals keep it; the candidate is the session's ID). WithOwner
// is ignored: each campaign outside a session is a fresh candidate.
// Campaign returns ErrBusy if the wait ended with another leader,
// ctx.Err() if ctx ended first (a grant that raced the end is released,
// or, in a session, left to lapse), ErrSessionLost or ErrSessionClosed if
// its session ended first, and a *StatusError with InvalidInput, with no
// request made, for an empty name, a name over the limit, or a value over
// MaxElectionValue.
func Campaign(ctx context.Context, l Locker, name string, value []byte, opts ...AcquireOption) (*Leadership, error) {
	if reason := lease.CheckElection(name, value); reason != "" {
		return nil, &StatusError{Op: "campaign", Resource: name, Status: InvalidInput, Reason: reason}
	}
	opts = append([]AcquireOption{WithWaitForever()}, opts...)
	opts = append(opts, func(o *acquireOptions) {
		o.suffix = value // after the session's ID, WithSession
		if o.session == nil {
			o.owner, o.ownOwner = append(NewOwner(), value...), true
		}
	})
	lk, err := Acquire(ctx, l, ElectionPrefix+name, opts...)
	if err != nil {
		return nil, asCall(err, "campaign", name)
	}
	return lead(name, lk), nil
}

func lead(name string, lk *Lock) *Leadership {
	inner, cancel := context.WithCancelCause(lk.Context())
	alive, stopAlive := context.WithCancel(context.Background())
	ld := &Leadership{name: name, lock: lk,
		ctx: &lockChildContext{Context: inner, lock: lk}, cancel: cancel, stopAlive: stopAlive}
	if lk.session == nil { // else the session renews it
		lk.KeepAlive(alive, 0)
	}
	return ld
}

// lockChildContext is a context that ends with a lock's (a Leadership's,
// a Session's), and whose Err, like the lock's, sees a deadline passed
// before the timer does.
type lockChildContext struct {
	context.Context
	lock *Lock
}

func (c *lockChildContext) Err() error {
	_ = c.lock.ctx.Err() // ends the lock, and so this context, if its deadline passed
	return c.Context.Err()
}

// Name is the election's name.
func (ld *Leadership) Name() string { return ld.name }

// Value is the leader's value (a copy): the one it campaigned with, or
// the last one Proclaim set.
func (ld *Leadership) Value() []byte { return valueOf(ld.lock.Owner()) }

// Proclaim makes value the leader's value within the same term: the
// epoch stays, Leader reads the new value, and observers see a Proclaimed
// event. It renews the leadership as it goes. On the server it is a
// compare-and-set of the holder (its candidate ID with the old value to
// the same ID with the new), so a proclaim that arrives late, after a
// later one, changes nothing.
//
// It returns nil once the server holds the new value, an error matching
// ErrLockLost if the leadership was lost, ErrResigned after Resign, and
// ctx.Err() or the call's error if the outcome stayed unknown: the value
// may have been set, and the next renewal (or Proclaim, or Resign) settles
// it. A *StatusError with InvalidInput, with no request made, says a
// value is over MaxElectionValue. The Locker must be a kahuna node or
// client: a plain Kahuna server cannot proclaim.
func (ld *Leadership) Proclaim(ctx context.Context, value []byte) error {
	if reason := lease.CheckElection(ld.name, value); reason != "" {
		return &StatusError{Op: "proclaim", Resource: ld.name, Status: InvalidInput, Reason: reason}
	}
	if doerOf(ld.lock.locker) == nil {
		return fmt.Errorf("kahuna: proclaim %s: %T cannot proclaim (a kahuna node or client can): %w",
			lease.Excerpt(ld.name), ld.lock.locker, lease.ErrNotApplied)
	}
	if err := ld.ctx.Err(); err != nil {
		return context.Cause(ld.ctx)
	}
	owner := ld.lock.Owner()
	owner = append(owner[:candidateIDLen], value...)
	if err := ld.lock.proclaim(ctx, owner); err != nil {
		if errors.Is(context.Cause(ld.ctx), ErrResigned) {
			return ErrResigned
		}
		return err
	}
	return nil
}

// Epoch is this term's number: the fencing token of the election's lock,
// greater than every earlier term's, whoever held it.
func (ld *Leadership) Epoch() int64 { return ld.lock.FencingToken() }

// Expires is the leader's deadline (Lock.Expires): the leadership ends
// then unless a renewal moves it.
func (ld *Leadership) Expires() time.Time { return ld.lock.Expires() }

// Context ends when the leadership ends: lost (cause matching
// ErrLockLost) or resigned (ErrResigned). Run the leader's work under it.
func (ld *Leadership) Context() context.Context { return ld.ctx }

// Lost is closed when the leadership is lost (not when it is resigned).
func (ld *Leadership) Lost() <-chan struct{} { return ld.lock.Lost() }

// Resign steps down: the Context ends (ErrResigned) before the release
// is sent, so the leader has stopped before another candidate can be
// elected, and renewals stop. It returns nil once the election is
// released, an error matching ErrLockLost if the leadership had already
// been lost, and ctx.Err() or the call's error if the release could not
// be confirmed: the Context has ended anyway, and the lease ends at its
// TTL unless Resign is called again, which is safe (a released
// leadership resigns again as a no-op).
func (ld *Leadership) Resign(ctx context.Context) error {
	ld.stopAlive()
	ld.cancel(ErrResigned)
	err := ld.lock.Unlock(ctx)
	if err != nil && errors.Is(err, ErrLockLost) {
		return fmt.Errorf("kahuna: resign %s: the leadership was already lost (%w)", lease.Excerpt(ld.name), err)
	}
	return err
}

// LeaderInfo is an election's live leader.
type LeaderInfo struct {
	Value []byte
	Epoch int64
	// Expires is the leader's lease end as the partition's leader knows it
	// (wall clock, millisecond precision).
	Expires time.Time
}

// Leader reads the election's live leader from the partition's leader
// (a linearizable Get), or returns ErrNoLeader, whichever durability the
// election was campaigned with (one name is one lock).
func Leader(ctx context.Context, l Locker, name string) (LeaderInfo, error) {
	if reason := lease.CheckElection(name, nil); reason != "" {
		return LeaderInfo{}, &StatusError{Op: "leader", Resource: name, Status: InvalidInput, Reason: reason}
	}
	info, r, err := l.Get(ctx, ElectionPrefix+name, Persistent)
	if err != nil {
		return LeaderInfo{}, err
	}
	switch r.Status {
	case Got:
		return LeaderInfo{Value: valueOf(info.Owner), Epoch: info.FencingToken, Expires: info.Expires}, nil
	case LockDoesNotExist:
		return LeaderInfo{}, ErrNoLeader
	}
	return LeaderInfo{}, &StatusError{Op: "leader", Resource: name, Status: r.Status, Reason: r.Reason}
}

// valueOf is the value in an election lock's owner.
func valueOf(owner []byte) []byte { return transport.ElectionValue(owner) }

// ElectionEventKind says what an ElectionEvent reports.
type ElectionEventKind = transport.ElectionEventKind

const (
	// Elected: a leader was elected, with Value and Epoch.
	Elected = transport.Elected
	// Vacant: no leader. Epoch is the last term's (-1: never had one).
	Vacant = transport.Vacant
	// Proclaimed: the leader of the term Epoch set a new Value.
	Proclaimed = transport.Proclaimed
)

// ElectionEvent is one change of an election's leadership: Kind, Value,
// Epoch, and Revision, the election lock's revision at this event
// (Observe again with WatchFrom(Revision) to resume after it).
type ElectionEvent = transport.ElectionEvent

// Observe yields the election's leadership as it changes: first its
// current state (Elected or Vacant), then each change, in order: Elected
// for every new term (its epoch above the last one's), Proclaimed when the
// leader sets a new value in its term, Vacant when a term ends with no
// successor yet (resigned, or its lease ended). A renewal is not a change. Observe subscribes again by itself after the partition
// moves or a connection breaks (opts as for Watch), and yields the same
// event at most once; a term that began and ended while it was
// disconnected is not seen, but the next Elected event's epoch shows that
// terms were missed. It ends when ctx ends or with an error (yielded).
func Observe(ctx context.Context, w Watcher, name string, opts ...WatchOption) iter.Seq2[ElectionEvent, error] {
	return func(yield func(ElectionEvent, error) bool) {
		if reason := lease.CheckElection(name, nil); reason != "" {
			yield(ElectionEvent{}, &StatusError{Op: "observe", Resource: name, Status: InvalidInput, Reason: reason})
			return
		}
		var fold transport.ElectionFold
		for ev, err := range Watch(ctx, w, ElectionPrefix+name, opts...) {
			if err != nil {
				yield(ElectionEvent{}, err)
				return
			}
			if e, ok := fold.Next(ev); ok && !yield(e, nil) {
				return
			}
		}
	}
}
