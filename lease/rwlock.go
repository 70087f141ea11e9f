package lease

import (
	"strconv"
	"strings"
	"time"
)

// A read/write lock is the resource RWLockPrefix + its name. Its entry
// holds its holders as Slots: any number of readers (Request.Shared, up
// to MaxReaders) or one writer (Entry.Exclusive). Its fencing tokens are
// write epochs: every write grant takes the next epoch (Entry.Token + 1),
// and a read grant takes the current one, the epoch of the last write it
// reads after. A resource that keeps the highest epoch it has seen rejects
// a writer whose epoch was superseded, and a write derived from a read of
// a superseded epoch: Chubby's sequencer, mode and generation.
//
// A request that is not Shared is a write: so Kahuna's TryLock on the name
// is one. Upgrading a read to a write is refused (InvalidInput), never
// waited for: two readers upgrading would wait for each other for ever.
// Like a semaphore, a read/write lock is persistent.
const (
	RWLockPrefix = "rwlock:"
	// MaxReaders is the most readers a read/write lock holds at once.
	MaxReaders = 256
)

// IsRWLock reports whether resource names a read/write lock.
func IsRWLock(resource string) bool { return strings.HasPrefix(resource, RWLockPrefix) }

// IsShared reports whether the entry is of a kind with several holders (a
// semaphore's or a read/write lock's), whose holders are its Slots.
func (e *Entry) IsShared() bool { return e.Limit > 0 || e.RW }

// checkRWLock is Request.Check's rule for read/write locks: persistent,
// Shared only on their names and on a TryLock.
func (r *Request) checkRWLock() string {
	if !IsRWLock(r.Resource) {
		if r.Shared {
			return "shared is for read/write locks (names starting with " + RWLockPrefix + ")"
		}
		return ""
	}
	switch {
	case r.Resource == RWLockPrefix:
		return "read/write lock name is empty"
	case r.Durability != Persistent && r.Op != Get: // a Get reads whatever is held
		return "a read/write lock is persistent: its holders are not kept in memory alone"
	case r.Shared && r.Op != TryLock:
		return "shared is for taking a read lock, not " + r.Op.String()
	}
	return ""
}

// decideRW is Decide for a read/write lock's request r.
func decideRW(e Entry, r *Request, now time.Time) Decision {
	if r.Op == Get {
		return e.getShared(now)
	}
	if !e.RW && e.Live(now) {
		return Decision{Status: Busy} // held as a lock (stored before names were kinds)
	}
	switch r.Op {
	case TryLock:
		if held := e.owned(r.Owner, now, true); len(held) > 0 {
			switch {
			case r.Shared == !e.Exclusive:
				// Same owner, same mode: the same grant again, expiry not refreshed.
				return Decision{Status: Locked, Token: held[0].Token, Grants: held}
			case e.Exclusive:
				return Decision{Status: InvalidInput, Reason: "the owner holds the write lock: release it before taking a read lock"}
			default:
				return Decision{Status: InvalidInput, Reason: "the owner holds a read lock: release it before taking the write lock (an upgrade would wait for ever on another reader's)"}
			}
		}
		live := 0
		for i := range e.Slots {
			if e.Slots[i].live(now) {
				live++
			}
		}
		epoch := max(e.Token, e.Floor) // the epoch reads take: the last write's
		switch {
		case r.Shared && e.Exclusive && live > 0, r.Shared && live >= MaxReaders, !r.Shared && live > 0:
			return Decision{Status: Busy}
		case !r.Shared && e.State != Absent:
			epoch = max(e.Token+1, e.Floor)
		}
		next := e.withSlots()
		next.RW = true
		next.Slots = next.Slots[:0]
		if r.Shared {
			for _, s := range e.Slots { // the live readers stay; lapsed holders go
				if s.live(now) {
					next.Slots = append(next.Slots, s)
				}
			}
		}
		next.Slots = append(next.Slots, Slot{Owner: append([]byte(nil), r.Owner...), Expires: now.Add(r.TTL), Token: epoch})
		next.Exclusive, next.Token = !r.Shared, epoch
		next.settle()
		if size := next.slotsSize(); size > MaxSemaphoreBytes {
			return Decision{Status: InvalidInput, Reason: "the read locks' owners would take " + strconv.Itoa(size) +
				" bytes, over the limit of " + strconv.Itoa(MaxSemaphoreBytes) + ": use shorter owners"}
		}
		g := []Grant{{Slot: len(next.Slots) - 1, Token: epoch}}
		return Decision{Status: Locked, Token: epoch, Grants: g, Write: true, Next: next}

	case Extend:
		return e.extendSlots(r, now)

	case Unlock:
		held := e.owned(r.Owner, now, false)
		if len(held) == 0 {
			return Decision{Status: LockDoesNotExist}
		}
		next := e.withSlots()
		next.Slots = next.Slots[:0]
		for _, s := range e.Slots {
			if string(s.Owner) != string(r.Owner) {
				next.Slots = append(next.Slots, s)
			}
		}
		next.settle()
		return Decision{Status: Unlocked, Write: true, Next: next}
	}
	return Decision{Status: InvalidInput, Reason: "not an operation of read/write locks: " + r.Op.String()}
}
