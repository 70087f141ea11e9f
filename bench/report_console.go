package bench

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// writeConsole prints the human report: the conditions, one table per
// target (Kahuna's columns), and with several targets the comparison.
func (r Report) writeConsole(out io.Writer) error {
	p := r.Params
	var b strings.Builder
	load := fmt.Sprintf("%d callers, closed loop", p.Concurrency)
	if p.Rate > 0 {
		load = fmt.Sprintf("open loop at %s ops/s, at most %d in flight", fmtCount(p.Rate), p.Concurrency)
	}
	workload := p.Workload
	if p.Mix != "" {
		workload += " (" + p.Mix + ")"
	}
	if p.Extends > 0 {
		workload += fmt.Sprintf(", %d extends per hold", p.Extends)
	}
	if p.Workload == WorkloadHotWait {
		workload += fmt.Sprintf(" (hold %v, wait up to %v)", p.Hold, p.Wait)
		if p.Kind != "" {
			workload += " on a " + p.Kind
		}
	}
	keys := "keys"
	if p.KeySpace == 1 {
		keys = "key"
	}
	fmt.Fprintf(&b, "workload %s, %s locks, %s; %s %s %q…, ttl %v\n", workload, p.Durability, load, fmtCount(float64(p.KeySpace)), keys, p.KeyPrefix, p.TTL)
	fmt.Fprintf(&b, "%v measured after %v warmup per target, timeout %v, seed %d\n", p.Duration, p.Warmup, p.Timeout, p.Seed)
	if p.Rounds > 1 {
		fmt.Fprintf(&b, "%d rounds, the targets in turn, forward then backward\n", p.Rounds)
	}
	procs := ""
	switch {
	case p.Procs > 0:
		procs = " (--procs: the servers started here too)"
	case p.ClientProcs > 0:
		procs = " (--client-procs: the servers started here at Go's default)"
	}
	fmt.Fprintf(&b, "%s, %s, GOMAXPROCS %d of %d CPUs%s, %s\n", p.Platform, p.GoVersion, p.GoMaxProcs, p.NumCPU, procs, p.Started.Format(time.RFC3339))
	if len(p.Endpoints) > 0 {
		fmt.Fprintf(&b, "endpoints %s\n", strings.Join(p.Endpoints, ","))
	}
	for _, res := range r.Results {
		b.WriteString("\n")
		writeResultTable(&b, res)
	}
	for _, sk := range r.Skipped {
		fmt.Fprintf(&b, "\n== %s: SKIPPED, not measured: %s\n", sk.Target, sk.Reason)
	}
	switch {
	case p.Rounds > 1:
		b.WriteString("\n")
		writeRounds(&b, compareRounds(r.Results))
	case len(r.Results) > 1:
		b.WriteString("\n")
		writeComparison(&b, compare(r.Results))
	}
	if p.Workload == WorkloadHotWait && len(r.Results) > 0 {
		b.WriteString("\n")
		writeWaitComparison(&b, r.Results)
	}
	_, err := io.WriteString(out, b.String())
	return err
}

func writeResultTable(b *strings.Builder, res Result) {
	title := res.label()
	if res.Interrupted {
		title += " (interrupted)"
	}
	fmt.Fprintf(b, "== %s: %.1f s measured\n", title, res.Elapsed.Seconds())
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "operation\tcount\tops/s\tp50\tp90\tp95\tp99\tp99.9\tmax\tmean\terrors\ttimeouts\tmisses\t")
	rows, ops := res.Operations, 0
	for _, s := range rows {
		if !s.Metric {
			ops++
		}
	}
	if ops > 1 {
		rows = append(rows[:len(rows):len(rows)], res.Aggregate)
	}
	for _, s := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
			s.Operation, fmtCount(float64(s.Count)), fmtCount(s.Rps),
			fmtDur(s.P50), fmtDur(s.P90), fmtDur(s.P95), fmtDur(s.P99), fmtDur(s.P999), fmtDur(s.Max), fmtDur(s.Mean),
			fmtCount(float64(s.Errors)), fmtCount(float64(s.Timeouts)), fmtCount(float64(s.Misses)))
	}
	_ = tw.Flush()
	if res.AllocsPerOp != nil {
		fmt.Fprintf(b, "allocs/op %.1f (heap allocations in the process per operation measured)\n", *res.AllocsPerOp)
	}
	if res.Backlog > 0 && res.Backlog*100 > res.measuredOps { // a few at the very end are no news
		fmt.Fprintf(b, "fell behind: %s operations were due but never started; the target cannot sustain --rate\n", fmtCount(float64(res.Backlog)))
	}
	if w := res.Wait; w != nil {
		how := "polled TryLock (jittered backoff 1-50 ms)"
		if w.WaitLocker {
			how = "waited on the service (Lock)"
		}
		fmt.Fprintf(b, "acquire: %s; grant latency = the wait, handoff = Unlock called → next grant returned\n", how)
		fmt.Fprintf(b, "grants per contender %v, Jain's index %.3f\n", w.Grants, w.Jain)
		fmt.Fprintf(b, "requests per grant %.2f (%s counted: %s)\n", w.RequestsPerGrant, fmtCount(float64(w.Requests)), w.Counted)
	}
	if len(res.Errors) > 0 {
		b.WriteString("errors:\n")
		for _, m := range errorKinds(res.Errors) {
			fmt.Fprintf(b, "  %10s  %s\n", fmtCount(float64(res.Errors[m])), m)
		}
	}
}

// writeWaitComparison is the hot-wait table: grants/s, hand-off latency,
// the longest wait, fairness and requests per grant, side by side.
func writeWaitComparison(b *strings.Builder, results []Result) {
	b.WriteString("== hot-wait (handoff: Unlock called → next contender's grant returned; max wait: longest acquire)\n")
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tgrants/s\thandoff p50\tp90\tp99\tmax wait\tJain\treq/grant\tmisses\terrors\t")
	for _, res := range results {
		w := res.Wait
		if w == nil {
			continue
		}
		grant, _ := rowOf(res, rowGrant)
		hand, _ := rowOf(res, rowHandoff)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%.3f\t%.2f\t%s\t%s\t\n", res.label(), fmtCount(grant.Rps),
			fmtDur(hand.P50), fmtDur(hand.P90), fmtDur(hand.P99), fmtDur(grant.Max), w.Jain, w.RequestsPerGrant,
			fmtCount(float64(grant.Misses)), fmtCount(float64(grant.Errors+grant.Timeouts)))
	}
	_ = tw.Flush()
}

// rowOf finds a row of a result by operation name.
func rowOf(res Result, name string) (OpSummary, bool) {
	for _, s := range res.Operations {
		if s.Operation == name {
			return s, true
		}
	}
	return OpSummary{}, false
}

// fmtDur prints a latency with three significant digits in a fitting unit.
func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < time.Microsecond:
		return strconv.FormatInt(int64(d), 10) + "ns"
	case d < time.Millisecond:
		return sig3(float64(d)/1e3) + "µs"
	case d < time.Second:
		return sig3(float64(d)/1e6) + "ms"
	}
	return sig3(d.Seconds()) + "s"
}

func sig3(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// fmtCount prints a count or rate rounded, with thousands separators.
func fmtCount(v float64) string {
	s := strconv.FormatFloat(v, 'f', 0, 64)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
