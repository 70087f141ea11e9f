package lease

import (
	"context"
	"fmt"
	"time"
)

// Request is one lock call as a value. The edge a call enters (a wire
// server, the embedded node's methods) builds it once and checks it once
// (Request.Check); the Checked value it gets is what routing, forwarding
// and the lock actor carry, and what Do dispatches.
type Request struct {
	Op         Op
	Resource   string
	Owner      []byte        // all but Get
	TTL        time.Duration // TryLock and Extend
	Durability Durability
	// Wait, for a TryLock, is how long it may wait in the resource's
	// queue (WaitLocker.Lock; WaitForever: until its context ends). 0 does
	// not wait.
	Wait time.Duration
	// Permits and Limit, for a semaphore's TryLock (semaphore.go), are how
	// many permits the owner takes and the limit it states. 0 elsewhere.
	Permits int
	Limit   int
	// Shared, for a read/write lock's TryLock (rwlock.go), asks for a
	// read lock; false is the write lock.
	Shared bool
	// Resize, for a semaphore's TryLock with Limit and no Permits, sets
	// its limit to Limit instead of taking permits (semaphore.go); its
	// Owner and TTL are not used.
	Resize bool
	// NewOwner, for an Extend of an election's lock (election.go), is a
	// proclaim: the holder Owner is replaced by NewOwner, the same
	// candidate ID with a new value, keeping the token. nil elsewhere.
	NewOwner []byte
	// Also, for a TryLock, names more resources to lock with Resource, all
	// or none, in one replicated step (group.go); for an Extend or an
	// Unlock, more resources to extend or release with Resource, each on
	// its own, in one call (batch.go). nil elsewhere.
	Also []string
}

// Check is the rule every edge applies to a lock call: it says why r is
// not well formed (Check's reasons for its fields, then the wait's), or
// returns it as Checked. A reason never quotes the resource or the owner.
// It allocates only for an invalid request.
func (r Request) Check() (Checked, string) {
	if reason := Check(r.Op, r.Resource, r.Owner, r.TTL, r.Durability); reason != "" {
		return Checked{}, reason
	}
	if reason := r.checkSemaphore(); reason != "" {
		return Checked{}, reason
	}
	if reason := r.checkRWLock(); reason != "" {
		return Checked{}, reason
	}
	if reason := r.checkProclaim(); reason != "" {
		return Checked{}, reason
	}
	if reason := r.checkGroup(); reason != "" {
		return Checked{}, reason
	}
	if r.Wait != 0 {
		if r.Op != TryLock {
			return Checked{}, "wait is only for a lock, not " + r.Op.String()
		}
		if reason := CheckWait(r.Wait); reason != "" {
			return Checked{}, reason
		}
	}
	return Checked{r: r}, ""
}

// Checked is a Request that passed Request.Check. Only Check makes one
// (its zero value is no request: Do refuses it), so what takes a Checked
// need not check it again.
type Checked struct{ r Request }

// Request returns the checked request. The Owner is shared: do not modify it.
func (c Checked) Request() Request { return c.r }

// Doer is a Locker that takes a checked request whole (the embedded node,
// the remote client), so a caller holding one need not pick the Locker
// method of its op.
type Doer interface {
	Do(ctx context.Context, req Checked) (LockInfo, Result, error)
}

// errNoRequest answers the zero Checked, which Check never returns.
var errNoRequest = fmt.Errorf("lease: a zero Checked is no request: %w", ErrNotApplied)

// Do runs req on l and is the one switch from a request's op to a Locker
// method: l.Do when l is a Doer, else the method of req's op
// (WaitLocker.Lock for a TryLock with a Wait; a Locker that cannot wait
// gets an error that wraps ErrNotApplied, having been sent nothing).
func Do(ctx context.Context, l Locker, req Checked) (LockInfo, Result, error) {
	r := req.r
	if r.Resource == "" {
		return LockInfo{}, Result{}, errNoRequest
	}
	if d, ok := l.(Doer); ok {
		return d.Do(ctx, req)
	}
	if r.IsBatch() {
		return LockInfo{}, Result{}, fmt.Errorf("lease: %T cannot take a batch of several names (only a kahuna node or client can): %w", l, ErrNotApplied)
	}
	var (
		res Result
		err error
	)
	switch r.Op {
	case TryLock:
		if r.Also != nil {
			return LockInfo{}, Result{}, fmt.Errorf("lease: %T cannot lock several names at once (only a kahuna node or client can): %w", l, ErrNotApplied)
		}
		if r.Wait == 0 {
			res, err = l.TryLock(ctx, r.Resource, r.Owner, r.TTL, r.Durability)
			break
		}
		wl, ok := l.(WaitLocker)
		if !ok {
			return LockInfo{}, Result{}, fmt.Errorf("lease: %T cannot wait: %w", l, ErrNotApplied)
		}
		res, err = wl.Lock(ctx, r.Resource, r.Owner, r.TTL, r.Wait, r.Durability)
	case Extend:
		if r.NewOwner != nil {
			return LockInfo{}, Result{}, fmt.Errorf("lease: %T cannot proclaim (only a kahuna node or client can): %w", l, ErrNotApplied)
		}
		res, err = l.Extend(ctx, r.Resource, r.Owner, r.TTL, r.Durability)
	case Unlock:
		res, err = l.Unlock(ctx, r.Resource, r.Owner, r.Durability)
	case Get:
		return l.Get(ctx, r.Resource, r.Durability)
	}
	return LockInfo{}, res, err
}

// NoWait is the same request as a TryLock that does not wait (a poll of
// a waiting lock), still checked.
func (c Checked) NoWait() Checked {
	c.r.Wait = 0
	return c
}

// LockerFunc is a WaitLocker made of one function that takes each call as
// a Request: its methods build the request and nothing else, so an
// implementation checks and dispatches in that one function.
type LockerFunc func(ctx context.Context, req Request) (LockInfo, Result, error)

func (f LockerFunc) TryLock(ctx context.Context, resource string, owner []byte, ttl time.Duration, d Durability) (Result, error) {
	_, r, err := f(ctx, Request{Op: TryLock, Resource: resource, Owner: owner, TTL: ttl, Durability: d})
	return r, err
}

func (f LockerFunc) Extend(ctx context.Context, resource string, owner []byte, ttl time.Duration, d Durability) (Result, error) {
	_, r, err := f(ctx, Request{Op: Extend, Resource: resource, Owner: owner, TTL: ttl, Durability: d})
	return r, err
}

func (f LockerFunc) Unlock(ctx context.Context, resource string, owner []byte, d Durability) (Result, error) {
	_, r, err := f(ctx, Request{Op: Unlock, Resource: resource, Owner: owner, Durability: d})
	return r, err
}

func (f LockerFunc) Get(ctx context.Context, resource string, d Durability) (LockInfo, Result, error) {
	return f(ctx, Request{Op: Get, Resource: resource, Durability: d})
}

// Lock is a TryLock with a Wait.
func (f LockerFunc) Lock(ctx context.Context, resource string, owner []byte, ttl, wait time.Duration, d Durability) (Result, error) {
	_, r, err := f(ctx, Request{Op: TryLock, Resource: resource, Owner: owner, TTL: ttl, Durability: d, Wait: wait})
	return r, err
}

var _ WaitLocker = LockerFunc(nil)
