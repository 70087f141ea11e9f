package bench

import (
	"cmp"
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// The hot-wait workload: every worker (contender) loops on one lock:
// acquire it with a wait, hold it for --hold, Unlock it, at once again.
// One op is one grant.
//
//   - acquire: on a lease.WaitLocker (the embedded node; a wire client or
//     a peer that waits on its server) one Lock call that waits on the
//     service for up to --wait; on any other Locker, TryLock polled with
//     jittered exponential backoff, 1 ms doubling to 50 ms, until granted
//     or --wait is over: the same bounds kahuna.Acquire uses against a
//     plain Locker, and what a Redis SET NX PX client does.
//   - grant row: the op's latency is the wait, from asking to holding
//     (its max is the longest wait of the run). A wait that ends with the
//     lock still held is a miss.
//   - handoff row: from just before the holder called Unlock to just after
//     the next contender's acquire returned the grant (timestamps taken in
//     the harness around the calls, both on this machine's monotonic
//     clock). It is the whole hand-off as the two callers see it: the
//     Unlock's trip, the service's work, the grant's trip back; with
//     polling, also the poller's sleep. A contender taking the lock back
//     after its own release is not a hand-off (Jain's index shows that).
//   - release row: Unlock's latency.
//
// Per contender, the run counts measured grants (Jain's fairness index of
// them is in WaitSummary), and it counts the requests the service
// received per grant: a System that is a RequestCounter counts them at
// the service (the embedded node's Config.Observe, etcd's RPCs); for the
// others the harness counts each worker's Locker calls.

// Polling bounds of a non-waiting Locker, as kahuna.Acquire's.
const (
	pollMinBackoff = time.Millisecond
	pollMaxBackoff = 50 * time.Millisecond
)

// hotWait is the step of the hot-wait workload.
func (b *builder) hotWait(c *Config) func(context.Context, *worker, time.Time) {
	hold, wait, kind := c.Hold, c.Wait, cmp.Or(c.Kind, KindMutex)
	grantRow := b.row(rowGrant, false)
	// A hand-off is from one holder to the next: a semaphore's permits
	// and a read lock have several holders at once, so only a mutex has
	// a handoff row.
	handoffRow, readRow := -1, -1
	if kind == KindMutex {
		handoffRow = b.row(rowHandoff, true)
	}
	if kind == KindRWLock {
		readRow = b.row(rowRead, true)
	}
	releaseRow := b.row(rowRelease, true)
	return func(ctx context.Context, w *worker, start time.Time) {
		k, key := w.pick()
		var (
			r    lease.Result
			call string
			err  error
			read bool
		)
		switch kind {
		case KindMutex:
			r, call, err = w.acquire(ctx, key, wait)
		case KindSemaphore:
			r, call, err = w.acquireWhole(ctx, lease.Request{Resource: key, Wait: wait, Permits: 1, Limit: c.Limit})
		case KindRWLock:
			read = w.rng.Float64() < c.Reads
			r, call, err = w.acquireWhole(ctx, lease.Request{Resource: key, Wait: wait, Shared: read})
		}
		granted := time.Now()
		switch {
		case err != nil:
			w.fail(ctx, grantRow, call, err)
			return
		case r.Status == lease.Busy:
			w.miss(grantRow)
			return
		case r.Status != lease.Locked:
			w.failStatus(grantRow, call, r.Status)
			return
		}
		if handoffRow >= 0 {
			if d, ok := w.handoff.acquired(k, w.id, granted); ok {
				w.success(handoffRow, d)
			}
		}
		w.success(grantRow, granted.Sub(start))
		if read {
			w.success(readRow, granted.Sub(start))
		}
		if w.measured {
			w.grants++
		}
		if hold > 0 && w.sleep(ctx, hold) != nil {
			// Interrupted or timed out while holding: still release.
			ctx = context.WithoutCancel(ctx)
		}
		t := time.Now()
		w.handoff.releasingAt(k, w.id, t)
		r, err = w.l.Unlock(ctx, key, w.owner, w.dur)
		end := time.Now()
		w.handoff.released(k, w.id, end, err == nil && r.Status == lease.Unlocked)
		switch {
		case err != nil:
			w.fail(ctx, releaseRow, "Unlock", err)
		case r.Status != lease.Unlocked:
			w.failStatus(releaseRow, "Unlock", r.Status)
		default:
			w.success(releaseRow, end.Sub(t))
		}
	}
}

// errNoWholeRequests: the target's Locker cannot carry a semaphore's
// permits or a read lock (a peer, or a plain Locker): it would take a
// mutex instead, which is not what is measured.
var errNoWholeRequests = errors.New("the target cannot carry semaphore or read/write lock requests (kahuna targets only)")

// acquireWhole asks for a semaphore's permits or a read/write lock, as
// req says, with the worker's owner, TTL and durability: one request
// that waits on the service (a Locker that carries whole requests,
// lease.Doer, does; over REST it is answered at once and polled).
func (w *worker) acquireWhole(ctx context.Context, req lease.Request) (lease.Result, string, error) {
	if _, ok := w.l.(lease.Doer); !ok {
		return lease.Result{}, "Lock", errNoWholeRequests
	}
	req.Op, req.Owner, req.TTL, req.Durability = lease.TryLock, w.owner, w.ttl, w.dur
	_, waits := w.l.(lease.WaitLocker)
	wait := req.Wait
	if !waits {
		req.Wait = 0 // answered at once, and polled
	}
	c, why := req.Check()
	if why != "" {
		return lease.Result{Status: lease.InvalidInput, Reason: why}, "Lock", nil
	}
	if waits {
		_, r, err := lease.Do(ctx, w.l, c)
		return r, "Lock", err
	}
	r, err := w.poll(ctx, wait, func() (lease.Result, error) {
		_, r, err := lease.Do(ctx, w.l, c)
		return r, err
	})
	return r, "TryLock", err
}

// acquire asks for key, waiting up to wait: see the workload's comment.
// call names the call for the error breakdown.
func (w *worker) acquire(ctx context.Context, key string, wait time.Duration) (r lease.Result, call string, err error) {
	if wl, ok := w.l.(lease.WaitLocker); ok {
		r, err = wl.Lock(ctx, key, w.owner, w.ttl, wait, w.dur)
		return r, "Lock", err
	}
	r, err = w.poll(ctx, wait, func() (lease.Result, error) {
		return w.l.TryLock(ctx, key, w.owner, w.ttl, w.dur)
	})
	return r, "TryLock", err
}

// poll calls try until it answers anything but Busy or wait is over,
// sleeping a jittered backoff between calls (see pollMinBackoff).
func (w *worker) poll(ctx context.Context, wait time.Duration, try func() (lease.Result, error)) (lease.Result, error) {
	deadline := time.Now().Add(wait)
	backoff := pollMinBackoff
	for {
		r, err := try()
		if err != nil || r.Status != lease.Busy {
			return r, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return r, nil
		}
		pause := backoff/2 + time.Duration(w.rng.Int64N(int64(backoff/2)+1))
		if err := w.sleep(ctx, min(pause, left)); err != nil {
			return r, err
		}
		backoff = min(2*backoff, pollMaxBackoff)
	}
}

// sleep waits d on the worker's timer, or until ctx ends.
func (w *worker) sleep(ctx context.Context, d time.Duration) error {
	w.timer.Reset(d)
	select {
	case <-w.timer.C:
		return nil
	case <-ctx.Done():
		w.timer.Stop()
		return ctx.Err()
	}
}

// jain is Jain's fairness index of x: (Σx)² / (n·Σx²), 1 when every
// contender got as many grants, 1/n when one got them all; 0 for no
// grants at all (undefined).
func jain(x []int64) float64 {
	var sum, sq float64
	for _, v := range x {
		f := float64(v)
		sum += f
		sq += f * f
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(x)) * sq)
}

