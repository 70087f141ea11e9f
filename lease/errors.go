package lease

import "errors"

// ErrNotApplied marks the failure of a request that was certainly not
// applied: nothing of it took effect and nothing of it can take effect
// later, so it is safe to retry, here or elsewhere (the
// MustRetry of a call error). A Locker wraps it in the errors of such
// failures (closed before the request entered, the request never sent);
// test with errors.Is. Any other error leaves the outcome unknown: the
// request may have been applied, or may still be.
var ErrNotApplied = errors.New("lease: request not applied")

// ErrUnauthenticated marks a call the server refused before processing it
// because its credentials (a bearer token) are missing or not accepted:
// nothing was applied, and asking again with the same credentials cannot
// succeed, so callers do not retry it. It wraps ErrNotApplied.
var ErrUnauthenticated = &refusedError{"unauthenticated: the node refused the bearer token"}

type refusedError struct{ msg string }

func (e *refusedError) Error() string        { return e.msg }
func (e *refusedError) Is(target error) bool { return target == ErrNotApplied }
