package lease

import (
	"strconv"
	"strings"
	"time"
)

// A semaphore is the resource SemaphorePrefix + its name. Its entry holds
// Limit slots; a permit is a slot held by an owner, and an owner takes
// one or more permits at once (Request.Permits), all with one lease. Each
// slot's Token is its generation: bumped every time the slot is granted,
// so a resource that keeps the highest token it has seen per slot fences
// a stale permit holder exactly as it fences a stale lock holder.
//
// The limit is the server's: the first grant states it, and a request
// that states another one while the entry exists is refused with both
// values. A semaphore is persistent: its permits are written through Raft
// like a persistent lock (an ephemeral semaphore would need its permits
// handed over between leaders, which is not built).
const (
	SemaphorePrefix = "semaphore:"
	// MaxPermits is the largest limit: the entry (and its stored record)
	// holds one slot per permit.
	MaxPermits = 256
	// MaxSemaphoreBytes bounds what a semaphore's permits take in its
	// record: the owners of its held slots, plus slotBytes for each slot.
	// A grant past it is refused (InvalidInput), so a record always fits
	// the store's limit on one record.
	MaxSemaphoreBytes = 48 << 10
	slotBytes         = 24
)

// Slot is one permit of a semaphore.
type Slot struct {
	Owner   []byte // nil: free (never granted, or released)
	Expires time.Time
	// Token is the slot's generation: the fencing token of its last grant
	// (0: never granted).
	Token int64
}

// live reports whether the slot is held by a lease that has not lapsed.
func (s *Slot) live(now time.Time) bool { return s.Owner != nil && !now.After(s.Expires) }

// Grant is one permit of an answer: its slot and fencing token.
type Grant struct {
	Slot  int
	Token int64
}

// IsSemaphore reports whether resource names a semaphore.
func IsSemaphore(resource string) bool { return strings.HasPrefix(resource, SemaphorePrefix) }

// checkSemaphore is Request.Check's rule for what only semaphores have:
// permits and a limit on a semaphore's TryLock, neither anywhere else.
func (r *Request) checkSemaphore() string {
	if !IsSemaphore(r.Resource) {
		switch {
		case r.Permits != 0 || r.Limit != 0:
			return "permits and limit are for semaphores (names starting with " + SemaphorePrefix + ")"
		case r.Resize:
			return "resize is for semaphores (names starting with " + SemaphorePrefix + ")"
		}
		return ""
	}
	switch {
	case r.Resource == SemaphorePrefix:
		return "semaphore name is empty"
	case r.Durability != Persistent && r.Op != Get: // a Get reads whatever is held
		return "a semaphore is persistent: its permits are not kept in memory alone"
	case r.Resize && r.Op != TryLock:
		return "resize is a request of its own, not part of " + r.Op.String()
	case r.Op != TryLock:
		if r.Permits != 0 || r.Limit != 0 {
			return "permits and limit are for taking permits, not " + r.Op.String()
		}
		return ""
	case r.Resize && r.Permits != 0:
		return "a resize takes no permits"
	case r.Resize && r.Wait != 0:
		return "a resize does not wait"
	case !r.Resize && r.Permits == 0 && r.Limit == 0:
		return "the name is a semaphore's: a lock call cannot take it (take permits, stating the limit)"
	case r.Limit < 1 || r.Limit > MaxPermits:
		return "semaphore limit " + strconv.Itoa(r.Limit) + " is outside 1.." + strconv.Itoa(MaxPermits)
	case !r.Resize && (r.Permits < 1 || r.Permits > r.Limit):
		return "permits " + strconv.Itoa(r.Permits) + " is outside 1.." + strconv.Itoa(r.Limit) + " (the limit)"
	}
	return ""
}

// IsSemaphore reports whether the entry is a semaphore's.
func (e *Entry) IsSemaphore() bool { return e.Limit > 0 }

// PermitsFree reports whether n permits could be granted on e at now: n
// slots below the limit that no live lease holds.
func (e *Entry) PermitsFree(n int, now time.Time) bool { return e.FreePermits(now) >= n }

