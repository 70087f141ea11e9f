package kahuna

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// AcquireAll takes every name in names for one owner, or none of them:
// the transfer between two accounts, a job that needs two resources.
//
// The names are taken one at a time, in byte order whatever the order
// given, each as Acquire takes it with opts (WithWait to wait in each
// name's queue; WithSession, the usual choice, to hold them under one
// lease). Two callers whose sets overlap therefore never wait for each
// other in a cycle: whoever holds a name waits only for names above it.
// If one name cannot be taken (busy when its wait ends, ctx ended, the
// session lost, a call error), the names already taken are released
// before AcquireAll returns that name's error.
//
// What is atomic and what is not: the caller gets all of the names or
// none, and never deadlocks against another AcquireAll or a single lock.
// Others can see a partial hold while AcquireAll waits for a name above
// those it holds (a Get of a lower name shows it held); the names are
// not granted in one step, even on one partition.
//
// The Locks come back in the order of names. An empty list or a name
// given twice is a *StatusError with InvalidInput, with no request made.
func AcquireAll(ctx context.Context, l Locker, names []string, opts ...AcquireOption) ([]*Lock, error) {
	if len(names) == 0 {
		return nil, &StatusError{Op: "acquire all", Status: InvalidInput, Reason: "no names"}
	}
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			return nil, &StatusError{Op: "acquire all", Resource: sorted[i], Status: InvalidInput, Reason: "a name is given twice"}
		}
	}
	held := make(map[string]*Lock, len(sorted))
	for _, name := range sorted {
		lk, err := Acquire(ctx, l, name, opts...)
		if err != nil {
			releaseAll(held)
			return nil, fmt.Errorf("kahuna: acquire all: %s: %w", lease.Excerpt(name), err)
		}
		held[name] = lk
	}
	out := make([]*Lock, len(names))
	for i, name := range names {
		out[i] = held[name]
	}
	return out, nil
}

// releaseAll releases the locks AcquireAll took before it gave up, not
// under the caller's ctx, which may be over: for at most
// releaseAllTimeout, after which the leases end by themselves.
func releaseAll(held map[string]*Lock) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseAllTimeout)
	defer cancel()
	for _, lk := range held {
		_ = lk.Unlock(ctx)
	}
}

const releaseAllTimeout = 2 * time.Second
