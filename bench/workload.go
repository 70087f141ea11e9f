package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// Workload names, as --workload takes them.
const (
	WorkloadLock   = "lock"   // TryLock + Unlock of a random key: one op
	WorkloadHot    = "hot"    // the same on a few keys, with handoff latency
	WorkloadExtend = "extend" // TryLock, Extend × --extends, Unlock
	WorkloadGet    = "get"    // Get of a random key, every key held
	WorkloadMixed  = "mixed"  // lock, extend and get by --mix weights
	// WorkloadHotWait is acquire-with-wait on one lock, hold, release: one
	// op is one grant (see hotwait.go).
	WorkloadHotWait = "hot-wait"
)

var workloads = []string{WorkloadLock, WorkloadHot, WorkloadExtend, WorkloadGet, WorkloadMixed, WorkloadHotWait}

// Row names of the reports.
const (
	rowLock    = "lock"
	rowHandoff = "handoff"
	rowAcquire = "acquire"
	rowExtend  = "extend"
	rowRelease = "release"
	rowGet     = "get"
	rowGrant   = "grant"
	rowRead    = "read grant" // hot-wait --kind rwlock: the read locks among the grants
)

// workload is what one operation is. step runs one and records its
// outcome; start is where its latency counts from (now, or in the open
// loop the due time of an operation that waited for a free worker).
type workload struct {
	rows []row
	step func(ctx context.Context, w *worker, start time.Time)
}

// newWorkload builds the workload of c, its rows in report order.
func newWorkload(c *Config) (workload, error) {
	b := &builder{}
	switch c.Workload {
	case WorkloadLock, WorkloadHot:
		return workload{rows: b.rows, step: b.lock(c.Workload == WorkloadHot)}, nil
	case WorkloadExtend:
		return workload{rows: b.rows, step: b.extend(c.Extends)}, nil
	case WorkloadGet:
		return workload{rows: b.rows, step: b.get()}, nil
	case WorkloadMixed:
		return b.mixed(c)
	case WorkloadHotWait:
		return workload{rows: b.rows, step: b.hotWait(c)}, nil
	}
	return workload{}, fmt.Errorf("unknown workload %q", c.Workload)
}

// builder hands out row indexes as the steps ask for them, so a mixed
// workload's rows are the union of its parts'.
type builder struct{ rows []row }

func (b *builder) row(name string, metric bool) int {
	for i, r := range b.rows {
		if r.name == name {
			return i
		}
	}
	b.rows = append(b.rows, row{name: name, metric: metric})
	return len(b.rows) - 1
}

// lock is one lock op: TryLock then, if granted, Unlock; latency covers
// both. A refused TryLock is a miss. With handoff, the time from each
// release to the next acquire by another worker is a row of its own.
func (b *builder) lock(handoff bool) func(context.Context, *worker, time.Time) {
	lockRow := b.row(rowLock, false)
	handoffRow := -1
	if handoff {
		handoffRow = b.row(rowHandoff, true)
	}
	return func(ctx context.Context, w *worker, start time.Time) {
		k, key := w.pick()
		r, err := w.l.TryLock(ctx, key, w.owner, w.ttl, w.dur)
		switch {
		case err != nil:
			w.fail(ctx, lockRow, "TryLock", err)
			return
		case r.Status == lease.Busy:
			w.miss(lockRow)
			return
		case r.Status != lease.Locked:
			w.failStatus(lockRow, "TryLock", r.Status)
			return
		}
		if w.handoff != nil {
			if d, ok := w.handoff.acquired(k, w.id, time.Now()); ok {
				w.success(handoffRow, d)
			}
			w.handoff.releasing(k, w.id)
		}
		r, err = w.l.Unlock(ctx, key, w.owner, w.dur)
		end := time.Now()
		if w.handoff != nil {
			w.handoff.released(k, w.id, end, err == nil && r.Status == lease.Unlocked)
		}
		switch {
		case err != nil:
			w.fail(ctx, lockRow, "Unlock", err)
		case r.Status != lease.Unlocked:
			w.failStatus(lockRow, "Unlock", r.Status)
		default:
			w.success(lockRow, end.Sub(start))
		}
	}
}

// extend holds a lock through n extensions: each call is timed in its own
// row. A failed extension ends the hold early; the lock is still released.
func (b *builder) extend(n int) func(context.Context, *worker, time.Time) {
	acquireRow, extendRow, releaseRow := b.row(rowAcquire, false), b.row(rowExtend, false), b.row(rowRelease, false)
	return func(ctx context.Context, w *worker, start time.Time) {
		_, key := w.pick()
		r, err := w.l.TryLock(ctx, key, w.owner, w.ttl, w.dur)
		switch {
		case err != nil:
			w.fail(ctx, acquireRow, "TryLock", err)
			return
		case r.Status == lease.Busy:
			w.miss(acquireRow)
			return
		case r.Status != lease.Locked:
			w.failStatus(acquireRow, "TryLock", r.Status)
			return
		}
		w.success(acquireRow, time.Since(start))
		for range n {
			t := time.Now()
			r, err := w.l.Extend(ctx, key, w.owner, w.ttl, w.dur)
			if err != nil {
				w.fail(ctx, extendRow, "Extend", err)
				break
			}
			if r.Status != lease.Extended {
				w.failStatus(extendRow, "Extend", r.Status)
				break
			}
			w.success(extendRow, time.Since(t))
		}
		t := time.Now()
		r, err = w.l.Unlock(ctx, key, w.owner, w.dur)
		switch {
		case err != nil:
			w.fail(ctx, releaseRow, "Unlock", err)
		case r.Status != lease.Unlocked:
			w.failStatus(releaseRow, "Unlock", r.Status)
		default:
			w.success(releaseRow, time.Since(t))
		}
	}
}

// get reads a random key. A held key (Got) and a free one
// (LockDoesNotExist) are both answers; anything else is an error.
func (b *builder) get() func(context.Context, *worker, time.Time) {
	getRow := b.row(rowGet, false)
	return func(ctx context.Context, w *worker, start time.Time) {
		_, key := w.pick()
		_, r, err := w.l.Get(ctx, key, w.dur)
		switch {
		case err != nil:
			w.fail(ctx, getRow, "Get", err)
		case r.Status != lease.Got && r.Status != lease.LockDoesNotExist:
			w.failStatus(getRow, "Get", r.Status)
		default:
			w.success(getRow, time.Since(start))
		}
	}
}

// mixed draws each operation's kind by weight.
func (b *builder) mixed(c *Config) (workload, error) {
	type part struct {
		upTo int // cumulative weight
		step func(context.Context, *worker, time.Time)
	}
	var parts []part
	total := 0
	for _, m := range c.Mix {
		var step func(context.Context, *worker, time.Time)
		switch m.Op {
		case rowLock:
			step = b.lock(false)
		case rowExtend:
			step = b.extend(c.Extends)
		case rowGet:
			step = b.get()
		default:
			return workload{}, fmt.Errorf("--mix: unknown operation %q", m.Op)
		}
		total += m.Weight
		parts = append(parts, part{total, step})
	}
	if total <= 0 {
		return workload{}, fmt.Errorf("--mix: weights add up to %d", total)
	}
	return workload{rows: b.rows, step: func(ctx context.Context, w *worker, start time.Time) {
		n := w.rng.IntN(total)
		for _, p := range parts {
			if n < p.upTo {
				p.step(ctx, w, start)
				return
			}
		}
	}}, nil
}

// keyNames builds the key space once, so no operation formats a key.
func keyNames(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = prefix + strconv.Itoa(i)
	}
	return keys
}