// FreePermits is how many permits could be granted on e at now: the slots
// below the limit that no live lease holds, less the live ones at or above
// it (left by a shrink, which revokes none: they count against the new
// limit until they end).
func (e *Entry) FreePermits(now time.Time) int {
	free := 0
	for i := range e.Slots {
		switch live := e.Slots[i].live(now); {
		case i < e.Limit && !live:
			free++
		case i >= e.Limit && live:
			free--
		}
	}
	return max(free, 0)
}

// HeldSlots counts the slots of a semaphore or a read/write lock that
// have an owner, live or lapsed.
func (e *Entry) HeldSlots() int {
	n := 0
	for i := range e.Slots {
		if e.Slots[i].Owner != nil {
			n++
		}
	}
	return n
}

// getShared is Get of a semaphore or a read/write lock: Got while it has a
// live holder (HoldersOf lists them), with the highest token granted (a
// read/write lock's current write epoch), else LockDoesNotExist.
func (e *Entry) getShared(now time.Time) Decision {
	if _, live := e.NextLapse(now); !live {
		return Decision{Status: LockDoesNotExist}
	}
	return Decision{Status: Got, Token: e.Token}
}

// LastLapse is the latest expiry of a live holder of a semaphore or a
// read/write lock, or false if none is live: when it is entirely free.
func (e *Entry) LastLapse(now time.Time) (time.Time, bool) {
	var at time.Time
	for i := range e.Slots {
		if s := &e.Slots[i]; s.live(now) && s.Expires.After(at) {
			at = s.Expires
		}
	}
	return at, !at.IsZero()
}

// NextLapse is the earliest expiry of a live permit, or false if none is
// live: when a waiter may next find a slot free.
func (e *Entry) NextLapse(now time.Time) (time.Time, bool) {
	var at time.Time
	for i := range e.Slots {
		if s := &e.Slots[i]; s.live(now) && (at.IsZero() || s.Expires.Before(at)) {
			at = s.Expires
		}
	}
	return at, !at.IsZero()
}

// decidePermits is Decide for a semaphore's request r: TryLock takes
// r.Permits slots for r.Owner, Extend renews every live slot the owner
// holds, Unlock frees every slot it holds (lapsed ones included, as for a
// lock).
func decidePermits(e Entry, r *Request, now time.Time) Decision {
	switch r.Op {
	case Get:
		return e.getShared(now)
	case TryLock:
		if r.Resize {
			return e.resize(r.Limit, now)
		}
		if e.IsSemaphore() && r.Limit != e.Limit {
			return Decision{Status: InvalidInput, Reason: "semaphore limit is " + strconv.Itoa(e.Limit) +
				"; this request states " + strconv.Itoa(r.Limit)}
		}
		if held := e.owned(r.Owner, now, true); len(held) > 0 {
			if len(held) != r.Permits {
				return Decision{Status: InvalidInput, Reason: "the owner holds " + strconv.Itoa(len(held)) +
					" permits of this semaphore and asks for " + strconv.Itoa(r.Permits)}
			}
			// Same owner: the same grant again, expiry not refreshed.
			return Decision{Status: Locked, Token: held[0].Token, Grants: held, Free: e.FreePermits(now)}
		}
		if !e.IsSemaphore() {
			if e.Live(now) {
				return Decision{Status: Busy} // held as a lock (stored before names were kinds)
			}
			e.Limit, e.Slots = r.Limit, make([]Slot, r.Limit)
		}
		if !e.PermitsFree(r.Permits, now) {
			return Decision{Status: Busy}
		}
		base := e.Floor
		if e.State == Absent {
			base = max(base, e.Token)
		}
		next := e.withSlots()
		owner := append([]byte(nil), r.Owner...)
		grants := make([]Grant, 0, r.Permits)
		for i := range next.Limit { // slots above the limit (a shrink's) are not granted
			s := &next.Slots[i]
			if len(grants) == r.Permits {
				break
			}
			if s.live(now) {
				continue
			}
			token := max(s.Token+1, base)
			*s = Slot{Owner: owner, Expires: now.Add(r.TTL), Token: token}
			grants = append(grants, Grant{Slot: i, Token: token})
			next.Token = max(next.Token, token)
		}
		next.settle()
		if size := next.slotsSize(); size > MaxSemaphoreBytes {
			return Decision{Status: InvalidInput, Reason: "the semaphore's permits would take " + strconv.Itoa(size) +
				" bytes, over the limit of " + strconv.Itoa(MaxSemaphoreBytes) + ": use shorter owners"}
		}
		return Decision{Status: Locked, Token: grants[0].Token, Grants: grants, Write: true, Next: next, Free: next.FreePermits(now)}

	case Extend:
		return e.extendSlots(r, now)

	case Unlock:
		// Expiry is not checked: the owner may release lapsed permits
		// nobody has taken since.
		held := e.owned(r.Owner, now, false)
		if len(held) == 0 {
			return Decision{Status: LockDoesNotExist}
		}
		next := e.withSlots()
		for _, g := range held {
			next.Slots[g.Slot].Owner = nil
		}
		next.settle()
		return Decision{Status: Unlocked, Write: true, Next: next}
	}
	return Decision{Status: InvalidInput, Reason: "not an operation of semaphores: " + r.Op.String()}
}

