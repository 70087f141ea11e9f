package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// runOne opens target, drives it with the workload of c for warmup plus
// duration, and closes it. progress receives the live line (nil = none).
func runOne(ctx context.Context, c *Config, t Target, seed uint64, logger *slog.Logger, progress io.Writer) (res Result, err error) {
	wl, err := newWorkload(c)
	if err != nil {
		return Result{}, err
	}
	keys := keyNames(c.keyPrefix(), c.keys())
	opened := time.Now()
	sys, err := t.Open(ctx, Settings{
		Endpoints:   c.Endpoints,
		DataDir:     c.DataDir,
		Durability:  c.Durability,
		TTL:         c.TTL,
		Concurrency: c.Concurrency,
		Partitions:  c.Partitions,
		LockActors:  c.LockActors,
		Streams:     c.Streams,
		Insecure:    c.Insecure,
		Logger:      logger.With("target", t.Name),
		// Counting costs the node a clock read per request: hot-wait only.
		CountRequests: c.Workload == WorkloadHotWait,
	})
	if err != nil {
		return Result{}, &openError{target: t.Name, err: err}
	}
	// Armed before the Close below is deferred, disarmed after it returns.
	defer reportStall(t.Name, c.Warmup+c.Duration+2*max(c.Timeout, 0))()
	defer func() {
		if cerr := sys.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("%s: close: %w", t.Name, cerr))
		}
	}()
	logger.Info("target ready", "target", t.Name, "took", time.Since(opened).Round(time.Millisecond))

	rec := newRecorder(wl.rows, min(c.Concurrency, 4*runtime.GOMAXPROCS(0)))
	workers := make([]*worker, c.Concurrency)
	var hand *handoffs
	switch c.Workload {
	case WorkloadHot:
		hand = newHandoffs(len(keys))
	case WorkloadHotWait:
		hand = newHandoffs(len(keys))
		hand.fromCall = true
	}
	// hot-wait counts the requests the service receives: at the service if
	// the system can, else the harness's Locker calls.
	requests := func() int64 { return 0 }
	counted, calls := "", (*atomic.Int64)(nil)
	if c.Workload == WorkloadHotWait {
		if rc, ok := sys.(RequestCounter); ok {
			requests = func() int64 { n, _ := rc.Requests(); return n }
			_, counted = rc.Requests()
		} else {
			calls = new(atomic.Int64) // measured calls only: no window
			requests, counted = calls.Load, clientCalls
		}
	}
	waitLocker := false
	for i := range workers {
		l, err := sys.Locker(ctx, i)
		if err != nil {
			return Result{}, fmt.Errorf("%s: locker of worker %d: %w", t.Name, i, err)
		}
		_, waitLocker = l.(lease.WaitLocker)
		w := newWorker(i, l, seed, keys, c, rec, ctx)
		if calls != nil {
			w.l = countCalls(l, calls, &w.measured)
		}
		w.handoff = hand
		workers[i] = w
	}
	if c.Workload == WorkloadGet {
		if err := preload(ctx, c, workers, logger); err != nil {
			return Result{}, fmt.Errorf("%s: %w", t.Name, err)
		}
	}

	sched := newSchedule(time.Now(), c.Warmup, c.Duration, c.Rate)
	stopProgress := startProgress(ctx, progress, t.Name, sched, rec, workers)
	stopWatchdog := startWatchdog(ctx, workers, c.Timeout, sched.base)
	var wg sync.WaitGroup
	for _, w := range workers {
		w.timer = time.NewTimer(time.Hour)
		w.timer.Stop()
		wg.Go(func() { drive(w, sched, wl) })
	}
	m0, measuring := memAt(ctx, sched.measureFrom)
	req0 := requests()
	if calls != nil {
		req0 = 0
	}
	wg.Wait()
	req1 := requests()
	stopWatchdog()
	stopProgress()
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)

	elapsed := c.Duration
	if ctx.Err() != nil { // interrupted: what was measured, over the time it took
		elapsed = max(time.Since(sched.measureFrom), 0)
	}
	var ops, started int64
	for _, w := range workers {
		ops += w.ops
		started += w.started
	}
	res = summarize(t.Name, rec, elapsed)
	res.Interrupted = ctx.Err() != nil
	res.Backlog = sched.backlog(started)
	res.measuredOps = ops
	if c.Workload == WorkloadHotWait {
		res.Wait = waitSummary(workers, req1-req0, counted, waitLocker)
	}
	if t.InProcess && measuring && ops > 0 {
		a := float64(m1.Mallocs-m0.Mallocs) / float64(ops)
		res.AllocsPerOp = &a
	}
	return res, nil
}

// openError is a target that could not open (its server is not installed
// or not running, say): Main reports it skipped, not measured.
type openError struct {
	target string
	err    error
}

func (e *openError) Error() string { return e.target + ": open: " + e.err.Error() }
func (e *openError) Unwrap() error { return e.err }

// waitSummary gathers the hot-wait figures of a run's workers.
func waitSummary(workers []*worker, requests int64, counted string, waitLocker bool) *WaitSummary {
	s := &WaitSummary{Grants: make([]int64, len(workers)), Requests: requests, Counted: counted, WaitLocker: waitLocker}
	var total int64
	for i, w := range workers {
		s.Grants[i] = w.grants
		total += w.grants
	}
	s.Jain = jain(s.Grants)
	if total > 0 {
		s.RequestsPerGrant = float64(requests) / float64(total)
	}
	return s
}

// drive is one worker's loop.
func drive(w *worker, s *schedule, wl workload) {
	defer func() { w.cancel(nil) }() // the context of the moment, not the first
	for w.runNext(s, wl) {
	}
}

// runNext runs w's next operation once it is due; false once the run is over.
func (w *worker) runNext(s *schedule, wl workload) bool {
	from, began, ok := s.next(w.runCtx, w)
	if !ok {
		return false
	}
	// Warmup is wall-clock time for the target: an open loop that has
	// fallen far behind still measures what it runs after warmup.
	w.measured = !began.Before(s.measureFrom)
	w.started++
	if w.measured {
		w.ops++
	}
	ctx := w.begin(began.Sub(s.base))
	wl.step(ctx, w, from)
	w.end()
	w.pause()
	return true
}

// memAt waits until t and reads the allocation counters; false if ctx
// ended first.
func memAt(ctx context.Context, t time.Time) (runtime.MemStats, bool) {
	var m runtime.MemStats
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		runtime.ReadMemStats(&m)
		return m, true
	case <-ctx.Done():
		return m, false
	}
}

// preload holds every key for the get workload, so Get finds live locks:
// worker i takes the keys i, i+n, i+2n, … with its own owner and a lease
// that outlasts the run.
func preload(ctx context.Context, c *Config, workers []*worker, logger *slog.Logger) error {
	start := time.Now()
	ttl := c.Warmup + c.Duration + c.Timeout + time.Minute
	var wg sync.WaitGroup
	errs := make([]error, len(workers))
	for i, w := range workers {
		wg.Go(func() {
			for k := i; k < len(w.keys); k += len(workers) {
				if _, err := w.l.TryLock(ctx, w.keys[k], w.owner, ttl, w.dur); err != nil {
					errs[i] = fmt.Errorf("preload %s: %w", w.keys[k], err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	logger.Info("preloaded keys for the get workload", "keys", len(workers[0].keys), "took", time.Since(start).Round(time.Millisecond))
	return nil
}
