// Package lease is the vocabulary of locks (statuses, durabilities, the
// Locker protocol) and the lock decision, with no actors, clocks or disks
// inside: given the current entry of a resource, a request and "now",
// Decide says what the answer is and what the entry becomes. Every row of
// the semantics table (docs/semantics.md) is a case of Decide.
package lease

import (
	"strconv"
	"strings"
	"time"
)

// Status is the outcome of a lock operation. The numbers are Kahuna's wire values.
type Status int32

const (
	Locked                Status = 0
	Busy                  Status = 1
	Extended              Status = 2
	Unlocked              Status = 3
	Got                   Status = 4
	WaitingForReplication Status = 10
	Errored               Status = 99
	InvalidInput          Status = 100
	MustRetry             Status = 101
	LockDoesNotExist      Status = 102
	InvalidOwner          Status = 103
	Aborted               Status = 104
)

func (s Status) String() string {
	switch s {
	case Locked:
		return "Locked"
	case Busy:
		return "Busy"
	case Extended:
		return "Extended"
	case Unlocked:
		return "Unlocked"
	case Got:
		return "Got"
	case WaitingForReplication:
		return "WaitingForReplication"
	case Errored:
		return "Errored"
	case InvalidInput:
		return "InvalidInput"
	case MustRetry:
		return "MustRetry"
	case LockDoesNotExist:
		return "LockDoesNotExist"
	case InvalidOwner:
		return "InvalidOwner"
	case Aborted:
		return "Aborted"
	}
	return "Status(" + strconv.FormatInt(int64(s), 10) + ")"
}

// Durability says where a lock lives.
type Durability int32

const (
	// Ephemeral locks live only in the partition leader's memory.
	Ephemeral Durability = 0
	// Persistent locks are committed through Raft and survive restarts.
	Persistent Durability = 1
)

func (d Durability) String() string {
	switch d {
	case Ephemeral:
		return "Ephemeral"
	case Persistent:
		return "Persistent"
	}
	return "Durability(" + strconv.FormatInt(int64(d), 10) + ")"
}

// Valid reports whether d is one of the known durabilities.
func (d Durability) Valid() bool { return d == Ephemeral || d == Persistent }

// Op is a lock operation.
type Op uint8

const (
	TryLock Op = iota
	Extend
	Unlock
	Get
)

func (o Op) String() string {
	switch o {
	case TryLock:
		return "TryLock"
	case Extend:
		return "Extend"
	case Unlock:
		return "Unlock"
	case Get:
		return "Get"
	}
	return "Op(" + strconv.FormatInt(int64(o), 10) + ")"
}

// Limits on input, shared by every entry point: a request past one is
// InvalidInput with the reason, and changes nothing.
const (
	MaxResourceBytes = 1024
	MaxOwnerBytes    = 1024
	// MaxTTL is the longest lease: the largest int32 of milliseconds, as
	// Kahuna's wire carries it (about 24.8 days).
	MaxTTL = time.Duration(1<<31-1) * time.Millisecond
	// MaxWait is the longest a waiting lock request may wait (the TTL
	// limit), other than WaitForever.
	MaxWait = MaxTTL
	// MaxWaiters bounds the wait queue of one resource: a waiting request
	// that finds it full is answered Busy at once.
	MaxWaiters = 1024
)

// WaitForever, as the wait of a waiting lock request, waits until the
// request's context ends (etcd's Mutex.Lock). It is the only valid
// negative wait.
const WaitForever time.Duration = -1

// ValidWait reports whether wait is a valid wait for a waiting lock
// request: 0 (do not wait: a TryLock), up to MaxWait, or WaitForever.
// CheckWait says why not.
func ValidWait(wait time.Duration) bool {
	return wait == WaitForever || (wait >= 0 && wait <= MaxWait)
}

// Valid reports whether a request is well formed. A request that is not
// gets InvalidInput and changes nothing; Check says why.
func Valid(op Op, resource string, owner []byte, ttl time.Duration, d Durability) bool {
	return Check(op, resource, owner, ttl, d) == ""
}

// State of an entry.
type State uint8

const (
	// Absent: the resource has never been locked (as far as this entry knows).
	Absent State = iota
	// Held: granted to Owner until Expires (the lease may have lapsed since).
	Held
	// Released: unlocked; the owner is cleared and the token kept.
	Released
)

