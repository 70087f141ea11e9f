package bench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"
)

// startProgress prints a live line every second until the returned stop is
// called: elapsed, operations in flight, ops/s, p99 and errors/s (errors
// and timeouts) of the last second.
// Warmup seconds are marked. out nil prints nothing.
func startProgress(ctx context.Context, out io.Writer, target string, s *schedule, rec *recorder, workers []*worker) (stop func()) {
	if out == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case now := <-tick.C:
				h, failures := rec.takeInterval()
				inFlight := 0
				for _, w := range workers {
					if w.inFlight() {
						inFlight++
					}
				}
				phase := ""
				if now.Before(s.measureFrom) {
					phase = "  (warmup)"
				}
				secs := now.Sub(last).Seconds()
				fmt.Fprintf(out, "%s %5.0fs  in-flight %4d  ops/s %12s  p99 %9s  errors/s %9s%s\n",
					target, now.Sub(s.base).Seconds(), inFlight, fmtCount(float64(h.TotalCount())/secs),
					fmtDur(time.Duration(h.ValueAtQuantile(99))), fmtCount(float64(failures)/secs), phase)
				last = now
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}
