package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"time"
)

// runOne opens target, drives it with the workload of c for warmup plus
// duration, and closes it. progress receives the live line (nil = none).
func runOne(ctx context.Context, c *Config, t Target, seed uint64, logger *slog.Logger, progress io.Writer) (res Result, err error) {
	wl, err := newWorkload(c)
	if err != nil {
		return Result{}, err
	}
	keys := keyNames(c.KeyPrefix, c.keys())
	opened := time.Now()
	sys, err := t.Open(ctx, Settings{
		Endpoints:   c.Endpoints,
		DataDir:     c.DataDir,
		Durability:  c.Durability,
		TTL:         c.TTL,
		Concurrency: c.Concurrency,
		Partitions:  c.Partitions,
		LockActors:  c.LockActors,
		Insecure:    c.Insecure,
		Logger:      logger.With("target", t.Name),
	})
	if err != nil {
		return Result{}, fmt.Errorf("%s: open: %w", t.Name, err)
	}
	defer func() {
		if cerr := sys.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("%s: close: %w", t.Name, cerr))
		}
	}()
	logger.Info("target ready", "target", t.Name, "took", time.Since(opened).Round(time.Millisecond))

	rec := newRecorder(wl.rows, min(c.Concurrency, 4*runtime.GOMAXPROCS(0)))
	workers := make([]*worker, c.Concurrency)
	var hand *handoffs
	if c.Workload == WorkloadHot {
		hand = newHandoffs(len(keys))
	}
	for i := range workers {
		l, err := sys.Locker(ctx, i)
		if err != nil {
			return Result{}, fmt.Errorf("%s: locker of worker %d: %w", t.Name, i, err)
		}
		workers[i] = newWorker(i, l, seed, keys, c, rec, ctx)
		workers[i].handoff = hand
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
	wg.Wait()
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
	if t.InProcess && measuring && ops > 0 {
		a := float64(m1.Mallocs-m0.Mallocs) / float64(ops)
		res.AllocsPerOp = &a
	}
	return res, nil
}

// drive is one worker's loop.
func drive(w *worker, s *schedule, wl workload) {
	defer func() { w.cancel(nil) }() // the context of the moment, not the first
	for {
		from, began, ok := s.next(w.runCtx, w)
		if !ok {
			return
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
	}
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