// Entry is the state of one resource.
type Entry struct {
	State State
	// RW, for a read/write lock (rwlock.go), says Slots are its holders:
	// readers, or one writer when Exclusive. Token is its write epoch.
	RW, Exclusive bool
	// Renewed, for a lock held persistently, says its holder's lease was
	// renewed by a recorded Extend: its later renewals may be kept in the
	// leader's memory (the store's expiry is then a lower bound). The lock
	// actors set and read it; the decisions here leave it as it was.
	// (The small fields are kept together: a node caches an Entry per
	// lock, and padding between them would cost each a word.)
	Renewed bool
	Owner   []byte
	// Expires is the end of the lease. Where it was granted it carries
	// Go's monotonic reading, so wall-clock jumps cannot move it.
	Expires time.Time
	// Token is the fencing token of the current or last grant. For an
	// Absent entry it is the least token its first grant may take (the
	// partition's token floor: above every token of a removed record).
	Token int64
	// Revision counts writes of the resource; it orders persistent records.
	Revision uint64
	// Limit and Slots, for a semaphore (semaphore.go), are its limit and
	// its permits; Token is then the highest of their tokens, and State,
	// Expires and Owner are derived from them. Limit is 0 for a lock.
	Limit int
	Slots []Slot
	// Floor is the least token a grant to a new owner may take, whatever
	// Token says: it carries tokens the entry does not know of (ephemeral
	// grants of an earlier leader, or of an evicted entry). Every Next
	// carries it; it is never stored.
	Floor int64
}

// Live reports whether the entry is a lease that has not lapsed at now.
// A lease is live up to and including its expiry instant.
func (e *Entry) Live(now time.Time) bool {
	return e.State == Held && !now.After(e.Expires)
}

// Window is a partition leader's room for ephemeral grants in its reign:
// a grant needs a token below Limit (one at or past Soon asks for more in
// the background), and a grant or extension a TTL within TTL (a new leader
// waits out that long of the last one's leases). Both are raised through
// Raft, so a later leader starts above them. A Sealed window (its leader
// handed its leases over) takes a raise before any ephemeral change,
// releases included: the raise voids the hand-over.
type Window struct {
	Limit, Soon int64
	TTL         time.Duration
	Sealed      bool
}

// Decision is the outcome of Decide.
type Decision struct {
	Status Status
	Token  int64 // the fencing token to answer (0 unless Locked, Extended or Got)
	// Write is true when Next must replace the entry (and, for persistent
	// locks, be committed before the answer is given).
	Write bool
	Next  Entry
	// Grants, for a semaphore's TryLock or Extend, are the permits granted
	// or extended (Token is the first one's).
	Grants []Grant
	// Reason, for InvalidInput, says why.
	Reason string
	// Free, with Grants of a semaphore, is how many permits are free after
	// the decision.
	Free int
}

// DecideRequest is Decide for a request whole: a semaphore's goes to its
// own rules (semaphore.go), every other one to Decide.
func DecideRequest(e Entry, r *Request, now time.Time) Decision {
	switch {
	case r.NewOwner != nil:
		return decideProclaim(e, r, now)
	case IsSemaphore(r.Resource):
		return decidePermits(e, r, now)
	case IsRWLock(r.Resource):
		return decideRW(e, r, now)
	}
	return Decide(e, r.Op, r.Owner, r.TTL, now)
}

// Decide applies op to e at now. owner and ttl are ignored where the op
// has none. Decide never retains owner: Next.Owner aliases either e.Owner
// or owner, and the caller copies it if owner's buffer is reused.
func Decide(e Entry, op Op, owner []byte, ttl time.Duration, now time.Time) Decision {
	switch op {
	case TryLock:
		if e.Live(now) {
			if string(e.Owner) == string(owner) {
				// Same owner: the same grant again, expiry not refreshed.
				return Decision{Status: Locked, Token: e.Token}
			}
			return Decision{Status: Busy}
		}
		token := e.Token + 1
		if e.State == Absent {
			token = e.Token
		}
		token = max(token, e.Floor)
		next := Entry{State: Held, Owner: owner, Expires: now.Add(ttl), Token: token, Revision: e.Revision + 1, Floor: e.Floor}
		return Decision{Status: Locked, Token: token, Write: true, Next: next}

	case Extend:
		if !e.Live(now) {
			return Decision{Status: LockDoesNotExist}
		}
		if string(e.Owner) != string(owner) {
			return Decision{Status: InvalidOwner}
		}
		next := e
		next.Expires = now.Add(ttl)
		next.Revision++
		return Decision{Status: Extended, Token: e.Token, Write: true, Next: next}

	case Unlock:
		if e.State != Held {
			return Decision{Status: LockDoesNotExist}
		}
		if string(e.Owner) != string(owner) {
			return Decision{Status: InvalidOwner}
		}
		// Expiry is not checked: the owner may release a lapsed lease that
		// nobody has taken since.
		next := Entry{State: Released, Expires: e.Expires, Token: e.Token, Revision: e.Revision + 1, Floor: e.Floor}
		return Decision{Status: Unlocked, Write: true, Next: next}

	case Get:
		if !e.Live(now) {
			return Decision{Status: LockDoesNotExist}
		}
		return Decision{Status: Got, Token: e.Token}
	}
	return Decision{Status: InvalidInput}
}

// PartitionKey is the part of resource that picks its partition: the part
// before the last '/', so "tenant/a/x" and "tenant/a/y" share one, or the
// whole name when it has no '/'. Resources with one key have one leader.
func PartitionKey(resource string) string {
	if i := strings.LastIndexByte(resource, '/'); i >= 0 {
		return resource[:i]
	}
	return resource
}
