package kahuna

import (
	"context"
	"errors"

	"github.com/kahunago/kahuna/lease"
)

// A read/write lock lets many readers hold it at once, or one writer: a
// shared index and its re-indexer. It is the resource RWLockPrefix + its
// name, one persistent entry on the server listing its holders.
//
// Its fencing tokens are write epochs. Every write grant takes the next
// epoch; every read grant takes the current one, the epoch of the last
// write. A resource that keeps the highest epoch it has seen rejects a
// writer whose epoch was superseded, and a write that a reader derived
// from a superseded epoch.
//
// Waiters are served first come, first served: a writer waiting blocks
// the readers that come after it, so writers are never starved. A reader
// asking for the write lock (an upgrade) is refused with InvalidInput,
// never left waiting: two readers upgrading would wait for each other.

// RWLockPrefix is what a read/write lock's name is prefixed with to name
// its entry.
const RWLockPrefix = lease.RWLockPrefix

// MaxReaders is the most readers a read/write lock holds at once; the
// next one waits.
const MaxReaders = lease.MaxReaders

// ErrNoReadLocks: the Locker cannot carry a read lock's request. The
// embedded Node and a Client can (over REST a waiting read lock polls
// instead of queueing on the server). Write locks need nothing more than
// a Locker.
var ErrNoReadLocks = errors.New("kahuna: this Locker does not carry read lock requests (use the embedded Node or a Client)")

// RWLock is a read/write lock on a Locker. It holds no state of its own.
type RWLock struct {
	locker Locker
	name   string
}

// NewRWLock names the read/write lock name on l.
func NewRWLock(l Locker, name string) *RWLock { return &RWLock{locker: l, name: name} }

// Name returns the lock's name.
func (rw *RWLock) Name() string { return rw.name }

// Lock waits for the write lock and returns it as a Lock (Extend,
// KeepAlive, Unlock, Context, Lost as for any lock); its FencingToken is
// its write epoch. opts are Acquire's; the wait defaults to WaitForever.
// It returns a *StatusError with InvalidInput, having changed nothing,
// for an empty name or an owner that holds a read lock (no upgrade).
func (rw *RWLock) Lock(ctx context.Context, opts ...AcquireOption) (*Lock, error) {
	return rw.acquire(ctx, false, append([]AcquireOption{WithWaitForever()}, opts...))
}

// TryLock is Lock that does not wait: Busy at once if a reader or a
// writer holds the lock, or others wait before it.
func (rw *RWLock) TryLock(ctx context.Context, opts ...AcquireOption) (*Lock, error) {
	return rw.acquire(ctx, false, append(opts, WithWait(0)))
}

// RLock waits for a read lock; its FencingToken is the epoch it reads
// under (the last write's). Otherwise as Lock; an owner that holds the
// write lock is refused.
func (rw *RWLock) RLock(ctx context.Context, opts ...AcquireOption) (*Lock, error) {
	return rw.acquire(ctx, true, append([]AcquireOption{WithWaitForever()}, opts...))
}

// TryRLock is RLock that does not wait: Busy at once if a writer holds
// the lock or waits for it.
func (rw *RWLock) TryRLock(ctx context.Context, opts ...AcquireOption) (*Lock, error) {
	return rw.acquire(ctx, true, append(opts, WithWait(0)))
}

func (rw *RWLock) acquire(ctx context.Context, shared bool, opts []AcquireOption) (*Lock, error) {
	op := "write lock"
	if shared {
		op = "read lock"
	}
	if rw.name == "" {
		return nil, &StatusError{Op: op, Status: InvalidInput, Reason: "read/write lock name is empty"}
	}
	canWhole := doerOf(rw.locker) != nil
	if shared && !canWhole {
		return nil, ErrNoReadLocks
	}
	// A write is a plain lock request: any Locker carries it; a Locker
	// that takes requests whole waits on the server as for a read.
	opts = append(opts, func(o *acquireOptions) { o.whole, o.shared = canWhole, shared })
	lk, err := Acquire(ctx, rw.locker, RWLockPrefix+rw.name, opts...)
	if err != nil {
		return nil, asCall(err, op, rw.name)
	}
	return lk, nil
}
