package bench

import (
	"context"
	"sync/atomic"
	"time"
)

// schedule says when each operation starts.
//
// Closed loop (rate 0): a worker starts its next operation as soon as the
// last one is answered, so a slow target slows the load down with it.
//
// Open loop (rate > 0): operation i is due at base + i/rate whoever runs
// it. When every worker is busy, due operations wait, and that wait is in
// their latency, counted from the due time: a target that stalls for a
// second shows a second of queueing, not one slow sample (no coordinated
// omission). A worker that is idle sleeps until the due time; then the
// latency counts from when it woke, since the Go runtime wakes sleepers up
// to ~1 ms late on Linux (it waits in epoll with millisecond timeouts) and
// that lateness is the harness's, not the target's.
type schedule struct {
	base, measureFrom, end time.Time
	rate                   float64
	seq                    atomic.Int64     // open loop: next operation's number
	now                    func() time.Time // the clock (nil: time.Now; tests set it)
}

func (s *schedule) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

func newSchedule(base time.Time, warmup, duration time.Duration, rate float64) *schedule {
	return &schedule{base: base, measureFrom: base.Add(warmup), end: base.Add(warmup + duration), rate: rate}
}

// due is when operation i is due in the open loop.
func (s *schedule) due(i int64) time.Time {
	return s.base.Add(time.Duration(float64(i) * 1e9 / s.rate))
}

// next waits until w's next operation is due. It returns where its
// latency counts from and when it actually begins; false once the run is
// over (or ctx ended).
func (s *schedule) next(ctx context.Context, w *worker) (from, began time.Time, ok bool) {
	now := s.clock()
	if s.rate <= 0 {
		return now, now, now.Before(s.end) && ctx.Err() == nil
	}
	at := s.due(s.seq.Add(1) - 1)
	if !at.Before(s.end) {
		return at, at, false
	}
	if d := at.Sub(now); d > 0 { // on time: wait for it
		w.timer.Reset(d)
		select {
		case <-w.timer.C:
		case <-ctx.Done():
			w.timer.Stop()
			return at, at, false
		}
		woke := s.clock()
		return woke, woke, woke.Before(s.end) && ctx.Err() == nil
	}
	// Late: every worker was busy when it fell due. Running past the end,
	// the rest is backlog, reported as such.
	return at, now, now.Before(s.end) && ctx.Err() == nil
}

// backlog is how many operations were due before the end but never
// started, given how many did start: the open loop's "fell behind".
func (s *schedule) backlog(started int64) int64 {
	if s.rate <= 0 {
		return 0
	}
	due := int64(s.end.Sub(s.base).Seconds() * s.rate)
	return max(due-started, 0)
}
