package bench

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
)

// Comparison is one target's line of the side-by-side table.
type Comparison struct {
	Target string
	Rps    float64
	P50    time.Duration
	P99    time.Duration
	// Ratios is this target's ops/s divided by each other target's
	// (keyed by name); a target with no successes gives no ratio.
	Ratios map[string]float64
}

// compare builds the side-by-side table from the aggregates.
func compare(results []Result) []Comparison {
	out := make([]Comparison, len(results))
	for i, a := range results {
		out[i] = Comparison{Target: a.Target, Rps: a.Aggregate.Rps, P50: a.Aggregate.P50, P99: a.Aggregate.P99, Ratios: map[string]float64{}}
		for _, b := range results {
			if b.Target != a.Target && b.Aggregate.Rps > 0 {
				out[i].Ratios[b.Target] = a.Aggregate.Rps / b.Aggregate.Rps
			}
		}
	}
	return out
}

// writeComparison prints ops/s, p50, p99 and one "× name" column per
// target: how many times that target's ops/s this row's is.
func writeComparison(b *strings.Builder, rows []Comparison) {
	b.WriteString("== comparison (ops/s ratio: row ÷ column)\n")
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "target\tops/s\tp50\tp99\t"
	for _, c := range rows {
		head += "×" + c.Target + "\t"
	}
	fmt.Fprintln(tw, head)
	for _, r := range rows {
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t", r.Target, fmtCount(r.Rps), fmtDur(r.P50), fmtDur(r.P99))
		for _, c := range rows {
			switch ratio, ok := r.Ratios[c.Target]; {
			case c.Target == r.Target:
				line += "1\t"
			case !ok:
				line += "-\t"
			default:
				line += fmtRatio(ratio) + "\t"
			}
		}
		fmt.Fprintln(tw, line)
	}
	_ = tw.Flush()
}

// fmtRatio keeps two or three significant digits: 0.012, 0.36, 2.1, 15, 290.
func fmtRatio(v float64) string {
	switch {
	case v >= 10:
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.1f", v)
	case v >= 0.1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.2g", v)
}
