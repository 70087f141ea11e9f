package bench

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// csvHeader is Kahuna's kahuna-bench CSV with a Target column in front, so
// several targets fit one file. The aggregate row's Operation is TOTAL.
var csvHeader = []string{"Target", "Operation", "Count", "Rps", "P50Ms", "P90Ms", "P95Ms", "P99Ms", "P999Ms", "MaxMs", "MeanMs", "Errors", "Timeouts", "Misses"}

func (r Report) writeCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	// hot-wait adds its figures as columns, filled on the TOTAL row.
	wait := r.Params.Workload == WorkloadHotWait
	header := csvHeader
	if wait {
		header = append(header[:len(header):len(header)], "Jain", "RequestsPerGrant", "GrantsPerContender")
	}
	rounds := r.Params.Rounds > 1
	if rounds {
		header = append(header[:len(header):len(header)], "Round")
	}
	_ = cw.Write(header)
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	for _, res := range r.Results {
		for n, s := range append(res.Operations[:len(res.Operations):len(res.Operations)], res.Aggregate) {
			rec := []string{
				res.Target, s.Operation, i(s.Count), f(s.Rps),
				f(ms(s.P50)), f(ms(s.P90)), f(ms(s.P95)), f(ms(s.P99)), f(ms(s.P999)), f(ms(s.Max)), f(ms(s.Mean)),
				i(s.Errors), i(s.Timeouts), i(s.Misses),
			}
			if wait {
				jain, rpg, grants := "", "", ""
				if w := res.Wait; w != nil && n == len(res.Operations) {
					g := make([]string, len(w.Grants))
					for k, v := range w.Grants {
						g[k] = i(v)
					}
					jain, rpg, grants = f(w.Jain), f(w.RequestsPerGrant), strings.Join(g, " ")
				}
				rec = append(rec, jain, rpg, grants)
			}
			if rounds {
				rec = append(rec, strconv.Itoa(res.Round))
			}
			_ = cw.Write(rec)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("csv report: %w", err)
	}
	return nil
}
