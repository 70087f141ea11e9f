package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// The JSON report follows Kahuna's kahuna-bench: the same parameter and
// per-operation field names (durations in seconds, latencies in ms), with
// one entry in runs per target and, for several targets, the comparison.

type jsonReport struct {
	Tool       string           `json:"tool"`
	Parameters jsonParameters   `json:"parameters"`
	Runs       []jsonRun        `json:"runs"`
	Comparison []jsonComparison `json:"comparison,omitempty"`
	Rounds     []jsonRounds     `json:"rounds,omitempty"` // with --rounds above 1, instead of comparison
	Skipped    []jsonSkip       `json:"skipped,omitempty"`
}

type jsonParameters struct {
	Targets     []string `json:"targets"`
	Workload    string   `json:"workload"`
	Mix         string   `json:"mix,omitempty"`
	Extends     int      `json:"extends,omitempty"`
	Duration    float64  `json:"durationSec"`
	Warmup      float64  `json:"warmupSec"`
	Concurrency int      `json:"concurrency"`
	Rate        float64  `json:"rate"`
	KeySpace    int      `json:"keySpace"`
	KeyPrefix   string   `json:"keyPrefix"`
	TTLMs       int64    `json:"ttlMs"`
	Durability  string   `json:"durability"`
	Endpoints   []string `json:"endpoints"`
	Seed        uint64   `json:"seed"`
	Timeout     float64  `json:"timeoutSec"`
	Rounds      int      `json:"rounds,omitempty"` // above 1 only
	HoldMs      *float64 `json:"holdMs,omitempty"` // hot-wait
	WaitMs      *float64 `json:"waitMs,omitempty"` // hot-wait
	Kind        string   `json:"kind,omitempty"`   // hot-wait on a semaphore or rwlock
	GoMaxProcs  int      `json:"gomaxprocs"`
	Procs       int      `json:"procs,omitempty"`       // --procs: the servers it started had as many
	ClientProcs int      `json:"clientProcs,omitempty"` // --client-procs: the servers it started had Go's default
	NumCPU      int      `json:"numCpu"`
	GoVersion   string   `json:"goVersion"`
	Platform    string   `json:"platform"`
	Started     string   `json:"started"`
}

type jsonRun struct {
	Target         string           `json:"target"`
	Round          int              `json:"round,omitempty"` // with --rounds above 1
	ElapsedSec     float64          `json:"elapsedSec"`
	Interrupted    bool             `json:"interrupted"`
	Backlog        int64            `json:"backlog"`
	AllocsPerOp    *float64         `json:"allocsPerOp"`
	Operations     []jsonOperation  `json:"operations"`
	Aggregate      jsonOperation    `json:"aggregate"`
	ErrorBreakdown map[string]int64 `json:"errorBreakdown"`
	Wait           *jsonWait        `json:"wait,omitempty"` // hot-wait
}

type jsonWait struct {
	Grants           []int64 `json:"grantsPerContender"`
	Jain             float64 `json:"jain"`
	Requests         int64   `json:"requests"`
	RequestsPerGrant float64 `json:"requestsPerGrant"`
	Counted          string  `json:"counted"`
	WaitLocker       bool    `json:"waitLocker"`
}

type jsonSkip struct {
	Target string `json:"target"`
	Reason string `json:"reason"`
}

type jsonOperation struct {
	Operation string  `json:"operation"`
	Metric    bool    `json:"metric,omitempty"`
	Count     int64   `json:"count"`
	Rps       float64 `json:"rps"`
	P50Ms     float64 `json:"p50Ms"`
	P90Ms     float64 `json:"p90Ms"`
	P95Ms     float64 `json:"p95Ms"`
	P99Ms     float64 `json:"p99Ms"`
	P999Ms    float64 `json:"p999Ms"`
	MaxMs     float64 `json:"maxMs"`
	MeanMs    float64 `json:"meanMs"`
	Errors    int64   `json:"errors"`
	Timeouts  int64   `json:"timeouts"`
	Misses    int64   `json:"misses"`
}