// A RequestCounter is a System that counts the lock requests its service
// receives, where the service itself sees them (a node's Config.Observe,
// a client's RPC interceptor), rather than the harness's count of Locker
// calls. Requests must be safe to call while workers run.
type RequestCounter interface {
	// Requests is the count since Open, and what is counted, for the
	// report ("node requests (Config.Observe)").
	Requests() (n int64, what string)
}

// clientCalls is what the harness's own count is, in reports.
const clientCalls = "client calls (TryLock, Lock, Unlock as the harness makes them)"

// Counted is a System that counts its service's requests with an
// atomic counter it was handed (see RequestCounter).
type Counted struct {
	System
	N    *atomic.Int64
	What string
}

// Requests implements RequestCounter.
func (c Counted) Requests() (int64, string) { return c.N.Load(), c.What }

// counting counts every call made through a Locker. It is a WaitLocker
// only if the Locker it wraps is (countingWait), and a lease.Doer only if
// that is too (countingDo, countingWaitDo), so the workload's type
// assertions see what they would see without it.
type counting struct {
	l        lease.Locker
	n        *atomic.Int64
	measured *bool // the worker's: only calls of measured operations count
}

// countCalls counts into n the calls made through l while *measured (a
// worker's flag, read on its own goroutine) is set.
func countCalls(l lease.Locker, n *atomic.Int64, measured *bool) lease.Locker {
	c := counting{l, n, measured}
	if wl, ok := l.(lease.WaitLocker); ok {
		if d, ok := l.(lease.Doer); ok {
			return countingWaitDo{countingWait{c, wl}, d}
		}
		return countingWait{c, wl}
	}
	if d, ok := l.(lease.Doer); ok {
		return countingDo{c, d}
	}
	return c
}

