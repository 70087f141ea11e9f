package kahuna

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// AcquireAll takes every name in names for one owner, or none of them:
// the transfer between two accounts, a job that needs two resources.
//
// In one step: persistent names that share a partition key (the part
// before the last '/': accounts/17 and accounts/42), up to MaxGroupNames
// of them and lease.MaxGroupBytes of names, plain locks, on a kahuna node
// or client, are granted by one
// request in one replicated step, each with its own fencing token: one
// Raft entry holds every grant and applies all or nothing, and no one
// ever sees some of them held and not the others. That request does not
// queue on the server: while a name is busy, AcquireAll asks again (with
// backoff) until WithWait's wait ends.
//
// One at a time, otherwise: the names are taken in byte order whatever
// the order given, each as Acquire takes it with opts (WithWait to wait
// in each name's queue). Two callers whose sets overlap therefore never
// wait for each other in a cycle: whoever holds a name waits only for
// names above it. If one name cannot be taken (busy when its wait ends,
// ctx ended, the session lost, a call error), the names already taken
// are released before AcquireAll returns that name's error. The caller
// gets all of the names or none, but others can see a partial hold while
// AcquireAll waits for a name above those it holds.
//
// Either way opts are Acquire's (WithSession, the usual choice, holds
// them under one lease), and AcquireAll never deadlocks against another
// AcquireAll or a single lock. The Locks come back in the order of names.
// An empty list or a name given twice is a *StatusError with
// InvalidInput, with no request made.
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
	if inOneStep(l, sorted, opts) {
		held, err := acquireInOneStep(ctx, l, sorted, opts)
		if !errors.Is(err, errNoGroups) {
			if err != nil {
				return nil, err
			}
			return inOrder(names, held), nil
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
	return inOrder(names, held), nil
}

// MaxGroupNames is the most names AcquireAll grants in one step.
const MaxGroupNames = lease.MaxGroupNames

// inOneStep reports whether AcquireAll can take sorted in one request:
// persistent plain locks of one partition key on a Locker that takes a
// request whole.
func inOneStep(l Locker, sorted []string, opts []AcquireOption) bool {
	if len(sorted) < 2 || len(sorted) > MaxGroupNames || doerOf(l) == nil || acquireOptionsOf(opts).durability != Persistent {
		return false
	}
	key, size := lease.PartitionKey(sorted[0]), 0
	for _, name := range sorted {
		if size += len(name); size > lease.MaxGroupBytes {
			return false
		}
		if lease.PartitionKey(name) != key || lease.IsSemaphore(name) || lease.IsRWLock(name) || lease.IsElection(name) {
			return false
		}
	}
	return true
}

// acquireInOneStep is AcquireAll's one request for sorted (inOneStep). It
// returns errNoGroups, having released what it was granted, from a server
// that does not know locks of several names.
func acquireInOneStep(ctx context.Context, l Locker, sorted []string, opts []AcquireOption) (map[string]*Lock, error) {
	group := func(o *acquireOptions) { o.whole, o.also = true, sorted[1:] }
	lk, err := Acquire(ctx, l, sorted[0], append(slices.Clip(opts), group)...)
	if err != nil {
		var se *StatusError
		if errors.As(err, &se) && se.Resource == sorted[0] {
			se.Op, se.Resource = "lock all", fmt.Sprintf("%s and %d more", sorted[0], len(sorted)-1)
			if i := lease.BusyNameOf(se.Reason); i >= 1 && i <= len(sorted) {
				se.Op, se.Resource, se.Reason = "lock", sorted[i-1], "" // the busy one
			}
		}
		return nil, fmt.Errorf("kahuna: acquire all %d names in one step: %w", len(sorted), err)
	}
	held := map[string]*Lock{sorted[0]: lk}
	for _, other := range lk.also {
		held[other.resource] = other
	}
	lk.also = nil
	return held, nil
}

// inOrder is held's Locks in the order of names.
func inOrder(names []string, held map[string]*Lock) []*Lock {
	out := make([]*Lock, len(names))
	for i, name := range names {
		out[i] = held[name]
	}
	return out
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
