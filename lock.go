package kahuna

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kahunago/kahuna/internal/backoff"
	"github.com/kahunago/kahuna/lease"
	"github.com/kahunago/kahuna/transport"
)

const (
	defaultTTL = 30 * time.Second
	// mustRetryBudget bounds the retries of MustRetry and of unknown
	// outcomes where no wait says otherwise (Kahuna's clients use the
	// same 30 s).
	mustRetryBudget = 30 * time.Second
	minBackoff      = time.Millisecond
	maxBackoff      = 50 * time.Millisecond
	// cleanupTimeout bounds the best-effort Unlock Acquire makes when it
	// gives up with an outcome unknown (and the lease's TTL bounds it too:
	// past that the lock frees itself).
	cleanupTimeout = 2 * time.Second
	// Default safety margin: marginFraction of the TTL plus marginFixed.
	marginFraction = 100 // 1 %
	marginFixed    = 2 * time.Millisecond
)

// handleClock is a Lock's time source: send times and deadlines (Now), the
// deadline timer and KeepAlive's schedule (AfterFunc). Tests swap it.
type handleClock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) handleTimer
}

type handleTimer interface{ Stop() bool }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }
func (systemClock) AfterFunc(d time.Duration, f func()) handleTimer {
	return time.AfterFunc(d, f)
}

type lockState uint8

const (
	held lockState = iota
	lost
	released
)

// Lock is a held lease on a resource. Its deadline (Expires) is the
// holder's conservative view of when the lease ends; at that moment, or
// when an Extend or Unlock finds the lease gone, the lock is lost: Lost
// closes and Context ends with a cause matching ErrLockLost. A clean
// Unlock ends Context with ErrReleased instead. Methods are safe for
// concurrent use; Extends of one Lock run one at a time.
//
// A lease cannot stop a holder that is paused past its deadline (a GC
// pause, SIGSTOP, a VM freeze) from acting late: have what the lock
// protects check FencingToken.
type Lock struct {
	locker     Locker
	resource   string
	token      int64
	durability Durability
	ttl        time.Duration
	clock      handleClock
	margin     time.Duration
	marginSet  bool
	// noExtendCap switches extendUnknown off (acquireOptions.noExtendCap).
	noExtendCap bool
	noDeadline  bool     // acquireOptions.noDeadline
	session     *Session // the session that renews it (WithSession), or nil
	leaseOf     *Session // the session this is the own lease of, or nil
	grants      []Grant  // a semaphore's permits (Permit), or nil
	also        []*Lock  // the other names of a lock of several names, taken by the same request (AcquireAll)
	free        int      // a semaphore's permits left free at the grant (Permit.Free)

	ctx    *lockContext
	cancel context.CancelCauseFunc
	lost   chan struct{}
	// endDone is closed once end has finished, the Context cancelled:
	// Err waits for it while another goroutine is ending the lock.
	endDone chan struct{}

	extendMu sync.Mutex // one Extend at a time, so deadlines follow the server's order

	mu    sync.Mutex
	owner []byte // the holder on the server (Proclaim changes it)
	// proclaimed is the owner a proclaim whose outcome is unknown may
	// have made the holder, or nil: the next Extend proclaims it again.
	proclaimed []byte
	state      lockState
	cause      error     // why the lock ended (state lost or released)
	granted    time.Time // send time of the request the deadline counts from
	// unsureTTL is the shortest ttl of an Extend whose outcome is unknown
	// (extendUnknown); MaxTTL while there is none.
	unsureTTL time.Duration
	expires   time.Time   // the deadline
	timer     handleTimer // fires at expires
	releasing int         // Unlock calls in flight
	alive     bool        // a KeepAlive loop runs
}

// lockContext is a Lock's Context: a cancelable context whose deadline is
// the lock's current deadline, which each Extend moves.
type lockContext struct {
	context.Context
	l *Lock
}

func (c *lockContext) Deadline() (time.Time, bool) { return c.l.Expires(), true }

// Err ends the lock first if its deadline has passed and the timer has
// not fired yet (a process resumed from a pause runs its own code before
// the timer's goroutine), and waits for an end that another goroutine has
// begun (the timer's, say, between marking the lock lost and cancelling
// the Context): a holder that checks Err before it acts never acts past
// the deadline.
func (c *lockContext) Err() error {
	l := c.l
	l.mu.Lock()
	ending := l.state != held || l.pastDeadline()
	l.mu.Unlock()
	if ending {
		l.end(lost, errLapsed) // does nothing if the lock has ended, or another goroutine is ending it
		<-l.endDone
	}
	return c.Context.Err()
}

// deadline is the holder's end of a lease granted or extended by a request
// sent at sent with ttl.
func (l *Lock) deadline(sent time.Time, ttl time.Duration) time.Time {
	m := l.margin
	if !l.marginSet {
		m = ttl/marginFraction + marginFixed
	}
	return sent.Add(ttl.Truncate(time.Millisecond) - m)
}

