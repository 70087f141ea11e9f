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
	names := make([]string, len(rows))
	for i, r := range rows {
		names[i] = r.Target
	}
	fmt.Fprintln(tw, "target\tops/s\tp50\tp99\t"+ratioHeader(names))
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Target, fmtCount(r.Rps), fmtDur(r.P50), fmtDur(r.P99),
			ratioCells(names, r.Target, func(other string) (string, bool) {
				ratio, ok := r.Ratios[other]
				return fmtRatio(ratio), ok
			}))
	}
	_ = tw.Flush()
}

// ratioHeader is the "×name" column heads of a ratio table.
func ratioHeader(names []string) string {
	var s strings.Builder
	for _, n := range names {
		s.WriteString("×" + n + "\t")
	}
	return s.String()
}

// ratioCells is self's row of a ratio table: 1 against itself, "-" where
// cell has no ratio, else cell's text.
func ratioCells(names []string, self string, cell func(other string) (string, bool)) string {
	var s strings.Builder
	for _, n := range names {
		text, ok := cell(n)
		switch {
		case n == self:
			text = "1"
		case !ok:
			text = "-"
		}
		s.WriteString(text + "\t")
	}
	return s.String()
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
