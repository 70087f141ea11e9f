package lease

import "errors"

// ErrNotApplied marks an error of a lock call that certainly did not apply
// (it never reached a decision: the node was closed before it entered, it
// was never sent, it was refused before a write). A server answers such a
// call MustRetry; any other error may hide an applied call and is answered
// Errored.
var ErrNotApplied = errors.New("lease: request not applied")
