package bench

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// Result is what one target did.
type Result struct {
	Target     string
	Round      int           // 1, 2, ... with --rounds above 1; 0 otherwise
	Elapsed    time.Duration // the measured time ops/s is over
	Operations []OpSummary   // one per row, in workload order
	Aggregate  OpSummary     // every operation (not metric rows such as handoff)
	// AllocsPerOp is the heap allocations of an in-process target per
	// operation (the harness makes none in its loop); nil for remote targets.
	AllocsPerOp *float64
	// Errors counts errors and timeouts by "call: message".
	Errors      map[string]int64
	Backlog     int64 // open loop: operations due before the end but never started
	Interrupted bool  // the run was stopped early (signal)
	// Wait is the hot-wait workload's fairness and request figures; nil
	// for the other workloads.
	Wait *WaitSummary

	hist        *hdr.Histogram // Aggregate's latencies, for the plot
	measuredOps int64          // operations started after warmup
}

// label names the result in a report: its target, and its round if any.
func (r Result) label() string {
	if r.Round > 0 {
		return fmt.Sprintf("%s (round %d)", r.Target, r.Round)
	}
	return r.Target
}

// OpSummary is one row of a report. Latencies are of successes only.
type OpSummary struct {
	Operation                     string
	Metric                        bool    // not an operation (handoff): left out of the aggregate
	Count                         int64   // successes
	Rps                           float64 // successes per second
	P50, P90, P95, P99, P999, Max time.Duration
	Mean                          time.Duration
	Errors, Timeouts, Misses      int64
}

// summarize turns the recorder's totals into a Result.
func summarize(target string, rec *recorder, elapsed time.Duration) Result {
	res := Result{Target: target, Elapsed: elapsed, Errors: map[string]int64{}, hist: newHist()}
	var agg rowStats
	for i, r := range rec.rows {
		t := rec.total(i)
		op := opSummary(r.name, t, elapsed)
		op.Metric = r.metric
		res.Operations = append(res.Operations, op)
		for m, n := range t.errs {
			res.Errors[m] += n
		}
		if r.metric {
			continue
		}
		res.hist.Merge(t.hist)
		agg.misses += t.misses
		agg.errors += t.errors
		agg.timeouts += t.timeouts
	}
	agg.hist = res.hist
	res.Aggregate = opSummary("TOTAL", agg, elapsed)
	return res
}

func opSummary(name string, t rowStats, elapsed time.Duration) OpSummary {
	h := t.hist
	s := OpSummary{
		Operation: name,
		Count:     h.TotalCount(),
		Errors:    t.errors,
		Timeouts:  t.timeouts,
		Misses:    t.misses,
	}
	if elapsed > 0 {
		s.Rps = float64(s.Count) / elapsed.Seconds()
	}
	if s.Count > 0 {
		q := func(p float64) time.Duration { return time.Duration(h.ValueAtQuantile(p)) }
		s.P50, s.P90, s.P95, s.P99, s.P999 = q(50), q(90), q(95), q(99), q(99.9)
		s.Max = time.Duration(h.Max())
		s.Mean = time.Duration(h.Mean())
	}
	return s
}

// failing says why the run measured a target that is not working (a dead
// endpoint, the wrong protocol, a node refusing every call): more
// operations failed than succeeded. "" if it did not.
func (r Result) failing() string {
	a := r.Aggregate
	failed := a.Errors + a.Timeouts
	if failed == 0 || failed <= a.Count {
		return ""
	}
	why := fmt.Sprintf("%d of %d operations failed", failed, failed+a.Count+a.Misses)
	if kinds := errorKinds(r.Errors); len(kinds) > 0 {
		why += fmt.Sprintf(", most of them %q", kinds[0])
	}
	return why
}

// errorKinds lists a breakdown's messages, most frequent first.
func errorKinds(errs map[string]int64) []string {
	return slices.SortedFunc(maps.Keys(errs), func(a, b string) int {
		return cmp.Or(cmp.Compare(errs[b], errs[a]), strings.Compare(a, b))
	})
}
