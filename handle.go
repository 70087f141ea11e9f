package kahuna

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

var (
	// ErrBusy: the lock was held by another owner for the whole wait.
	ErrBusy = errors.New("kahuna: lock is busy")
	// ErrLockLost: Extend or Unlock found the lease gone (it lapsed, or
	// another owner holds the lock). The error also carries the Status.
	ErrLockLost = errors.New("kahuna: lock lost")
)

// StatusError is a lock operation that ended with a Status other than
// success. It matches ErrLockLost for LockDoesNotExist and InvalidOwner on
// Extend and Unlock, and ErrBusy for Busy.
type StatusError struct {
	Op       string
	Resource string
	Status   Status
}

func (e *StatusError) Error() string {
	return "kahuna: " + e.Op + " " + e.Resource + ": " + e.Status.String()
}

// Unwrap lets errors.Is match the sentinel the status stands for.
func (e *StatusError) Unwrap() error {
	switch {
	case e.Status == Busy:
		return ErrBusy
	case (e.Op == "extend" || e.Op == "unlock") && (e.Status == LockDoesNotExist || e.Status == InvalidOwner):
		return ErrLockLost
	}
	return nil
}

const (
	defaultTTL = 30 * time.Second
	// mustRetryBudget bounds the retries of MustRetry where no wait says
	// otherwise (Kahuna's clients use the same 30 s).
	mustRetryBudget = 30 * time.Second
	minBackoff      = time.Millisecond
	maxBackoff      = 50 * time.Millisecond
)

type acquireOptions struct {
	ttl        time.Duration
	wait       time.Duration
	durability Durability
	owner      []byte
}

// AcquireOption tunes Acquire.
type AcquireOption func(*acquireOptions)

// WithTTL sets the lease length (default 30 s).
func WithTTL(ttl time.Duration) AcquireOption { return func(o *acquireOptions) { o.ttl = ttl } }

// WithWait keeps trying while the lock is busy for up to wait (default 0:
// one attempt).
func WithWait(wait time.Duration) AcquireOption { return func(o *acquireOptions) { o.wait = wait } }

// WithDurability chooses Ephemeral or Persistent (default Persistent).
func WithDurability(d Durability) AcquireOption {
	return func(o *acquireOptions) { o.durability = d }
}

// WithOwner sets the owner (default: a fresh random 32-character owner).
func WithOwner(owner []byte) AcquireOption {
	return func(o *acquireOptions) { o.owner = append([]byte(nil), owner...) }
}

// NewOwner returns a fresh random owner: 32 lowercase hex characters, like
// Kahuna's clients mint.
func NewOwner() []byte {
	var b [16]byte
	_, _ = crand.Read(b[:])
	return []byte(hex.EncodeToString(b[:]))
}

// Lock is a held lease on a resource.
type Lock struct {
	locker     Locker
	resource   string
	owner      []byte
	token      int64
	durability Durability
	ttl        time.Duration

	ctx      context.Context // cancelled when the lock is lost or released
	cancel   context.CancelFunc
	lost     chan struct{}
	lostOnce sync.Once
	alive    atomic.Bool // a KeepAlive loop runs
}

func newLock(l Locker, resource string, owner []byte, token int64, d Durability, ttl time.Duration) *Lock {
	ctx, cancel := context.WithCancel(context.Background())
	return &Lock{locker: l, resource: resource, owner: owner, token: token, durability: d, ttl: ttl,
		ctx: ctx, cancel: cancel, lost: make(chan struct{})}
}

