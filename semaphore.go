package kahuna

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// A semaphore lets at most its limit of permits be held at once: a pool
// of N workers on a rate-limited API, N builds on a runner pool. It is
// the resource SemaphorePrefix + its name, one persistent entry of limit
// slots on the server (so a semaphore's name is never also a lock's).
//
// Each slot has its own fencing token, its generation: bumped every time
// the slot is granted. A resource that keeps the highest token it has
// seen per (semaphore, slot) rejects a holder whose permit lapsed and was
// granted again, exactly as for a lock (the fence module does it with
// the name "semaphore:NAME/SLOT").
//
// The limit is the server's: the first grant states it, and a later
// request with another limit is refused (InvalidInput) with both values,
// so processes cannot silently disagree about it. Waiters are served first
// come, first served, a request for several permits included: free
// permits are not taken by a later request while the head of the queue
// waits for more of them.

// SemaphorePrefix is what a semaphore's name is prefixed with to name its
// entry.
const SemaphorePrefix = lease.SemaphorePrefix

// MaxPermits is the largest limit a semaphore may have.
const MaxPermits = lease.MaxPermits

// Grant is one permit of a Permit: its slot and that slot's fencing token.
type Grant = lease.Grant

// ErrNoSemaphores: the Locker cannot carry a semaphore's request (its
// permits and limit). The embedded Node and a Client can (over REST a
// waiting acquire polls instead of queueing on the server); other Lockers
// cannot.
var ErrNoSemaphores = errors.New("kahuna: this Locker does not carry semaphore requests (use the embedded Node or a Client)")

// doerOf is how l runs a request whole (lease.Doer), or nil if it cannot.
func doerOf(l Locker) func(ctx context.Context, req lease.Checked) (LockInfo, Result, error) {
	if d, ok := l.(lease.Doer); ok {
		return d.Do
	}
	return nil
}

// Semaphore is a counting semaphore on a Locker. It holds no state of its
// own: every Permit is the server's.
type Semaphore struct {
	locker Locker
	name   string
	limit  atomic.Int64 // the limit it states (SetLimit changes it)
}

// NewSemaphore names the semaphore name of limit permits on l. Nothing is
// asked of the server until a permit is.
func NewSemaphore(l Locker, name string, limit int) *Semaphore {
	s := &Semaphore{locker: l, name: name}
	s.limit.Store(int64(limit))
	return s
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Limit returns the limit this Semaphore states.
func (s *Semaphore) Limit() int { return int(s.limit.Load()) }

// SetLimit sets the semaphore's limit on the server to n, online, and
// states n from then on. A larger limit lets waiters in at once; a smaller
// one revokes no permit: holders above it keep theirs until they release
// or lapse, and count against it meanwhile, so nothing is granted until
// fewer than n are held. Requests that state another limit are refused,
// naming both (the other processes learn the new limit from that error).
// The limit lasts as long as the semaphore's entry: once every permit has
// been released and the entry is swept, the next first grant states it
// again. Safe to retry: setting the same limit twice is setting it once.
//
// It returns a *StatusError with InvalidInput, having changed nothing,
// for an empty name or n outside 1..MaxPermits; ErrNoSemaphores for a
// Locker that cannot carry the request.
func (s *Semaphore) SetLimit(ctx context.Context, n int) error {
	do := doerOf(s.locker)
	if do == nil {
		return ErrNoSemaphores
	}
	req, why := lease.Request{Op: lease.TryLock, Resource: SemaphorePrefix + s.name, Owner: NewOwner(), TTL: time.Second,
		Durability: Persistent, Limit: n, Resize: true}.Check()
	if why != "" {
		return &StatusError{Op: "set the limit of semaphore", Resource: s.name, Status: InvalidInput, Reason: why}
	}
	a := retryOp(ctx, systemClock{}, nil, func() (Result, error) {
		_, r, err := do(ctx, req)
		return r, err
	})
	switch {
	case a.err != nil:
		return fmt.Errorf("kahuna: set the limit of semaphore %s: %w", lease.Excerpt(s.name), a.err)
	case a.r.Status != Extended:
		return &StatusError{Op: "set the limit of semaphore", Resource: s.name, Status: a.r.Status, Reason: a.r.Reason}
	}
	s.limit.Store(int64(n))
	return nil
}

// Acquire waits for n permits and holds them under one lease, which the
// Permit extends, keeps alive (KeepAlive) and releases as a Lock does; in
// a session (WithSession), the session's renewals keep it. opts are
// Acquire's: WithTTL, WithWait (default WaitForever: until ctx ends; the
// wait is in the semaphore's first-come first-served queue on the server),
// WithOwner, WithSession, WithSafetyMargin, WithRetryNotice. A semaphore
// is persistent: WithDurability(Ephemeral) is refused.
//
// It returns a *StatusError with InvalidInput, having changed nothing, for
// an empty name, a limit outside 1..MaxPermits, n outside 1..limit, or a
// limit that differs from the one the server holds (the reason names
// both); with Busy if the wait ended with too few permits free.
func (s *Semaphore) Acquire(ctx context.Context, n int, opts ...AcquireOption) (*Permit, error) {
	opts = append([]AcquireOption{WithWaitForever()}, opts...)
	return s.acquire(ctx, n, opts)
}

// TryAcquire is Acquire that does not wait: Busy (a *StatusError) at once
// if n permits are not free, or if others wait before it.
func (s *Semaphore) TryAcquire(ctx context.Context, n int, opts ...AcquireOption) (*Permit, error) {
	opts = append(opts, WithWait(0))
	return s.acquire(ctx, n, opts)
}

func (s *Semaphore) acquire(ctx context.Context, n int, opts []AcquireOption) (*Permit, error) {
	if s.name == "" {
		return nil, &StatusError{Op: "acquire permits", Resource: s.name, Status: InvalidInput, Reason: "semaphore name is empty"}
	}
	if doerOf(s.locker) == nil {
		return nil, ErrNoSemaphores
	}
	opts = append(opts, func(o *acquireOptions) { o.whole, o.permits, o.limit = true, n, s.Limit() })
	lk, err := Acquire(ctx, s.locker, SemaphorePrefix+s.name, opts...)
	if err != nil {
		return nil, asCall(err, "acquire permits", s.name)
	}
	return &Permit{Lock: lk, name: s.name}, nil
}

// Permit is permits of a semaphore held under one lease: a Lock whose
// Extend, Unlock, KeepAlive, Context and Lost are those of all its
// permits together. Its FencingToken is its first grant's; pass each
// Grant's token, with its slot, to what the holder writes to.
type Permit struct {
	*Lock
	name string
}

// Name returns the semaphore's name.
func (p *Permit) Name() string { return p.name }

// Grants returns the permits held: each one's slot and fencing token.
func (p *Permit) Grants() []Grant { return append([]Grant(nil), p.grants...) }

// Free is how many of the semaphore's permits were free once these were
// granted: a moment's count, which others change at any time.
func (p *Permit) Free() int { return p.free }

// FenceName is the name under which a fence keeps the highest token of a
// permit's slot: the semaphore's entry and the slot.
func (p *Permit) FenceName(g Grant) string {
	return SemaphorePrefix + p.name + "/" + strconv.Itoa(g.Slot)
}