func (c counting) TryLock(ctx context.Context, res string, owner []byte, ttl time.Duration, d lease.Durability) (lease.Result, error) {
	c.add()
	return c.l.TryLock(ctx, res, owner, ttl, d)
}

func (c counting) Extend(ctx context.Context, res string, owner []byte, ttl time.Duration, d lease.Durability) (lease.Result, error) {
	c.add()
	return c.l.Extend(ctx, res, owner, ttl, d)
}

func (c counting) Unlock(ctx context.Context, res string, owner []byte, d lease.Durability) (lease.Result, error) {
	c.add()
	return c.l.Unlock(ctx, res, owner, d)
}

func (c counting) Get(ctx context.Context, res string, d lease.Durability) (lease.LockInfo, lease.Result, error) {
	c.add()
	return c.l.Get(ctx, res, d)
}

func (c counting) add() {
	if *c.measured {
		c.n.Add(1)
	}
}

type countingWait struct {
	counting
	wl lease.WaitLocker
}

func (c countingWait) Lock(ctx context.Context, res string, owner []byte, ttl, wait time.Duration, d lease.Durability) (lease.Result, error) {
	c.add()
	return c.wl.Lock(ctx, res, owner, ttl, wait, d)
}

// WaitSummary is what the hot-wait workload adds to a Result.
type WaitSummary struct {
	// Grants per contender (worker), measured grants only.
	Grants []int64
	// Jain is Jain's fairness index of Grants.
	Jain float64
	// Requests is how many requests the service received for the
	// measured operations (counted as Counted says), and RequestsPerGrant
	// that divided by the grants. The harness's own count is exact; a
	// service's count is taken over a window, from the end of warmup to the
	// last worker's end, so it is exact to within an op per contender at
	// either end.
	Requests         int64
	RequestsPerGrant float64
	Counted          string
	// WaitLocker is true if the target waited on the service (Lock), false
	// if the harness polled TryLock.
	WaitLocker bool
}

// countingDo counts a lease.Doer's calls (Do included).
type countingDo struct {
	counting
	d lease.Doer
}

func (c countingDo) Do(ctx context.Context, req lease.Checked) (lease.LockInfo, lease.Result, error) {
	c.add()
	return c.d.Do(ctx, req)
}

// countingWaitDo counts a WaitLocker's that is a lease.Doer too.
type countingWaitDo struct {
	countingWait
	d lease.Doer
}

func (c countingWaitDo) Do(ctx context.Context, req lease.Checked) (lease.LockInfo, lease.Result, error) {
	c.add()
	return c.d.Do(ctx, req)
}