// Acquire locks resource on l, as one owner (WithOwner's, or a fresh
// random one) for all its attempts. It returns ErrBusy if another owner
// held the lock for the whole wait, a *StatusError for any other refusal,
// and ctx.Err() unchanged if ctx ends first.
//
// Waiting (WithWait, WithWaitForever): each attempt on a WaitLocker is a
// Lock call that waits on the server for what is left of the wait; on any
// other Locker it is a TryLock, and Busy answers are polled (below).
//
// Retries: a TryLock by the owner that already holds the lock answers
// Locked with the same token, so asking again is safe. Acquire retries,
// with jittered exponential backoff (1 ms to 50 ms):
//   - Busy, while the wait lasts;
//   - MustRetry: the node certainly did not apply it;
//   - Errored (or WaitingForReplication), and call errors that are not
//     ctx's: the attempt may have applied, its outcome is unknown;
//
// for up to the longer of the wait and 30 s, and while ctx lasts. Other
// statuses end Acquire at once with a *StatusError.
//
// If Acquire gives up while an attempt's outcome is unknown (the retry
// budget ran out after Errored or a call error, or ctx ended with an
// attempt in flight), the lock may be held by the owner without Acquire
// knowing it. Acquire then makes a best-effort Unlock of that owner (not
// under ctx, which may be over: for at most 2 s, and no longer than the
// TTL), so the lock does not sit held until it expires, unless the owner
// came from WithOwner (it may hold the lock through another handle). The
// Unlock must not overtake the attempt (a release jumps a lock actor's
// queue of requests, and may travel on another connection): when ctx
// ends, an attempt that waits on the server is withdrawn first, and one
// that does not is left to finish (its late answer handed on by a Client,
// else on a goroutine of its own), and the Unlock is sent once the attempt
// is answered, after Acquire has returned
// (a node that decides the lock itself refuses a TryLock whose caller
// left, so there the Unlock goes at once). It returns ctx.Err() if ctx
// ended, else the unknown outcome: a *StatusError with Errored, or the
// call's error.
//
// The Lock's deadline counts from the send time of the earliest attempt
// that may have granted the lease (a TryLock by the holder does not
// refresh it): every attempt except those certainly not applied (MustRetry,
// Busy, InvalidInput). A Busy answer shows another owner held the lock
// then, so no earlier attempt of this owner can have started the lease
// before it; the count restarts at that answer's send time. A grant after
// a wait on the server counts from the attempt's send time plus the
// Result's Waited (less 1 %). If retries
// took so long that this deadline has already passed, the returned Lock
// is already lost (Unlock it).
func Acquire(ctx context.Context, l Locker, resource string, opts ...AcquireOption) (*Lock, error) {
	o := acquireOptionsOf(opts)
	if reason := lease.CheckWait(o.wait); reason != "" {
		return nil, &StatusError{Op: "lock", Resource: resource, Status: InvalidInput, Reason: reason}
	}
	if o.session == nil {
		return acquire(ctx, l, resource, o)
	}
	if err := o.session.apply(&o, resource); err != nil {
		return nil, fmt.Errorf("kahuna: lock %s in session %s: %w", lease.Excerpt(resource), o.session.id, err)
	}
	// The attempts end with the session too.
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(o.session.ctx, func() { cancel(context.Cause(o.session.ctx)) })
	defer stop()
	lk, err := acquire(sctx, l, resource, o)
	if err != nil && ctx.Err() == nil && sctx.Err() != nil {
		err = fmt.Errorf("kahuna: lock %s in session %s: %w", lease.Excerpt(resource), o.session.id, context.Cause(sctx))
	}
	return lk, err
}

