package bench

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
)

// turn is one target's run in a round.
type turn struct {
	target string
	round  int // 1, 2, ...; 0 when there is one round
}

// runsOf lists the runs of rounds rounds of targets: forward in odd
// rounds, backward in even ones (a, b, b, a, a, b, ...), so that no target
// always runs first or right after another's load.
func runsOf(targets []string, rounds int) []turn {
	var out []turn
	for r := 1; r <= rounds; r++ {
		round := r
		if rounds == 1 {
			round = 0
		}
		order := slices.Clone(targets)
		if r%2 == 0 {
			slices.Reverse(order)
		}
		for _, t := range order {
			out = append(out, turn{target: t, round: round})
		}
	}
	return out
}

// Rounds is one target's line of the rounds table: its ops/s in each
// round and the median, and each ratio to another target taken within
// each round (both measured in that round), as its median and range.
type Rounds struct {
	Target   string
	Rps      []float64 // by round, in round order
	Median   float64
	Ratios   map[string]float64 // median of the rounds' ratios, by the other target
	RatioMin map[string]float64 // and their range
	RatioMax map[string]float64
}

// compareRounds builds the rounds table from results of several rounds.
func compareRounds(results []Result) []Rounds {
	var targets []string
	byRound := map[int]map[string]float64{} // round → target → ops/s
	for _, r := range results {
		if !slices.Contains(targets, r.Target) {
			targets = append(targets, r.Target)
		}
		if byRound[r.Round] == nil {
			byRound[r.Round] = map[string]float64{}
		}
		byRound[r.Round][r.Target] = r.Aggregate.Rps
	}
	rounds := make([]int, 0, len(byRound))
	for n := range byRound {
		rounds = append(rounds, n)
	}
	slices.Sort(rounds)
	out := make([]Rounds, len(targets))
	for i, a := range targets {
		row := Rounds{Target: a, Ratios: map[string]float64{}, RatioMin: map[string]float64{}, RatioMax: map[string]float64{}}
		ratios := map[string][]float64{}
		for _, n := range rounds {
			rps, ok := byRound[n][a]
			if !ok {
				continue
			}
			row.Rps = append(row.Rps, rps)
			for _, b := range targets {
				if other, ok := byRound[n][b]; ok && b != a && other > 0 {
					ratios[b] = append(ratios[b], rps/other)
				}
			}
		}
		row.Median = median(row.Rps)
		for b, rs := range ratios {
			row.Ratios[b], row.RatioMin[b], row.RatioMax[b] = median(rs), slices.Min(rs), slices.Max(rs)
		}
		out[i] = row
	}
	return out
}

// median of vs (0 for none); the mean of the middle two for an even count.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(vs))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// writeRounds prints each target's ops/s by round and median, and each
// ratio's median and range over the rounds.
func writeRounds(b *strings.Builder, rows []Rounds) {
	b.WriteString("== rounds (ops/s by round and median; ratio row ÷ column: median of the rounds' ratios, range)\n")
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	names := make([]string, len(rows))
	for i, r := range rows {
		names[i] = r.Target
	}
	fmt.Fprintln(tw, "target\tops/s by round\tmedian\t"+ratioHeader(names))
	for _, r := range rows {
		each := make([]string, len(r.Rps))
		for i, v := range r.Rps {
			each[i] = fmtCount(v)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Target, strings.Join(each, " "), fmtCount(r.Median),
			ratioCells(names, r.Target, func(other string) (string, bool) {
				ratio, ok := r.Ratios[other]
				return fmt.Sprintf("%s (%s–%s)", fmtRatio(ratio), fmtRatio(r.RatioMin[other]), fmtRatio(r.RatioMax[other])), ok
			}))
	}
	_ = tw.Flush()
}
