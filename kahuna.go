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

import "github.com/kahunago/kahuna/lease"

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
type Result = lease.Result

// LockInfo describes a live lock, as returned by Get.
type LockInfo = lease.LockInfo

// Locker is the lock protocol, implemented by the embedded *Node and by the
// remote *Client. The error return is for failures of the call itself
// (context done, node closed, transport down); lock outcomes, Busy and
// InvalidInput included, are Statuses. See lease.Locker for each method.
type Locker = lease.Locker

// WaitLocker is a Locker that waits on the server for a busy lock, in a
// FIFO queue per resource (see lease.WaitLocker). The embedded *Node is
// one; Acquire with WithWait uses it when its Locker is one.
type WaitLocker = lease.WaitLocker

// WaitForever, as a wait (Node.Lock, WithWait), waits until the context
// ends, like etcd's Mutex.Lock.
const WaitForever = lease.WaitForever

// MaxWait is the longest wait other than WaitForever (the TTL limit).
const MaxWait = lease.MaxWait

// Limits on a lock request: a longer resource or owner, or a longer TTL,
// is answered InvalidInput with the reason, and changes nothing.
const (
	MaxResourceBytes = lease.MaxResourceBytes
	MaxOwnerBytes    = lease.MaxOwnerBytes
	MaxTTL           = lease.MaxTTL
)