// acquire is Acquire with its options applied.
func acquire(ctx context.Context, l Locker, resource string, o acquireOptions) (*Lock, error) {
	if o.owner == nil {
		o.owner, o.ownOwner = NewOwner(), true
	}
	wl, serverWaits := l.(WaitLocker)
	serverWaits = serverWaits && o.wait != 0
	forever := o.wait == WaitForever
	c := o.clock
	start := c.Now()
	busyUntil := start.Add(o.wait)
	retryUntil := start.Add(max(o.wait, mustRetryBudget))
	over := func(until time.Time) bool { return !forever && !c.Now().Before(until) }
	step := minBackoff
	var (
		since   time.Time // send time of the earliest attempt that may have granted the lease; zero: none
		unknown bool      // some attempt's outcome was unknown: the owner may hold the lock unseen
		verdict error     // what to report if Acquire gives up now
	)
	fail := func(err error) (*Lock, error) {
		if unknown && o.ownOwner {
			releaseUnseen(ctx, l, resource, o)
		}
		return nil, err
	}
	// WithRetryNotice: failing is set by a retry after no answer, and
	// cleared, with a notice, by the next answer.
	failing := false
	answered := func() {
		if failing && o.notice != nil {
			o.notice(nil)
		}
		failing = false
	}
	retrying := func(err error) {
		failing = true
		if o.notice != nil {
			o.notice(err)
		}
	}
	for {
		sent := c.Now()
		var (
			r   Result
			err error
		)
		wait := WaitForever // what is left of it, for a request that waits on the server
		if !forever {
			wait = max(busyUntil.Sub(sent), 0)
		}
		waitsThere := (o.whole && wait != 0 && o.also == nil) || (!o.whole && serverWaits)
		if o.ownOwner && !waitsThere && ctx.Done() != nil && !decidesHere(l, resource, o.also) {
			// The attempt is not withdrawn when ctx ends: its answer, late
			// or not, says whether the owner must be released.
			unknownBefore := unknown
			then := func(r Result, err error) {
				if unknownBefore || mayHold(r, err) {
					releaseUnseen(ctx, l, resource, o)
				}
			}
			var left bool
			if late := lateOf(l); late != nil && !o.whole && !serverWaits {
				r, left, err = late(ctx, resource, o.owner, o.ttl, o.durability, then)
			} else {
				r, left, err = detached(ctx, max(o.ttl, cleanupTimeout),
					func(actx context.Context) (Result, error) {
						return attempt(actx, l, wl, resource, o, wait, serverWaits)
					}, then)
			}
			if left {
				return nil, err
			}
		} else {
			r, err = attempt(ctx, l, wl, resource, o, wait, serverWaits)
		}
		var (
			until time.Time
			cause error // why no answer came: the attempt is retried
		)
		switch {
		case err != nil && ctx.Err() != nil:
			unknown = true // the attempt in flight may have applied
			return fail(ctx.Err())
		case errors.Is(err, lease.ErrUnauthenticated):
			return fail(err) // refused before anything was done, and again if asked again
		case err != nil:
			if since.IsZero() {
				since = sent
			}
			unknown, verdict, cause = true, err, err
			until = retryUntil
		case r.Status == Locked:
			if since.IsZero() {
				// A grant after a wait on the server started the lease no
				// earlier than sent + Waited (the server measured Waited
				// from receiving the request, after sent); the server's
				// clock may run fast over the wait: take 1 % off.
				since = sent.Add(r.Waited - r.Waited/marginFraction)
			}
			answered()
			if o.also != nil && !grantsEach(r.Grants, 1+len(o.also)) {
				// A server that does not know locks of several names took
				// the first alone: give it back.
				_, _ = l.Unlock(ctx, resource, o.owner, o.durability)
				return nil, errNoGroups
			}
			lk := newLock(l, resource, r.FencingToken, o, since)
			if o.also == nil {
				lk.grants, lk.free = r.Grants, r.Free
			}
			for i, name := range o.also {
				lk.also = append(lk.also, newLock(l, name, r.Grants[i+1].Token, o, since))
			}
			if o.session != nil {
				o.session.attach(lk)
				for _, other := range lk.also {
					o.session.attach(other)
				}
			}
			return lk, nil
		case r.Status == Busy:
			answered()
			if !since.IsZero() {
				since = sent
			}
			verdict = &StatusError{Op: "lock", Resource: resource, Status: r.Status, Reason: r.Reason}
			until = busyUntil
		case r.Status == MustRetry:
			cause = &StatusError{Op: "lock", Resource: resource, Status: r.Status}
			if verdict == nil {
				verdict = cause
			}
			until = retryUntil
		case r.Status == Errored || r.Status == WaitingForReplication:
			if since.IsZero() {
				since = sent
			}
			unknown, verdict = true, &StatusError{Op: "lock", Resource: resource, Status: r.Status}
			cause = verdict
			until = retryUntil
		case r.Status == InvalidInput:
			return fail(&StatusError{Op: "lock", Resource: resource, Status: r.Status, Reason: r.Reason})
		default: // not an answer to TryLock: nothing says it did not apply
			unknown = true
			return fail(&StatusError{Op: "lock", Resource: resource, Status: r.Status})
		}
		if over(until) {
			return fail(verdict)
		}
		if cause != nil {
			retrying(cause)
		}
		pause := backoff.Jitter(step)
		if !forever {
			pause = min(pause, until.Sub(c.Now()))
		}
		if err := backoff.Sleep(ctx, pause); err != nil {
			return fail(err)
		}
		step = min(step*2, maxBackoff)
	}
}

// attempt is one request of Acquire for the lock: a TryLock, a Lock that
// waits on the server for up to wait (serverWaits), or one only a Locker
// that takes it whole carries (o.whole).
func attempt(ctx context.Context, l Locker, wl WaitLocker, resource string, o acquireOptions, wait time.Duration, serverWaits bool) (Result, error) {
	switch {
	case o.whole:
		return askWhole(ctx, l, resource, o, wait)
	case serverWaits:
		return wl.Lock(ctx, resource, o.owner, o.ttl, wait, o.durability)
	}
	return l.TryLock(ctx, resource, o.owner, o.ttl, o.durability)
}

