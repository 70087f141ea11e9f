package kahuna

import (
	"errors"

	"github.com/kahunago/kahuna/lease"
)

var (
	// ErrBusy: the lock was held by another owner for the whole wait.
	ErrBusy = errors.New("kahuna: lock is busy")
	// ErrLockLost: the lease is gone, or may be: Extend or Unlock found it
	// lapsed or held by another owner (the error is then a *StatusError
	// carrying the Status), or its deadline (Lock.Expires) passed without
	// an extension. Stop the work the lock guards.
	ErrLockLost = errors.New("kahuna: lock lost")
	// ErrReleased: the lock was released by Unlock. It is the cause
	// (context.Cause) of the Lock's Context after a clean Unlock, and what
	// Extend returns on a released lock.
	ErrReleased = errors.New("kahuna: lock released")
	// ErrUnauthenticated: the node refused the call's bearer token (none
	// given, or not listed in its --auth-token-file). Nothing was applied;
	// Acquire, Extend and Unlock return it at once instead of retrying.
	ErrUnauthenticated = lease.ErrUnauthenticated
)

// errLapsed is the cause of a Lock's Context when its deadline passed
// without an extension.
var errLapsed error = lapsedError{}

type lapsedError struct{}

func (lapsedError) Error() string {
	return "kahuna: lock lost: the lease deadline passed without an extension"
}
func (lapsedError) Unwrap() error { return ErrLockLost }

// StatusError is a lock operation that ended with a Status other than
// success. It matches ErrLockLost for LockDoesNotExist and InvalidOwner on
// Extend and Unlock, and ErrBusy for Busy. Status Errored means the
// outcome is unknown: the operation may or may not have applied.
//
// Error says the status in words, with the Reason of an InvalidInput
// ("kahuna: lock x: invalid input: ttl 1000h0m0s is over the limit of
// 596h31m23.647s"), and shows at most 64 bytes of the resource.
type StatusError struct {
	Op       string
	Resource string
	Status   Status
	// Reason, for InvalidInput, says why (Result.Reason); it may be ""
	// when the Locker's transport does not carry it.
	Reason string
}

func (e *StatusError) Error() string {
	msg := "kahuna: " + e.Op + " " + lease.Excerpt(e.Resource) + ": " + e.Status.Describe()
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// Unwrap lets errors.Is match the sentinel the status stands for.
func (e *StatusError) Unwrap() error {
	switch {
	case e.Status == Busy:
		return ErrBusy
	case (e.Op == "extend" || e.Op == "unlock") && (e.Status == LockDoesNotExist || e.Status == InvalidOwner):
		return ErrLockLost
	}
	return nil
}

// asCall names, in err's *StatusError if it has one, the call a caller
// made (Campaign, a semaphore's or a read/write lock's acquire) instead of
// the Acquire under it, and returns err.
func asCall(err error, op, name string) error {
	var se *StatusError
	if errors.As(err, &se) {
		se.Op, se.Resource = op, name
	}
	return err
}
