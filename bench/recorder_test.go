package bench

import (
	"math"
	"testing"
	"time"
)

// within reports whether got is want ± rel (relative).
func within(got, want time.Duration, rel float64) bool {
	return math.Abs(float64(got-want)) <= rel*float64(want)
}

func TestPercentilesOfKnownSamples(t *testing.T) {
	rec := newRecorder([]row{{name: "op"}}, 3)
	// 1 µs … 10,000 µs, spread over the stripes as workers would.
	for i := 1; i <= 10_000; i++ {
		rec.success(rec.stripeFor(i), 0, time.Duration(i)*time.Microsecond, true)
	}
	res := summarize("t", rec, 2*time.Second)
	s := res.Operations[0]
	if s.Count != 10_000 {
		t.Fatalf("count = %d, want 10000", s.Count)
	}
	if s.Rps != 5000 {
		t.Errorf("rps = %v, want 5000 (10,000 over 2 s)", s.Rps)
	}
	for _, c := range []struct {
		name      string
		got, want time.Duration
	}{
		{"p50", s.P50, 5000 * time.Microsecond},
		{"p90", s.P90, 9000 * time.Microsecond},
		{"p95", s.P95, 9500 * time.Microsecond},
		{"p99", s.P99, 9900 * time.Microsecond},
		{"p99.9", s.P999, 9990 * time.Microsecond},
		{"max", s.Max, 10_000 * time.Microsecond},
		{"mean", s.Mean, 5000500 * time.Nanosecond},
	} {
		// 3 significant digits: within 0.1%.
		if !within(c.got, c.want, 0.001) {
			t.Errorf("%s = %v, want %v ± 0.1%%", c.name, c.got, c.want)
		}
	}
	if res.Aggregate.Count != s.Count || res.Aggregate.P99 != s.P99 {
		t.Errorf("aggregate of one row %+v differs from the row %+v", res.Aggregate, s)
	}
}

func TestSubMicrosecondAndOutOfRangeSamples(t *testing.T) {
	rec := newRecorder([]row{{name: "op"}}, 1)
	st := rec.stripeFor(0)
	for range 5 {
		rec.success(st, 0, 417*time.Nanosecond, true) // a mutex's lock op
	}
	rec.success(st, 0, 0, true)            // a clock that did not move: counts, as 1 ns
	rec.success(st, 0, -time.Second, true) // cannot happen; must not panic
	rec.success(st, 0, 2*time.Hour, true)  // past the range: counts, clamped
	s := summarize("t", rec, time.Second).Operations[0]
	if s.Count != 8 {
		t.Fatalf("count = %d, want 8: no sample may be dropped", s.Count)
	}
	if !within(s.P50, 417*time.Nanosecond, 0.001) {
		t.Errorf("p50 = %v, want 417ns: nanosecond resolution below 1 µs", s.P50)
	}
	if !within(s.Max, time.Hour, 0.001) {
		t.Errorf("max = %v, want the clamped hour", s.Max)
	}
}

func TestWarmupAndMetricRows(t *testing.T) {
	rec := newRecorder([]row{{name: "lock"}, {name: "handoff", metric: true}}, 2)
	st := rec.stripeFor(0)
	rec.success(st, 0, time.Millisecond, false) // warmup: live line only
	rec.success(st, 0, time.Millisecond, true)
	rec.success(st, 1, time.Second, true)
	rec.miss(st, 0)
	rec.failure(st, 0, "TryLock: refused in warmup", false, false) // live line only
	rec.failure(st, 0, "TryLock: boom", false, true)
	rec.failure(st, 0, "TryLock: timed out", true, true)
	if h, failures := rec.takeInterval(); h.TotalCount() != 2 || failures != 3 {
		t.Errorf("live line saw %d samples and %d failures, want 2 and 3 (warmup included, handoff not an operation)", h.TotalCount(), failures)
	}
	if h, failures := rec.takeInterval(); h.TotalCount() != 0 || failures != 0 {
		t.Errorf("second interval saw %d samples and %d failures, want none", h.TotalCount(), failures)
	}
	res := summarize("t", rec, time.Second)
	agg := res.Aggregate
	if agg.Count != 1 || agg.Misses != 1 || agg.Errors != 1 || agg.Timeouts != 1 {
		t.Errorf("aggregate = %+v, want 1 success, 1 miss, 1 error, 1 timeout", agg)
	}
	if agg.Max >= time.Second {
		t.Errorf("aggregate max %v includes the handoff metric", agg.Max)
	}
	if h, _ := rowOf(res, "handoff"); h.Count != 1 || !h.Metric {
		t.Errorf("handoff row = %+v, want one metric sample", h)
	}
	if len(res.Errors) != 2 || res.Errors["TryLock: boom"] != 1 || res.Errors["TryLock: timed out"] != 1 {
		t.Errorf("breakdown = %v", res.Errors)
	}
}

func TestErrorBreakdownIsBounded(t *testing.T) {
	rec := newRecorder([]row{{name: "op"}}, 1)
	for i := range maxErrorKinds + 10 {
		rec.failure(rec.stripeFor(0), 0, "error "+time.Duration(i).String(), false, true)
	}
	res := summarize("t", rec, time.Second)
	if len(res.Errors) != maxErrorKinds+1 || res.Errors["(other errors)"] != 10 {
		t.Errorf("breakdown has %d kinds, other = %d; want %d kinds and 10 others", len(res.Errors), res.Errors["(other errors)"], maxErrorKinds+1)
	}
	if res.Aggregate.Errors != maxErrorKinds+10 {
		t.Errorf("errors = %d, want every one counted", res.Aggregate.Errors)
	}
}