// detached runs ask on a goroutine of its own, with a context that does
// not end with ctx, and returns its answer; if ctx ends first it returns
// ctx.Err() and left at once, ask's context then ends after bound, and
// the goroutine hands ask's answer, once it comes, to then. A request
// that does not wait on the server is not withdrawn when its caller
// leaves: it may still be granted after the caller's clean-up, had that
// been sent at once, has found nothing to release (a release jumps a lock
// actor's queue of requests, and may travel on another connection), and
// the lock would stay with an owner no one knows of until its lease ends.
// Sent after the answer, the clean-up comes after the grant. The bound's
// timer is set only when the caller leaves, so an answer that comes in
// time costs no timer.
func detached(ctx context.Context, bound time.Duration, ask func(context.Context) (Result, error), then func(Result, error)) (r Result, left bool, err error) {
	type answer struct {
		r   Result
		err error
	}
	var (
		mu          sync.Mutex
		gone        *time.Timer // set when the caller left: it ends ask's context, and the answer goes to then
		answers     = make(chan answer, 1)
		actx, abort = context.WithCancel(context.WithoutCancel(ctx))
	)
	go func() {
		r, err := ask(actx)
		abort()
		mu.Lock()
		if gone == nil {
			answers <- answer{r, err}
			mu.Unlock()
			return
		}
		t := gone
		mu.Unlock()
		t.Stop()
		then(r, err)
	}()
	select {
	case a := <-answers:
		return a.r, false, a.err
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case a := <-answers: // answered as the caller left: take it
		return a.r, false, a.err
	default:
		gone = time.AfterFunc(bound, abort)
		return Result{}, true, ctx.Err()
	}
}

// lateOf is l's TryLock that hands the answer to a caller that left to
// a function of its own, or nil if l has none: a Client over gRPC or
// Kahuna's framing does (no goroutine per attempt, unlike detached).
func lateOf(l Locker) func(ctx context.Context, resource string, owner []byte, ttl time.Duration, d Durability, late func(Result, error)) (Result, bool, error) {
	if c, ok := l.(*Client); ok && c.grpc != nil {
		return c.grpc.TryLockLate
	}
	return nil
}

// decidesHere reports whether l is a node that decides requests on
// resource and also itself, now: its lock actors never grant a TryLock
// whose caller has left before it was decided, so a clean-up sent at once
// cannot be overtaken. (Should the node lose a partition between this
// check and the request, the request is forwarded, and for that one
// attempt a clean-up sent at once may overtake it, as detached explains.)
func decidesHere(l Locker, resource string, also []string) bool {
	n, ok := l.(*Node)
	if !ok {
		return false
	}
	if !n.n.Serves(resource) {
		return false
	}
	for _, name := range also {
		if !n.n.Serves(name) {
			return false
		}
	}
	return true
}

// mayHold reports whether an attempt that answered r, err may have left
// its owner holding the lock.
func mayHold(r Result, err error) bool {
	if err != nil {
		return !errors.Is(err, lease.ErrNotApplied)
	}
	switch r.Status {
	case Busy, MustRetry, InvalidInput:
		return false
	}
	return true
}

// askWhole is one attempt to take a lock whose request only a Locker
// that takes it whole carries (a semaphore's permits, a read lock: the
// caller checked that l can, doerOf). A request that is not well formed
// is answered InvalidInput, unsent.
func askWhole(ctx context.Context, l Locker, resource string, o acquireOptions, wait time.Duration) (Result, error) {
	if o.also != nil {
		wait = 0 // a lock of several names does not wait on the server: acquire asks again
	}
	req, reason := lease.Request{Op: lease.TryLock, Resource: resource, Owner: o.owner, TTL: o.ttl,
		Durability: o.durability, Wait: wait, Permits: o.permits, Limit: o.limit, Shared: o.shared, Also: o.also}.Check()
	if reason != "" {
		return Result{Status: InvalidInput, Reason: reason}, nil
	}
	_, r, err := doerOf(l)(ctx, req)
	return r, err
}

// errNoGroups: the server granted a lock of several names as a lock of
// its first name alone (it does not know Also); AcquireAll then takes the
// names one at a time.
var errNoGroups = errors.New("kahuna: the server cannot lock several names in one step")

// grantsEach reports whether grants are one per name of n, in order.
func grantsEach(grants []Grant, n int) bool {
	if len(grants) != n {
		return false
	}
	for i, g := range grants {
		if g.Slot != i {
			return false
		}
	}
	return true
}

// release releases a lock that has ended (Session.Close ends its locks
// first, so their holders stop). It returns an error only when the
// release's outcome stays unknown: the lease then ends at its deadline.
func (l *Lock) release(ctx context.Context) error {
	a := retryOp(ctx, l.clock, nil, l.unlockOp(ctx))
	if a.err != nil {
		return a.err
	}
	switch a.r.Status {
	case Unlocked, LockDoesNotExist, InvalidOwner: // released, or gone already
		return nil
	}
	return &StatusError{Op: "unlock", Resource: l.resource, Status: a.r.Status, Reason: a.r.Reason}
}

