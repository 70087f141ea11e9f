// Package kahuna is a distributed lock and lease engine. Locks are leases
// with fencing tokens: a holder may act until its lease ends, extends it
// while it works, and a crashed holder's lock frees itself when the lease
// runs out. Every grant carries a fencing token that only grows, so a
// protected resource can reject a stale holder.
//
// Ephemeral locks live in memory only; persistent locks are committed
// through Raft (dragonboat) onto badger and survive restarts.
//
// Open starts an embedded node; Acquire gives a handle on any Locker.
package kahuna

import (
	"context"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// Durability says where a lock lives: Ephemeral (memory of the partition
// leader) or Persistent (Raft log and badger).
type Durability = lease.Durability

const (
	Ephemeral  = lease.Ephemeral
	Persistent = lease.Persistent
)

// Status is the outcome of a lock operation, with Kahuna's wire values.
type Status = lease.Status

const (
	Locked                = lease.Locked
	Busy                  = lease.Busy
	Extended              = lease.Extended
	Unlocked              = lease.Unlocked
	Got                   = lease.Got
	WaitingForReplication = lease.WaitingForReplication
	Errored               = lease.Errored
	InvalidInput          = lease.InvalidInput
	MustRetry             = lease.MustRetry
	LockDoesNotExist      = lease.LockDoesNotExist
	InvalidOwner          = lease.InvalidOwner
	Aborted               = lease.Aborted
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

// Locker is the lock protocol. It is implemented by the embedded *Node and
// by remote clients. The error return is for failures of the call itself
// (context done, node closed, transport down); lock outcomes, Busy and
// InvalidInput included, are Statuses.
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