// jsonRounds is a target's ops/s by round and each ratio's median and
// range over the rounds (see Rounds).
type jsonRounds struct {
	Target   string             `json:"target"`
	Rps      []float64          `json:"rpsByRound"`
	Median   float64            `json:"rpsMedian"`
	Ratios   map[string]float64 `json:"ratios"`
	RatioMin map[string]float64 `json:"ratioMin"`
	RatioMax map[string]float64 `json:"ratioMax"`
}

type jsonComparison struct {
	Target string             `json:"target"`
	Rps    float64            `json:"rps"`
	P50Ms  float64            `json:"p50Ms"`
	P99Ms  float64            `json:"p99Ms"`
	Ratios map[string]float64 `json:"ratios"`
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func toJSONOperation(s OpSummary) jsonOperation {
	return jsonOperation{
		Operation: s.Operation, Metric: s.Metric, Count: s.Count, Rps: s.Rps,
		P50Ms: ms(s.P50), P90Ms: ms(s.P90), P95Ms: ms(s.P95), P99Ms: ms(s.P99), P999Ms: ms(s.P999),
		MaxMs: ms(s.Max), MeanMs: ms(s.Mean),
		Errors: s.Errors, Timeouts: s.Timeouts, Misses: s.Misses,
	}
}

func (r Report) writeJSON(w io.Writer) error {
	p := r.Params
	out := jsonReport{
		Tool: "kahuna-bench",
		Parameters: jsonParameters{
			Targets: p.Targets, Workload: p.Workload, Mix: p.Mix, Extends: p.Extends,
			Duration: p.Duration.Seconds(), Warmup: p.Warmup.Seconds(), Concurrency: p.Concurrency, Rate: p.Rate,
			KeySpace: p.KeySpace, KeyPrefix: p.KeyPrefix, TTLMs: p.TTL.Milliseconds(), Durability: p.Durability,
			Rounds:    roundsParam(p.Rounds),
			Endpoints: nonNil(p.Endpoints), Seed: p.Seed, Timeout: p.Timeout.Seconds(),
			GoMaxProcs: p.GoMaxProcs, Procs: p.Procs, ClientProcs: p.ClientProcs, NumCPU: p.NumCPU, GoVersion: p.GoVersion, Platform: p.Platform,
			Started: p.Started.Format(time.RFC3339),
		},
		Runs: []jsonRun{},
	}
	if p.Workload == WorkloadHotWait {
		hold, wait := ms(p.Hold), ms(p.Wait)
		out.Parameters.HoldMs, out.Parameters.WaitMs = &hold, &wait
		out.Parameters.Kind = p.Kind
	}
	for _, sk := range r.Skipped {
		out.Skipped = append(out.Skipped, jsonSkip(sk))
	}
	for _, res := range r.Results {
		run := jsonRun{
			Target: res.Target, Round: res.Round, ElapsedSec: res.Elapsed.Seconds(), Interrupted: res.Interrupted, Backlog: res.Backlog,
			AllocsPerOp: res.AllocsPerOp, Aggregate: toJSONOperation(res.Aggregate),
			Operations: []jsonOperation{}, ErrorBreakdown: res.Errors,
		}
		if run.ErrorBreakdown == nil {
			run.ErrorBreakdown = map[string]int64{}
		}
		for _, s := range res.Operations {
			run.Operations = append(run.Operations, toJSONOperation(s))
		}
		if w := res.Wait; w != nil {
			run.Wait = &jsonWait{Grants: w.Grants, Jain: w.Jain, Requests: w.Requests, RequestsPerGrant: w.RequestsPerGrant, Counted: w.Counted, WaitLocker: w.WaitLocker}
		}
		out.Runs = append(out.Runs, run)
	}
	switch {
	case p.Rounds > 1:
		for _, c := range compareRounds(r.Results) {
			out.Rounds = append(out.Rounds, jsonRounds(c))
		}
	case len(r.Results) > 1:
		for _, c := range compare(r.Results) {
			out.Comparison = append(out.Comparison, jsonComparison{Target: c.Target, Rps: c.Rps, P50Ms: ms(c.P50), P99Ms: ms(c.P99), Ratios: c.Ratios})
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return fmt.Errorf("json report: %w", err)
	}
	return nil
}

// roundsParam is the rounds parameter as the report gives it: only above 1.
func roundsParam(n int) int {
	if n > 1 {
		return n
	}
	return 0
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
