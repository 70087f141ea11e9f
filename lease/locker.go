package lease

import (
	"context"
	"time"
)

// Result is the answer to a lock operation. FencingToken is set for
// Locked, Extended and Got. ServedFrom names the node that served the
// request where a transport reports it ("" otherwise).
type Result struct {
	Status       Status
	FencingToken int64
	ServedFrom   string
	// Waited, for a grant by WaitLocker.Lock, is how long the request
	// waited before it was granted, as the server measured it from when it
	// received the request (0 when granted at once, and for other calls).
	// The lease started no earlier than the request's send time plus
	// Waited (less the drift of the server's clock over the wait).
	Waited time.Duration
	// Reason, for InvalidInput, says why the request was refused: which
	// field, which limit (see Check); for a MustRetry, why the node could
	// not take it, when it knows (its disk short of space). It is ""
	// otherwise, and
	// where the answer came over a wire that does not carry it (Kahuna's
	// gRPC messages).
	Reason string
	// Grants, for a semaphore's TryLock or Extend (semaphore.go), are the
	// permits granted or extended, each with its slot and fencing token;
	// FencingToken is then the first one's.
	Grants []Grant
	// Free, with Grants of a semaphore, is how many of its permits were
	// free once these were granted or extended.
	Free int
	// Each, for a batch (an Extend or Unlock with Also, batch.go), is the
	// answer for each name, in the order of Request.Names.
	Each []Status
}

// LockInfo describes a live lock, as returned by Get.
type LockInfo struct {
	Owner        []byte
	Expires      time.Time // wall clock, millisecond precision
	FencingToken int64
	// Holders, for a semaphore or a read/write lock, are its live holders;
	// Owner is then empty, Expires is when the last holder's lease ends,
	// and FencingToken is the highest token granted (a read/write lock's
	// current write epoch).
	Holders []Holder
}

// Locker is the lock protocol. It is implemented by the embedded node and
// by remote clients, and served by the transports. The error return is for
// failures of the call itself (context done, node closed, transport down);
// lock outcomes, Busy and InvalidInput included, are Statuses.
type Locker interface {
	// TryLock grants resource to owner for ttl if it is free or its lease
	// has lapsed; the same owner re-locking a live lease gets its token back.
	TryLock(ctx context.Context, resource string, owner []byte, ttl time.Duration, d Durability) (Result, error)
	// Extend sets the owner's live lease to end ttl from now.
	Extend(ctx context.Context, resource string, owner []byte, ttl time.Duration, d Durability) (Result, error)
	// Unlock releases the owner's lock, even if its lease has lapsed.
	Unlock(ctx context.Context, resource string, owner []byte, d Durability) (Result, error)
	// Get describes the live lock on resource.
	Get(ctx context.Context, resource string, d Durability) (LockInfo, Result, error)
}

// WaitLocker is a Locker that can wait on the server for a busy lock, so a
// waiter needs no polling. The embedded node implements it; Acquire uses it
// when the Locker it is given does (test with a type assertion).
type WaitLocker interface {
	Locker
	// Lock is TryLock that, while another owner holds a live lease on
	// resource, waits for up to wait (WaitForever: until ctx ends) in the
	// resource's first-in first-out queue of waiters, and is granted the
	// lock when it reaches the head and the holder releases or lapses. It
	// answers Locked (with Result.Waited), Busy when the wait ended with
	// the lock still held or the queue was full, MustRetry when the
	// partition moved or its node stopped serving while it waited (nothing
	// was applied; retry), InvalidInput for a wait that is negative (other
	// than WaitForever) or over MaxWait, or what TryLock would answer. A
	// wait of 0 is exactly TryLock. If ctx ends first, the request leaves
	// the queue, and Lock returns the grant if one was made before it left
	// (a late answer is a real one), else ctx.Err(): the outcome is then
	// unknown only where the leaving could not be confirmed (a unary call
	// over the wire, a persistent hand-off under way), and an Unlock sent
	// after it releases any grant it had (Acquire sends one).
	Lock(ctx context.Context, resource string, owner []byte, ttl, wait time.Duration, d Durability) (Result, error)
}