// releaseUnseen is Acquire's best-effort Unlock of an owner that may hold
// the lock without knowing it.
func releaseUnseen(ctx context.Context, l Locker, resource string, o acquireOptions) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(cleanupTimeout, max(o.ttl, 0)))
	defer cancel()
	for _, name := range append([]string{resource}, o.also...) {
		retryOp(cctx, o.clock, nil, func() (Result, error) {
			return l.Unlock(cctx, name, o.owner, o.durability)
		})
	}
}

func newLock(l Locker, resource string, token int64, o acquireOptions, granted time.Time) *Lock {
	inner, cancel := context.WithCancelCause(context.Background())
	lk := &Lock{locker: l, resource: resource, owner: o.owner, token: token, durability: o.durability,
		ttl: o.ttl, clock: o.clock, margin: o.margin, marginSet: o.marginSet, noExtendCap: o.noExtendCap,
		noDeadline: o.noDeadline, session: o.session, cancel: cancel, lost: make(chan struct{}),
		endDone: make(chan struct{}), unsureTTL: lease.MaxTTL}
	lk.ctx = &lockContext{Context: inner, l: lk}
	lk.mu.Lock()
	lk.setDeadline(granted, o.ttl)
	lk.mu.Unlock()
	return lk
}

// setDeadline moves the deadline to the end of a lease granted or
// extended by a request sent at sent with ttl. l.mu is held.
func (l *Lock) setDeadline(sent time.Time, ttl time.Duration) {
	l.granted, l.expires = sent, l.deadline(sent, ttl)
	if l.timer != nil {
		l.timer.Stop()
	}
	l.timer = l.clock.AfterFunc(l.expires.Sub(l.clock.Now()), l.lapse)
}

// extendUnknown bounds the deadline by an Extend of ttl whose outcome is
// unknown, its first attempt sent at sent. The server sets a lease to end
// ttl after it applies an Extend (it may shorten it), and a request can be
// delivered late, after a later Extend. So from now on:
//   - the deadline is at most sent + ttl: the late Extend applies no
//     earlier than it was sent;
//   - an Extend that succeeds later, sent at s, sets the deadline to
//     s + min(its ttl, ttl): if the late one applies after it, it applies
//     after s and the lease ends ttl after that.
//
// Nothing tells when a request still on its way can no longer arrive, so
// the bound stays for the Lock's life. KeepAlive's Extends all carry the
// same ttl and are not shortened by it. l.mu is held.
func (l *Lock) extendUnknown(sent time.Time, ttl time.Duration) {
	if l.noExtendCap {
		return
	}
	l.unsureTTL = min(l.unsureTTL, ttl)
	if l.state == held && l.deadline(sent, ttl).Before(l.expires) {
		l.setDeadline(sent, ttl)
	}
}

// lapse runs when the deadline timer fires: the lock is lost unless an
// Extend moved the deadline meanwhile.
func (l *Lock) lapse() {
	l.mu.Lock()
	due := l.state == held && l.pastDeadline()
	l.mu.Unlock()
	if due {
		l.end(lost, errLapsed)
	}
}

// pastDeadline reports whether the deadline has passed. l.mu is held.
func (l *Lock) pastDeadline() bool {
	return !l.noDeadline && !l.clock.Now().Before(l.expires)
}

// end moves a held lock to state (lost or released) with cause; it does
// nothing if the lock has already ended.
func (l *Lock) end(state lockState, cause error) {
	l.mu.Lock()
	if l.state != held {
		l.mu.Unlock()
		return
	}
	leaseOf := l.leaseOf
	if state == lost && leaseOf != nil {
		cause = fmt.Errorf("%w (%w)", ErrSessionLost, cause)
	}
	l.state, l.cause = state, cause
	if l.timer != nil {
		l.timer.Stop()
	}
	l.mu.Unlock()
	if state == lost {
		close(l.lost) // before the Context ends: whoever sees it done sees Lost closed
		if leaseOf != nil {
			leaseOf.endLocks(cause) // before the session's Context ends
		}
		if l.session != nil && !errors.Is(cause, ErrSessionLost) {
			// One of its locks lost on its own (its renewal's outcome
			// unknown until its deadline, or the lease found gone): the
			// session ends with it, before this Context does, so that a
			// live session's Context means every lock in it is live.
			l.session.lease.end(lost, fmt.Errorf("lock %s lost: %w", lease.Excerpt(l.resource), cause))
		}
	}
	if l.session != nil { // set at construction, never changed
		// Detached only now: until the session has ended with it, the
		// session's Err finds it ending and waits (Session.pastDeadline).
		l.session.detach(l)
	}
	l.cancel(cause)
	close(l.endDone)
}

// ended returns why the lock ended (a cause matching ErrLockLost, or
// ErrReleased), or nil while it is held.
func (l *Lock) ended() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cause
}

