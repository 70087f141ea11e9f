// Package backoff holds the jittered pauses shared by the Go handle, the
// client and the node: retries, polls for a busy lock and re-watches.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// Jitter spreads d over [d/2, d) so retrying callers do not move in step.
func Jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2+1)
}

// Sleep waits d, or until ctx ends (then its error).
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Bounds of the polling backoff of a wait that cannot wait on the server.
const (
	minPoll = 2 * time.Millisecond
	maxPoll = 50 * time.Millisecond
)

// PollLock waits for a lock by calling try (a TryLock) with jittered
// exponential backoff from 2 to 50 ms until it answers anything but Busy,
// or wait (lease.WaitForever: ctx) ends, when the last Busy is answered.
// life ending stops it with stopped (life nil: never). Waited is the time
// from the call to the send of the granted attempt, which the lease cannot
// have started before.
func PollLock(ctx, life context.Context, stopped error, wait time.Duration, try func(context.Context) (lease.Result, error)) (lease.Result, error) {
	start := time.Now()
	forever := wait == lease.WaitForever
	deadline := start.Add(wait)
	pause := minPoll
	for {
		sent := time.Now()
		r, err := try(ctx)
		if err != nil || r.Status != lease.Busy {
			if r.Status == lease.Locked {
				r.Waited = sent.Sub(start)
			}
			return r, err
		}
		d := Jitter(pause)
		if !forever {
			left := time.Until(deadline)
			if left <= 0 {
				return r, nil
			}
			d = min(d, left)
		}
		if err := Sleep(ctx, d); err != nil {
			return lease.Result{}, err
		}
		if life != nil && life.Err() != nil {
			return lease.Result{}, stopped
		}
		pause = min(pause*2, maxPoll)
	}
}
