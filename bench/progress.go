package bench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"
)

// startProgress prints a live line every second until the returned stop is
// called: elapsed, operations in flight, ops/s and p99 of the last second.
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
				h := rec.takeInterval()
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
				rate := float64(h.TotalCount()) / now.Sub(last).Seconds()
				fmt.Fprintf(out, "%s %5.0fs  in-flight %4d  ops/s %12s  p99 %9s%s\n",
					target, now.Sub(s.base).Seconds(), inFlight, fmtCount(rate),
					fmtDur(time.Duration(h.ValueAtQuantile(99))), phase)
				last = now
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}