// Resource is the locked resource.
func (l *Lock) Resource() string { return l.resource }

// Owner is the owner the lock is held by (a copy).
func (l *Lock) Owner() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]byte(nil), l.owner...)
}

// owners are the holder's owner and, after a proclaim of unknown outcome,
// the owner it proclaimed (else nil).
func (l *Lock) owners() (owner, proclaimed []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.owner, l.proclaimed
}

// unlockOp is an Unlock attempt by the holder: by its owner, then, when
// that finds another owner holding it after a proclaim of unknown
// outcome, by the owner that proclaim would have made the holder.
func (l *Lock) unlockOp(ctx context.Context) func() (Result, error) {
	owner, proclaimed := l.owners()
	return func() (Result, error) {
		r, err := l.locker.Unlock(ctx, l.resource, owner, l.durability)
		if err == nil && r.Status == InvalidOwner && proclaimed != nil {
			return l.locker.Unlock(ctx, l.resource, proclaimed, l.durability)
		}
		return r, err
	}
}

// extendOp is an Extend attempt by the holder; after a proclaim of
// unknown outcome it is that proclaim again (the server's compare-and-set
// makes it the same extend whichever owner holds it now).
func (l *Lock) extendOp(ctx context.Context, ttl time.Duration) func() (Result, error) {
	owner, proclaimed := l.owners()
	if proclaimed == nil {
		return func() (Result, error) { return l.locker.Extend(ctx, l.resource, owner, ttl, l.durability) }
	}
	req, reason := lease.Request{Op: lease.Extend, Resource: l.resource, Owner: owner, NewOwner: proclaimed,
		TTL: ttl, Durability: l.durability}.Check()
	return func() (Result, error) {
		if reason != "" {
			return Result{Status: InvalidInput, Reason: reason}, nil
		}
		_, r, err := lease.Do(ctx, l.locker, req)
		return r, err
	}
}

// FencingToken is the token of this grant. Pass it to whatever the lock
// protects, which should reject tokens older than the newest it has seen.
func (l *Lock) FencingToken() int64 { return l.token }

// Durability is the lock's durability.
func (l *Lock) Durability() Durability { return l.durability }

// Expires is the holder's deadline: the send time of the request that
// granted or last extended the lease, plus its TTL, minus the safety
// margin (WithSafetyMargin). The server's lease lasts at least until then;
// the lock counts as lost when it passes. It is measured on the monotonic
// clock: compare it with time.Now, not with other machines' clocks.
func (l *Lock) Expires() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expires
}

// Extend makes the lease end ttl after now (and the deadline: ttl after
// this call's successful attempt was sent, minus the margin; a shorter ttl
// shortens both). An Extend whose outcome stays unknown (its context ended
// or its retries ran out with a request in flight) may still apply late,
// and shorten the lease then: it caps the deadline at its send time + its
// ttl, and every later deadline at ttl after its Extend's send time (see
// extendUnknown). It returns an error matching ErrLockLost when the lease
// is gone (and the lock is then lost: stop the protected work), ErrReleased
// after Unlock, and ctx.Err() unchanged if ctx ends.
//
// Retries: an Extend by the owner is idempotent, so Extend retries
// MustRetry, Errored and call errors other than ctx's with backoff, for up
// to 30 s, while ctx lasts and while the lock's deadline has not passed
// (it then returns the loss). If the budget ends with the outcome unknown
// it returns a *StatusError with Errored, or the call's error; the
// deadline stays where it was.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	l.extendMu.Lock()
	defer l.extendMu.Unlock()
	_, err := l.extendLocked(ctx, ttl)
	return err
}

// extendLocked is Extend, under extendMu. unknown reports whether an
// attempt's outcome was unknown: when err is not nil and unknown is
// false, nothing was applied.
func (l *Lock) extendLocked(ctx context.Context, ttl time.Duration) (unknown bool, err error) {
	if err := l.ended(); err != nil {
		return false, err
	}
	// The attempts end with ctx or with the lock (lost at its deadline,
	// or released).
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(l.ctx, cancel)
	defer stop()
	a := retryOp(octx, l.clock, l.ended, l.extendOp(octx, ttl))
	return a.unknown, l.extended(ctx, a, ttl)
}

// extended takes in the answer a of an Extend of ttl.
func (l *Lock) extended(ctx context.Context, a answer, ttl time.Duration) error {
	if a.unknown {
		l.mu.Lock()
		l.extendUnknown(a.unknownSent, ttl)
		l.mu.Unlock()
	}
	if a.err != nil {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := l.ended(); err != nil {
			return err
		}
		return a.err
	}
	switch a.r.Status {
	case Extended:
		l.mu.Lock()
		if l.state == held {
			l.setDeadline(a.sent, min(ttl, l.unsureTTL))
		}
		if l.proclaimed != nil { // the server holds it by the proclaimed owner now
			l.owner, l.proclaimed = l.proclaimed, nil
		}
		l.mu.Unlock()
		return l.ended() // nil unless the lock ended meanwhile
	case LockDoesNotExist, InvalidOwner:
		err := &StatusError{Op: "extend", Resource: l.resource, Status: a.r.Status}
		l.mu.Lock()
		releasing := l.releasing > 0
		l.mu.Unlock()
		if !releasing { // gone because our own Unlock applied: not a loss
			l.end(lost, err)
		}
		return err
	}
	return &StatusError{Op: "extend", Resource: l.resource, Status: a.r.Status, Reason: a.r.Reason}
}