// resize sets e's limit to limit. A larger one adds free slots, starting
// their generations above every token the entry knows; a smaller one
// grants nothing on the slots at or above it and revokes no live permit:
// those holders keep their slots until they let go or lapse, and count
// against the new limit meanwhile. The slots are kept (a later growth
// reuses them, their generations rising on), so tokens never go back.
// An absent or released name becomes a semaphore of limit free permits.
// It answers Extended, with the permits free after it.
func (e Entry) resize(limit int, now time.Time) Decision {
	if !e.IsSemaphore() && e.Live(now) {
		return Decision{Status: Busy} // held as a lock (stored before names were kinds)
	}
	next := e.withSlots()
	if !e.IsSemaphore() {
		next.Slots = nil
	}
	next.Limit = limit
	// A new slot's first grant takes a token at or above the floor, as a
	// new semaphore's first grants do (decidePermits).
	base := e.Floor
	if e.State == Absent {
		base = max(base, e.Token)
	}
	for len(next.Slots) < limit {
		next.Slots = append(next.Slots, Slot{Token: max(base-1, 0)})
	}
	next.settle()
	return Decision{Status: Extended, Write: true, Next: next, Free: next.FreePermits(now)}
}

// extendSlots is Extend for a kind with several holders: every live slot
// r's owner holds ends r.TTL from now.
func (e Entry) extendSlots(r *Request, now time.Time) Decision {
	held := e.owned(r.Owner, now, true)
	if len(held) == 0 {
		return Decision{Status: LockDoesNotExist}
	}
	next := e.withSlots()
	for _, g := range held {
		next.Slots[g.Slot].Expires = now.Add(r.TTL)
	}
	next.settle()
	d := Decision{Status: Extended, Token: held[0].Token, Grants: held, Write: true, Next: next}
	if next.IsSemaphore() {
		d.Free = next.FreePermits(now)
	}
	return d
}

// owned lists the slots owner holds in e (live ones only, if live).
func (e *Entry) owned(owner []byte, now time.Time, live bool) []Grant {
	var held []Grant
	for i := range e.Slots {
		s := &e.Slots[i]
		if s.Owner != nil && string(s.Owner) == string(owner) && (!live || s.live(now)) {
			held = append(held, Grant{Slot: i, Token: s.Token})
		}
	}
	return held
}

// withSlots is the next entry of a write: a copy whose slots may be
// changed without touching e's (the cache keeps e until a persistent write
// commits).
func (e Entry) withSlots() Entry {
	e.Slots = append([]Slot(nil), e.Slots...)
	e.Revision++
	return e
}

// settle derives a semaphore entry's lock fields from its slots: Held
// while any slot has an owner, until the latest of their expiries (so Live
// is "some permit is live", and the entry is kept, swept and timed as a
// held lock until its last permit lapses); Released once none has.
func (e *Entry) settle() {
	e.State, e.Expires, e.Owner = Released, time.Time{}, nil
	for i := range e.Slots {
		if s := &e.Slots[i]; s.Owner != nil {
			e.State = Held
			if s.Expires.After(e.Expires) {
				e.Expires = s.Expires
			}
		}
	}
}

// slotsSize is what e's slots take toward MaxSemaphoreBytes.
func (e *Entry) slotsSize() int {
	n := 0
	for i := range e.Slots {
		n += slotBytes + len(e.Slots[i].Owner)
	}
	return n
}
