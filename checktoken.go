package kahuna

import (
	"context"
	"time"
)

// TokenCheck is what CheckToken found: whether a fencing token is the one
// of the lock's live holder, and the live holder's token and lease end.
type TokenCheck struct {
	// Valid: a lock on the resource is held, its lease is live, and its
	// fencing token is the one asked about.
	Valid bool
	// Current is the live holder's fencing token, -1 when no lock is held
	// (never locked, released, or its lease ended).
	Current int64
	// Expires is the live holder's lease end as the partition's leader
	// knows it (zero when no lock is held).
	Expires time.Time
}

// CheckToken asks whether token is the fencing token of resource's live
// holder: the server side of fencing, for a resource that can keep no
// high-water mark of its own (Chubby's CheckSequencer). It is a Get: read
// by the partition's leader under its leader lease, after every committed
// write, so a token that was superseded, or whose lease ended, is never
// reported valid. The answer holds when it is given; a holder that writes
// after asking still races its lease, which a high-water mark kept by the
// resource closes (see docs/fencing.md). A refusal (MustRetry while the
// partition changes leader, InvalidInput) is a *StatusError.
func CheckToken(ctx context.Context, l Locker, resource string, token int64, d Durability) (TokenCheck, error) {
	if token < 0 {
		return TokenCheck{}, &StatusError{Op: "check-token", Resource: resource, Status: InvalidInput, Reason: "fencing token is negative"}
	}
	info, r, err := l.Get(ctx, resource, d)
	if err != nil {
		return TokenCheck{}, err
	}
	switch r.Status {
	case Got:
		return TokenCheck{Valid: info.FencingToken == token, Current: info.FencingToken, Expires: info.Expires}, nil
	case LockDoesNotExist:
		return TokenCheck{Current: -1}, nil
	}
	return TokenCheck{}, &StatusError{Op: "check-token", Resource: resource, Status: r.Status, Reason: r.Reason}
}