// Unlock releases the lock. It returns nil when the lock is released (and
// the Context then ends with ErrReleased), an error matching ErrLockLost
// when the lock was no longer this owner's, and ctx.Err() unchanged if ctx
// ends. Unlock of a released lock does nothing and returns nil; Unlock of
// a lost lock still asks the server, which frees it early if it is still
// this owner's.
//
// Retries: an Unlock by the owner is idempotent (a second one answers
// LockDoesNotExist), so Unlock retries MustRetry, Errored and call errors
// other than ctx's with backoff, for up to 30 s and while ctx lasts. A
// retry after an unknown outcome that finds the lock gone
// (LockDoesNotExist, or InvalidOwner: a waiter may have got it at once)
// counts as released, since the earlier attempt may have been what freed
// it. If the budget ends with the outcome unknown, Unlock returns a
// *StatusError with Errored, or the call's error, and the lock stays as it
// was (held until its deadline).
func (l *Lock) Unlock(ctx context.Context) error {
	l.mu.Lock()
	if l.state == released {
		l.mu.Unlock()
		return nil
	}
	l.releasing++
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.releasing--
		l.mu.Unlock()
	}()
	a := retryOp(ctx, l.clock, nil, l.unlockOp(ctx))
	if a.err != nil {
		if err := ctx.Err(); err != nil {
			return err
		}
		return a.err
	}
	switch a.r.Status {
	case Unlocked:
		l.end(released, ErrReleased)
		return nil
	case LockDoesNotExist, InvalidOwner:
		if a.unknown {
			l.end(released, ErrReleased)
			return nil
		}
		if errors.Is(l.ended(), ErrReleased) { // a concurrent Unlock released it
			return nil
		}
		err := &StatusError{Op: "unlock", Resource: l.resource, Status: a.r.Status}
		l.end(lost, err)
		return err
	}
	return &StatusError{Op: "unlock", Resource: l.resource, Status: a.r.Status, Reason: a.r.Reason}
}

// Lost is closed when the lock is lost: its deadline (Expires) passed
// without an extension, or an Extend (KeepAlive's included) or Unlock
// found the lease lapsed or held by another owner. It stays open after a
// clean Unlock.
func (l *Lock) Lost() <-chan struct{} { return l.lost }

// Context ends when the lock is lost or released; run the work the lock
// guards under it. Its Deadline is the lock's deadline (Expires), which
// each successful Extend moves. When it ends, Err is context.Canceled and
// context.Cause says why: an error matching ErrLockLost (the deadline
// passed, or the lease was found gone), or ErrReleased after Unlock.
// Its Err is exact at the deadline: it reports the loss as soon as the
// deadline has passed, even before the deadline's timer has run (a
// process resumed from a pause runs its own code first), so a holder that
// checks Err before each step never takes one past the deadline.
func (l *Lock) Context() context.Context { return l.ctx }

// KeepAlive extends the lease by its TTL in the background, every
// interval (default, and if every <= 0 or >= the TTL: a third of the TTL)
// counted from the send time of the request that granted or last extended
// the lease, not from the call: if that is long past, the first extend is
// sent at once. It runs until ctx ends, the lock is released, or it is
// lost. Extends are retried as Extend does; if none succeeds before the
// deadline, the lock is lost there, as without KeepAlive (watch Lost or
// Context). When ctx ends, the lock stays held until its deadline. A
// second call while one runs does nothing.
//
// KeepAlive proves that this process can reach the server, not that the
// work is healthy: a stuck worker keeps its lock for as long as KeepAlive
// runs.
func (l *Lock) KeepAlive(ctx context.Context, every time.Duration) {
	if every <= 0 || every >= l.ttl {
		every = l.ttl / 3
	}
	l.mu.Lock()
	if l.alive || l.state != held {
		l.mu.Unlock()
		return
	}
	l.alive = true
	l.mu.Unlock()
	go l.keepAlive(ctx, every, func(ctx context.Context) error { return l.Extend(ctx, l.ttl) })
}

