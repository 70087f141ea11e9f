package bench

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/kahunago/kahuna/lease"
)

var quiet = slog.New(slog.DiscardHandler)

func run(t *testing.T, c *Config, target Target) Result {
	t.Helper()
	res, err := runOne(context.Background(), c, target, 1, quiet, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestBusyIsAMissNotAnError(t *testing.T) {
	res := run(t, testConfig(WorkloadLock), fakeTarget("busy", &fakeLocker{status: lease.Busy}))
	agg := res.Aggregate
	if agg.Misses == 0 {
		t.Fatal("no misses counted")
	}
	if agg.Errors != 0 || agg.Timeouts != 0 || len(res.Errors) != 0 {
		t.Errorf("a Busy TryLock counted as an error: %+v %v", agg, res.Errors)
	}
	if agg.Count != 0 || agg.P99 != 0 {
		t.Errorf("a miss counted as a success or in the latency: %+v", agg)
	}
}

func TestUnexpectedStatusesAndFailures(t *testing.T) {
	for _, c := range []struct {
		name         string
		l            *fakeLocker
		wantMsg      string
		wantTimeouts bool
	}{
		{"must retry", &fakeLocker{status: lease.MustRetry}, "TryLock answered MustRetry", false},
		{"transport", &fakeLocker{err: errors.New("connection refused")}, "TryLock: connection refused", false},
		{"deadline", &fakeLocker{err: context.DeadlineExceeded}, "TryLock: timed out", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := run(t, testConfig(WorkloadLock), fakeTarget("fake", c.l))
			agg := res.Aggregate
			got := agg.Errors
			if c.wantTimeouts {
				got = agg.Timeouts
			}
			if got == 0 || agg.Count != 0 || agg.Misses != 0 {
				t.Errorf("aggregate = %+v", agg)
			}
			if res.Errors[c.wantMsg] != got {
				t.Errorf("breakdown = %v, want %q × %d", res.Errors, c.wantMsg, got)
			}
		})
	}
}

func TestPerOperationTimeout(t *testing.T) {
	c := testConfig(WorkloadLock)
	c.Concurrency, c.Timeout, c.Duration = 1, 20*time.Millisecond, 150*time.Millisecond
	// Slower than the timeout; the fake gives up when its context does.
	res := run(t, c, fakeTarget("slow", &fakeLocker{delay: 30 * time.Millisecond, status: lease.Locked}))
	if res.Aggregate.Timeouts == 0 || res.Aggregate.Errors != 0 {
		t.Errorf("aggregate = %+v, want timeouts only", res.Aggregate)
	}
}

func TestLockWorkloadOnTheMutexBaseline(t *testing.T) {
	res := run(t, testConfig(WorkloadLock), MutexTarget())
	agg := res.Aggregate
	if agg.Count == 0 || agg.Errors != 0 || agg.Timeouts != 0 {
		t.Fatalf("aggregate = %+v", agg)
	}
	if res.AllocsPerOp == nil {
		t.Fatal("no allocs/op for an in-process target")
	}
	if res.Elapsed != 200*time.Millisecond || agg.Rps != float64(agg.Count)/0.2 {
		t.Errorf("elapsed %v, rps %v for %d ops", res.Elapsed, agg.Rps, agg.Count)
	}
}

// allocs/op is the target's: the harness's loop (schedule, timeout,
// recording) allocates nothing, so a target that allocates nothing shows 0.
func TestHarnessDoesNotAllocatePerOperation(t *testing.T) {
	free := &fakeLocker{status: lease.Locked}
	target := fakeTarget("free", free)
	target.InProcess = true
	for _, rate := range []float64{0, 20_000} {
		c := testConfig(WorkloadLock)
		c.Rate = rate
		// A worker's operations one by one, counted: none allocates.
		wl, err := newWorkload(c)
		if err != nil {
			t.Fatal(err)
		}
		w := newWorker(0, free, 1, keyNames(c.KeyPrefix, c.keys()), c, newRecorder(wl.rows, 1), context.Background())
		w.timer = time.NewTimer(time.Hour)
		w.timer.Stop()
		s := newSchedule(time.Now(), 0, time.Hour, rate)
		if a := testing.AllocsPerRun(1000, func() {
			if !w.runNext(s, wl) {
				t.Fatal("the schedule ended within the hour")
			}
		}); a != 0 {
			t.Errorf("rate %v: the harness's loop allocates %.2f per operation, want 0", rate, a)
		}
		// A whole run reports it: what the run's window allocates besides
		// (the runtime's own work, a dozen at most here) does not grow
		// with the operations, so it stays within a fixed budget however
		// many the machine ran.
		res := run(t, c, target)
		if res.AllocsPerOp == nil {
			t.Fatal("no allocs/op for an in-process target")
		}
		if total := *res.AllocsPerOp * float64(res.measuredOps); res.measuredOps == 0 || total > 50 {
			t.Errorf("rate %v: %d ops, allocs/op %.4f (%.0f in all); want ~0", rate, res.measuredOps, *res.AllocsPerOp, total)
		}
	}
}

func TestExtendWorkload(t *testing.T) {
	res := run(t, testConfig(WorkloadExtend), MutexTarget())
	acq, _ := rowOf(res, rowAcquire)
	ext, _ := rowOf(res, rowExtend)
	rel, _ := rowOf(res, rowRelease)
	if acq.Count == 0 || res.Aggregate.Errors != 0 {
		t.Fatalf("acquire %+v, aggregate %+v, errors %v", acq, res.Aggregate, res.Errors)
	}
	// Every hold started is extended three times and released, except the
	// ones cut off by the end of the run.
	if ext.Count < 3*(acq.Count-4) || ext.Count > 3*acq.Count || rel.Count < acq.Count-4 {
		t.Errorf("acquire %d, extend %d, release %d: want 3 extends and 1 release per hold", acq.Count, ext.Count, rel.Count)
	}
}

func TestGetWorkloadFindsPreloadedLocks(t *testing.T) {
	c := testConfig(WorkloadGet)
	c.KeySpace = 100
	m := NewMutexLocker()
	res := run(t, c, Target{Name: "mutex", Open: func(context.Context, Settings) (System, error) { return Shared{L: m}, nil }})
	if res.Aggregate.Count == 0 || res.Aggregate.Errors != 0 {
		t.Fatalf("aggregate = %+v", res.Aggregate)
	}
	for i := range 100 {
		if _, r, _ := m.Get(context.Background(), keyNames(c.KeyPrefix, 100)[i], lease.Ephemeral); r.Status != lease.Got {
			t.Fatalf("key %d not held after preload: %v", i, r.Status)
		}
	}
}

func TestMixedWorkloadFollowsWeights(t *testing.T) {
	c := testConfig(WorkloadMixed)
	c.Mix = []MixPart{{rowLock, 1}, {rowGet, 3}}
	res := run(t, c, MutexTarget())
	lock, _ := rowOf(res, rowLock)
	get, _ := rowOf(res, rowGet)
	ratio := float64(get.Count) / float64(lock.Count)
	if ratio < 2.7 || ratio > 3.3 {
		t.Errorf("get/lock = %d/%d = %.2f, want ~3", get.Count, lock.Count, ratio)
	}
	if res.Aggregate.Count != lock.Count+get.Count {
		t.Errorf("aggregate %d ≠ lock %d + get %d", res.Aggregate.Count, lock.Count, get.Count)
	}
}

func TestHotWorkloadReportsHandoffs(t *testing.T) {
	c := testConfig(WorkloadHot)
	c.Concurrency, c.Duration = 8, 300*time.Millisecond
	res := run(t, c, MutexTarget())
	lock, _ := rowOf(res, rowLock)
	hand, ok := rowOf(res, rowHandoff)
	if !ok || !hand.Metric {
		t.Fatalf("no handoff metric row in %+v", res.Operations)
	}
	if lock.Count == 0 || hand.Count == 0 || lock.Misses == 0 {
		t.Errorf("lock %+v, handoff %+v: want grants, handoffs and misses on one hot key", lock, hand)
	}
	if hand.Count > lock.Count {
		t.Errorf("%d handoffs for %d grants", hand.Count, lock.Count)
	}
	if res.Aggregate.Count != lock.Count {
		t.Errorf("aggregate counts handoffs: %d ≠ %d", res.Aggregate.Count, lock.Count)
	}
}

func TestHandoffBookkeeping(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	h := newHandoffs(1)
	if _, ok := h.acquired(0, 1, at(0)); ok {
		t.Error("first grant is not a handoff")
	}
	h.releasing(0, 1)
	h.released(0, 1, at(10), true)
	if _, ok := h.acquired(0, 1, at(12)); ok {
		t.Error("the releaser taking it back is not a handoff")
	}
	h.releasing(0, 1)
	h.released(0, 1, at(20), true)
	if d, ok := h.acquired(0, 2, at(25)); !ok || d != 5*time.Millisecond {
		t.Errorf("handoff = %v %v, want 5ms from the latest release", d, ok)
	}
	// Worker 3 gets the lock before worker 2's Unlock has returned.
	h.releasing(0, 2)
	if d, ok := h.acquired(0, 3, at(30)); !ok || d != 0 {
		t.Errorf("early handoff = %v %v, want 0", d, ok)
	}
	h.released(0, 2, at(31), true) // late news, must not overwrite
	h.releasing(0, 3)
	h.released(0, 3, at(40), false) // Unlock failed: held until its lease lapses
	if _, ok := h.acquired(0, 4, at(5040)); ok {
		t.Error("taking a lapsed lease is not a handoff")
	}
}

func TestInterruptedRunIsNotAnError(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	c := testConfig(WorkloadLock)
	c.Duration = time.Minute
	time.AfterFunc(100*time.Millisecond, cancel)
	res, err := runOne(ctx, c, fakeTarget("slow", &fakeLocker{delay: time.Millisecond, status: lease.Locked}), 1, quiet, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Interrupted || res.Aggregate.Errors != 0 || res.Aggregate.Timeouts != 0 {
		t.Errorf("interrupted %v, aggregate %+v", res.Interrupted, res.Aggregate)
	}
	if res.Elapsed > 5*time.Second {
		t.Errorf("elapsed = %v, want the time actually run", res.Elapsed)
	}
}

func TestKeyNames(t *testing.T) {
	got := strings.Join(keyNames("p/", 3), " ")
	if got != "p/0 p/1 p/2" {
		t.Errorf("keys = %q", got)
	}
}
