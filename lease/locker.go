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
}

// LockInfo describes a live lock, as returned by Get.
type LockInfo struct {
	Owner        []byte
	Expires      time.Time // wall clock, millisecond precision
	FencingToken int64
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
