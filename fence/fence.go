// Package fence is the resource side of fencing tokens: what a database,
// an HTTP service or a file store does with the token a lock holder sends
// along with each write, so that a holder whose lease has ended (paused by
// GC, SIGSTOP, a VM freeze) cannot overwrite the work of the holder after it.
//
// The rule, for every helper in this module: a resource keeps a high-water
// mark per (resource, lock, slot). A write carrying a token at or above the
// mark is accepted and raises the mark to its token; a write below the mark
// is rejected with a *StaleError that carries the mark (the winning token).
// The check, the raise and the write are one atomic step: no helper reads
// the mark and then writes. Equal tokens pass, because the holder writes
// many times with one token.
//
// The module imports nothing of kahuna, so a resource owner can use it
// without a lock node, Raft or a storage engine. Its packages:
//
//   - fence: the Token, the errors, the Store interface and an in-memory
//     Store.
//   - fence/sqlfence: the mark in a side table, in the same database/sql
//     transaction as the caller's statements (PostgreSQL and SQLite).
//   - fence/httpfence: net/http middleware that fences a handler through a
//     Store, and a client that sends the token.
//   - fence/filefence: a file written by atomic rename, with its marks in a
//     file beside it.
package fence

import (
	"errors"
	"fmt"
	"math"
)

// MaxNameLen is the longest lock name or slot, in bytes: the lock
// service's own limit on a resource name.
const MaxNameLen = 1024

// MaxValue is the largest token a resource can keep: SQL stores keep marks
// in a signed 64-bit column.
const MaxValue = math.MaxInt64

// Token is what a lock holder sends with a write: the lock's name, the
// slot it holds, and the fencing token of its grant.
type Token struct {
	// Lock is the lock's name as the lock service knows it.
	Lock string
	// Slot tells holders of one lock apart when more than one may hold it:
	// a semaphore's slot or a read/write lock's mode. Empty for a mutex.
	// Each slot has a mark of its own.
	Slot string
	// Value is the fencing token of the grant; it only grows per lock (and
	// per slot).
	Value uint64
}

// TokenOf builds a Token from a lock handle's signed token (kahuna's
// Lock.FencingToken is an int64) and validates it; a negative value is an
// error matching ErrInvalid.
func TokenOf(lock, slot string, value int64) (Token, error) {
	if value < 0 {
		return Token{}, fmt.Errorf("%w: token %d is negative", ErrInvalid, value)
	}
	t := Token{Lock: lock, Slot: slot, Value: uint64(value)}
	return t, t.Validate()
}

// ErrInvalid is matched (errors.Is) by every error Validate returns.
var ErrInvalid = errors.New("fence: invalid token")

// Validate says whether t can be checked: a lock name of 1 to MaxNameLen
// bytes, a slot of at most MaxNameLen bytes, a value of at most MaxValue.
func (t Token) Validate() error {
	switch {
	case t.Lock == "":
		return fmt.Errorf("%w: lock name is empty", ErrInvalid)
	case len(t.Lock) > MaxNameLen:
		return fmt.Errorf("%w: lock name is %d bytes, over the limit of %d", ErrInvalid, len(t.Lock), MaxNameLen)
	case len(t.Slot) > MaxNameLen:
		return fmt.Errorf("%w: slot is %d bytes, over the limit of %d", ErrInvalid, len(t.Slot), MaxNameLen)
	case t.Value > MaxValue:
		return fmt.Errorf("%w: token %d is over the limit of %d", ErrInvalid, t.Value, uint64(MaxValue))
	}
	return nil
}

// String shows the lock (at most 64 bytes of it), the slot and the value.
func (t Token) String() string {
	name := t.Lock
	if len(name) > 64 {
		name = name[:64] + "…"
	}
	if t.Slot == "" {
		return fmt.Sprintf("%q token %d", name, t.Value)
	}
	return fmt.Sprintf("%q slot %q token %d", name, t.Slot, t.Value)
}

// ErrStale is matched (errors.Is) by every *StaleError.
var ErrStale = errors.New("fence: stale token")

// StaleError says a write was rejected because a later holder has already
// written, or (from a Checked store) holds the lock now, or Token's lease
// ended: Token is the rejected one, Current the mark or the live holder's
// token that beat it.
type StaleError struct {
	Resource string
	Token    Token
	Current  uint64
	// Lapsed: the lock service said no one holds the lock under Token any
	// more (its lease ended) and no later holder has it (see Checked);
	// Current is then 0.
	Lapsed bool
}

func (e *StaleError) Error() string {
	if e.Lapsed {
		return fmt.Sprintf("fence: stale token: %s is not the live holder's (its lease ended), writing resource %q", e.Token, e.Resource)
	}
	return fmt.Sprintf("fence: stale token: %s is below %d, the mark of resource %q", e.Token, e.Current, e.Resource)
}

// Is makes errors.Is(err, ErrStale) true.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// Admit is the rule in one place: a write with token tok may land on a
// resource whose mark is mark (ok is false when there is none yet).
func Admit(mark uint64, ok bool, tok uint64) bool {
	return !ok || tok >= mark
}
