package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"sync"
	"time"
)

// Per-operation timeouts without a context per operation.
//
// context.WithTimeout for every operation costs a timer, allocations and
// a lock on the parent: on this 2-core machine it cut the mutex baseline
// from ~1.9M to ~0.66M ops/s, the harness measuring itself. Instead each
// worker keeps one cancellable context and stamps when each operation
// begins; a watchdog scans the stamps a few times per timeout and cancels
// the context of an operation that has run too long, with errTimeout as
// the cause. Only then is a new context made. Timeouts fire up to 5% late
// (the scan period), and targets see a cancellation, not a deadline.

// errTimeout is the cause of a watchdog cancel.
var errTimeout = fmt.Errorf("operation ran past --timeout: %w", context.DeadlineExceeded)

// timedOut marks opStart once the watchdog has claimed the operation.
const timedOut = -1

// begin stamps the start of an operation (at, after the run's base; > 0)
// and returns its context.
func (w *worker) begin(at time.Duration) context.Context {
	w.opStart.Store(max(int64(at), 1))
	return w.ctx
}

// end clears the stamp. If the watchdog claimed the operation, it has
// cancelled the context under mu already: make a fresh one.
func (w *worker) end() {
	if w.opStart.Swap(0) == timedOut {
		w.mu.Lock()
		w.ctx, w.cancel = context.WithCancelCause(w.runCtx)
		w.mu.Unlock()
	}
}

// inFlight reports whether an operation is running.
func (w *worker) inFlight() bool { return w.opStart.Load() != 0 }

// startWatchdog cancels operations older than timeout until stop is
// called. base is the time the stamps count from.
func startWatchdog(ctx context.Context, workers []*worker, timeout time.Duration, base time.Time) (stop func()) {
	if timeout <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(max(timeout/20, time.Millisecond))
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				now := int64(time.Since(base))
				for _, w := range workers {
					if s := w.opStart.Load(); s > 0 && now-s > int64(timeout) {
						w.expire(s)
					}
				}
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// expire cancels the operation that began at s, if it is still the one
// in flight. The claim and the cancel happen under mu, so end() cannot
// swap in a new context between them and have the new one cancelled.
func (w *worker) expire(s int64) {
	w.mu.Lock()
	if w.opStart.CompareAndSwap(s, timedOut) {
		w.cancel(errTimeout)
	}
	w.mu.Unlock()
}

// isTimeout reports whether err (with the operation's ctx) is a timeout.
func isTimeout(ctx context.Context, err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(context.Cause(ctx), errTimeout)
}

// stallMargin is how long past its planned end (warm-up, duration and two
// timeouts) a target may run, Close included, before reportStall writes
// every goroutine's stack to stallOut: a call that ignores its cancelled
// context, or a Close that never returns, then leaves evidence instead of
// a silent hang. Tests shorten it.
var (
	stallMargin           = time.Minute
	stallOut    io.Writer = os.Stderr
)

// reportStall arms the stall report of target, planned to take planned;
// stop disarms it.
func reportStall(target string, planned time.Duration) (stop func()) {
	t := time.AfterFunc(planned+stallMargin, func() {
		var report bytes.Buffer // one write, so the report is not interleaved
		fmt.Fprintf(&report, "kahuna-bench: %s is still running %v past its planned %v (a call or Close that does not return); every goroutine:\n",
			target, stallMargin, planned)
		_ = pprof.Lookup("goroutine").WriteTo(&report, 2)
		_, _ = stallOut.Write(report.Bytes())
	})
	return func() { t.Stop() }
}