// Acquire locks resource on l. It returns ErrBusy if another owner held it
// for the whole wait, a *StatusError for any other refusal, and ctx.Err()
// unchanged if ctx ends first. MustRetry answers (the node cannot serve
// now) are retried with backoff until ctx or the wait ends (at least 30 s).
func Acquire(ctx context.Context, l Locker, resource string, opts ...AcquireOption) (*Lock, error) {
	o := acquireOptions{ttl: defaultTTL, durability: Persistent}
	for _, opt := range opts {
		opt(&o)
	}
	if o.owner == nil {
		o.owner = NewOwner()
	}
	start := time.Now()
	busyUntil := start.Add(o.wait)
	retryUntil := start.Add(max(o.wait, mustRetryBudget))
	backoff := minBackoff
	for {
		r, err := l.TryLock(ctx, resource, o.owner, o.ttl, o.durability)
		if err != nil {
			return nil, err
		}
		var until time.Time
		switch r.Status {
		case Locked:
			return newLock(l, resource, o.owner, r.FencingToken, o.durability, o.ttl), nil
		case Busy:
			until = busyUntil
		case MustRetry:
			until = retryUntil
		default:
			return nil, &StatusError{Op: "lock", Resource: resource, Status: r.Status}
		}
		if !time.Now().Before(until) {
			return nil, &StatusError{Op: "lock", Resource: resource, Status: r.Status}
		}
		if err := sleep(ctx, min(jitter(backoff), time.Until(until))); err != nil {
			return nil, err
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// Resource is the locked resource.
func (l *Lock) Resource() string { return l.resource }

// Owner is the owner the lock is held by (a copy).
func (l *Lock) Owner() []byte { return append([]byte(nil), l.owner...) }

// FencingToken is the token of this grant. Pass it to whatever the lock
// protects, which should reject tokens older than the newest it has seen.
func (l *Lock) FencingToken() int64 { return l.token }

// Durability is the lock's durability.
func (l *Lock) Durability() Durability { return l.durability }

// Extend makes the lease end ttl from now. It returns an error matching
// ErrLockLost when the lease is gone; stop the protected work then.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	r, err := retry(ctx, func() (Result, error) {
		return l.locker.Extend(ctx, l.resource, l.owner, ttl, l.durability)
	})
	if err != nil {
		return err
	}
	if r.Status != Extended {
		err := &StatusError{Op: "extend", Resource: l.resource, Status: r.Status}
		if errors.Is(err, ErrLockLost) {
			l.markLost()
		}
		return err
	}
	return nil
}

// Unlock releases the lock. It returns an error matching ErrLockLost when
// the lock was no longer this owner's.
func (l *Lock) Unlock(ctx context.Context) error {
	r, err := retry(ctx, func() (Result, error) {
		return l.locker.Unlock(ctx, l.resource, l.owner, l.durability)
	})
	if err != nil {
		return err
	}
	if r.Status != Unlocked {
		err := &StatusError{Op: "unlock", Resource: l.resource, Status: r.Status}
		if errors.Is(err, ErrLockLost) {
			l.markLost()
		}
		return err
	}
	l.cancel() // released: the work it guarded must stop too
	return nil
}

// Lost is closed when the lock is found lost: an Extend (KeepAlive's
// included) or Unlock answered that the lease lapsed or another owner
// holds it, or KeepAlive could not extend it before it ran out.
func (l *Lock) Lost() <-chan struct{} { return l.lost }

// Context is cancelled when the lock is lost or released; run the work the
// lock guards under it.
func (l *Lock) Context() context.Context { return l.ctx }

func (l *Lock) markLost() {
	l.lostOnce.Do(func() {
		close(l.lost)
		l.cancel()
	})
}

// KeepAlive extends the lease by its TTL every interval (default a third
// of the TTL), in the background, until ctx ends, the lock is released, or
// it is lost. Failed extends are retried; if none succeeds before the
// lease would have run out, the lock is treated as lost. Watch Lost or
// Context. A second call while one runs does nothing.
func (l *Lock) KeepAlive(ctx context.Context, every time.Duration) {
	if every <= 0 || every >= l.ttl {
		every = l.ttl / 3
	}
	if !l.alive.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer l.alive.Store(false)
		ticker := time.NewTicker(every)
		defer ticker.Stop()
		// The lease surely lasts until this (measured from before the call
		// that set it, so it errs early).
		lapse := time.Now().Add(l.ttl)
		for {
			select {
			case <-ctx.Done():
				return
			case <-l.ctx.Done():
				return
			case <-ticker.C:
			}
			start := time.Now()
			cctx, cancel := context.WithDeadline(ctx, lapse)
			err := l.Extend(cctx, l.ttl)
			cancel()
			switch {
			case err == nil:
				lapse = start.Add(l.ttl)
			case errors.Is(err, ErrLockLost):
				return // markLost already ran
			case ctx.Err() != nil:
				return
			case !time.Now().Before(lapse):
				l.markLost() // could not extend before the lease ran out
				return
			}
		}
	}()
}

// retry repeats op while it answers MustRetry, for up to mustRetryBudget.
func retry(ctx context.Context, op func() (Result, error)) (Result, error) {
	deadline := time.Now().Add(mustRetryBudget)
	backoff := minBackoff
	for {
		r, err := op()
		if err != nil || r.Status != MustRetry || !time.Now().Before(deadline) {
			return r, err
		}
		if err := sleep(ctx, min(jitter(backoff), time.Until(deadline))); err != nil {
			return r, err
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// jitter spreads d over [d/2, d) so retrying callers do not move in step.
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2+1)
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
