package bench

import (
	"testing"
	"time"

	"github.com/kahunago/kahuna/lease"
)

func TestOpenLoopDueTimes(t *testing.T) {
	base := time.Unix(100, 0)
	s := newSchedule(base, time.Second, 2*time.Second, 400)
	for _, c := range []struct {
		i    int64
		want time.Duration
	}{{0, 0}, {1, 2500 * time.Microsecond}, {400, time.Second}, {1199, 2997500 * time.Microsecond}} {
		if got := s.due(c.i).Sub(base); got != c.want {
			t.Errorf("due(%d) = base+%v, want base+%v", c.i, got, c.want)
		}
	}
	if got := s.backlog(1000); got != 200 {
		t.Errorf("backlog after 1000 of 1200 due = %d, want 200", got)
	}
	if got := newSchedule(base, 0, time.Second, 0).backlog(5); got != 0 {
		t.Errorf("closed loop backlog = %d, want 0", got)
	}
}

// A target that serves one call at a time in 20 ms, offered 100 ops/s by
// one worker, can do only 50/s: in the open loop each operation waits for
// the ones before it, and that wait must show in the latency (measured from
// the intended start). The closed loop hides it: every operation takes 20 ms.
func TestOpenLoopShowsQueueingDelay(t *testing.T) {
	const service = 20 * time.Millisecond
	slow := fakeTarget("slow", &fakeLocker{delay: service / 2, status: lease.Locked}) // TryLock + Unlock = 20 ms

	c := testConfig(WorkloadLock)
	c.Concurrency, c.Duration, c.Timeout = 1, 600*time.Millisecond, 0
	closed := run(t, c, slow).Aggregate

	c.Rate = 100
	openRes := run(t, c, slow)
	open := openRes.Aggregate

	if closed.P50 > 3*service {
		t.Errorf("closed loop p50 = %v, want about the service time %v", closed.P50, service)
	}
	// Operation i is due at 10i ms and done at about 20(i+1) ms: by the
	// end of 600 ms the queue is 300 ms deep.
	if open.P50 < 4*service || open.Max < 10*service {
		t.Errorf("open loop p50 %v, max %v: want the queueing delay (≫ %v) in the latency", open.P50, open.Max, service)
	}
	if openRes.Backlog < 10 {
		t.Errorf("backlog = %d, want the ~30 operations never started", openRes.Backlog)
	}
}

func TestOpenLoopKeepsItsRate(t *testing.T) {
	c := testConfig(WorkloadLock)
	c.Rate, c.Duration = 2000, 500*time.Millisecond
	res := run(t, c, MutexTarget())
	// Never more than due; fewer only if a loaded machine starves the
	// callers, and then the shortfall is reported as backlog.
	n := res.Aggregate.Count + res.Aggregate.Misses
	if n < 600 || n > 1000 {
		t.Errorf("%d operations in 500 ms at 2000/s, want ~1000", n)
	}
	if got := n + res.Backlog; got < 990 || got > 1000 {
		t.Errorf("done %d + backlog %d = %d, want the 1000 due", n, res.Backlog, got)
	}
}

// An idle worker sleeps until each operation is due; the runtime's wake-up
// lateness (up to ~1 ms) must not show as latency of a sub-microsecond target.
func TestOpenLoopOnTimeHasNoTimerFloor(t *testing.T) {
	c := testConfig(WorkloadLock)
	c.Rate, c.Duration = 1000, 300*time.Millisecond
	res := run(t, c, MutexTarget())
	if p50 := res.Aggregate.P50; p50 > 200*time.Microsecond {
		t.Errorf("p50 = %v for a mutex at 1000 ops/s: timer lateness counted as latency", p50)
	}
}