// keepAlive calls extend every interval from the send time of the
// request that granted or last extended the lease (retrying sooner after
// a failure), until ctx ends or the lock does. extend extends the lease,
// and may do more with it (a session's renews its locks too).
func (l *Lock) keepAlive(ctx context.Context, every time.Duration, extend func(context.Context) error) {
	defer func() {
		l.mu.Lock()
		l.alive = false
		l.mu.Unlock()
	}()
	var retryAt time.Time // after a failed extend: when to try again
	for {
		l.mu.Lock()
		next := l.granted.Add(every)
		l.mu.Unlock()
		if next.Before(retryAt) {
			next = retryAt
		}
		wake := make(chan struct{})
		t := l.clock.AfterFunc(next.Sub(l.clock.Now()), func() { close(wake) })
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-l.ctx.Done():
			t.Stop()
			return
		case <-wake:
		}
		l.mu.Lock()
		releasing := l.releasing > 0
		l.mu.Unlock()
		if releasing { // an Unlock is in flight: do not extend under it
			retryAt = l.clock.Now().Add(every / 4)
			continue
		}
		err := extend(ctx)
		switch {
		case err == nil:
			retryAt = time.Time{}
		case ctx.Err() != nil, l.ctx.Err() != nil:
			return
		default:
			// The budget ran out with the outcome unknown, or a status
			// asking again will not change: try again later, until the
			// deadline ends the lock.
			retryAt = l.clock.Now().Add(every / 4)
		}
	}
}

// answer is how retryOp's attempts ended.
type answer struct {
	r    Result    // the final answer, when err is nil
	sent time.Time // send time of the attempt that gave r
	// unknown: an attempt before the final one had an unknown outcome (it
	// may have applied, and may still: a request can be delivered late);
	// unknownSent is the send time of the first such attempt.
	unknown     bool
	unknownSent time.Time
	// err: ctx.Err() if ctx ended, the call error of the last unknown
	// outcome when the budget ran out on it, or halt's error.
	err error
}

// retryOp calls op, idempotent for its owner, until it answers something
// other than MustRetry (certainly not applied), Errored or
// WaitingForReplication (outcome unknown), or a call error other than
// ctx's (outcome unknown), for up to mustRetryBudget and while ctx lasts;
// halt, if not nil, is asked before each retry. When the budget runs out,
// the answer is the last unknown outcome if there was one (outcomes stay
// unknown), else the last MustRetry.
func retryOp(ctx context.Context, c handleClock, halt func() error, op func() (Result, error)) answer {
	deadline := c.Now().Add(mustRetryBudget)
	step := minBackoff
	var last answer
	var firstUnknown time.Time
	for {
		sent := c.Now()
		r, err := op()
		unknownFrom := func() time.Time {
			if firstUnknown.IsZero() {
				firstUnknown = sent
			}
			return firstUnknown
		}
		switch {
		case err != nil && ctx.Err() != nil:
			return answer{unknown: true, unknownSent: unknownFrom(), err: ctx.Err()}
		case errors.Is(err, lease.ErrUnauthenticated), errors.Is(err, transport.ErrNoNative):
			return answer{unknown: last.unknown, unknownSent: firstUnknown, err: err} // asking again cannot help
		case err != nil:
			last = answer{unknown: true, unknownSent: unknownFrom(), err: err}
		case r.Status == Errored || r.Status == WaitingForReplication:
			last = answer{r: r, sent: sent, unknown: true, unknownSent: unknownFrom()}
		case r.Status == MustRetry:
			if !last.unknown {
				last = answer{r: r, sent: sent}
			}
		default:
			return answer{r: r, sent: sent, unknown: last.unknown, unknownSent: firstUnknown}
		}
		if !c.Now().Before(deadline) {
			return last
		}
		if halt != nil {
			if err := halt(); err != nil {
				return answer{unknown: last.unknown, unknownSent: firstUnknown, err: err}
			}
		}
		if err := backoff.Sleep(ctx, min(backoff.Jitter(step), deadline.Sub(c.Now()))); err != nil {
			return answer{unknown: last.unknown, unknownSent: firstUnknown, err: err}
		}
		step = min(step*2, maxBackoff)
	}
}

// proclaim makes owner the lock's holder on the server in place of its
// current owner, with the same token, and extends the lease by the lock's
// TTL: an election's Proclaim. A proclaim whose outcome stays unknown is
// kept, and every later Extend (a renewal) and Unlock sends it again until
// one answers, so the handle never loses track of who holds the lock. A
// different proclaim while one is unknown sends that one first.
func (l *Lock) proclaim(ctx context.Context, owner []byte) error {
	l.extendMu.Lock()
	defer l.extendMu.Unlock()
	if cur, unsure := l.owners(); unsure != nil && string(unsure) != string(owner) {
		if _, err := l.extendLocked(ctx, l.ttl); err != nil {
			return err
		}
	} else if unsure == nil && string(cur) == string(owner) {
		_, err := l.extendLocked(ctx, l.ttl) // the same value again: a renewal
		return err
	}
	l.mu.Lock()
	l.proclaimed = owner
	l.mu.Unlock()
	unknown, err := l.extendLocked(ctx, l.ttl)
	if err != nil && !unknown {
		l.mu.Lock()
		l.proclaimed = nil // not applied: the holder is the owner still
		l.mu.Unlock()
	}
	return err
}
