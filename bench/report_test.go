package bench

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

// sampleReport is two targets of known numbers.
func sampleReport() Report {
	allocs := 2.0
	op := func(name string, rps float64, p50, p99 time.Duration) OpSummary {
		return OpSummary{Operation: name, Count: int64(rps * 10), Rps: rps, P50: p50, P90: p99, P95: p99, P99: p99, P999: p99, Max: p99, Mean: p50, Misses: 3}
	}
	c := &Config{Targets: []string{"embedded", "redis"}, Workload: WorkloadLock, KeyPrefix: "bench:", TTL: 5 * time.Second,
		Concurrency: 64, Duration: 10 * time.Second, Warmup: 2 * time.Second, Timeout: 10 * time.Second}
	return Report{
		Params: newParameters(c, 42, time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)),
		Results: []Result{
			{Target: "embedded", Elapsed: 10 * time.Second, AllocsPerOp: &allocs, Errors: map[string]int64{},
				Operations: []OpSummary{op("lock", 300_000, 5*time.Microsecond, 3*time.Millisecond)},
				Aggregate:  op("TOTAL", 300_000, 5*time.Microsecond, 3*time.Millisecond)},
			{Target: "redis", Elapsed: 10 * time.Second, Errors: map[string]int64{"TryLock: refused": 1},
				Operations: []OpSummary{op("lock", 20_000, 2*time.Millisecond, 9*time.Millisecond)},
				Aggregate:  op("TOTAL", 20_000, 2*time.Millisecond, 9*time.Millisecond)},
		},
	}
}

func keysOf(t *testing.T, v any) []string {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%v is not an object", v)
	}
	return slices.Sorted(maps.Keys(m))
}

// The JSON field names are an interface: scripts read them. Pin them.
func TestJSONShape(t *testing.T) {
	var buf bytes.Buffer
	if err := sampleReport().write(&buf, "json"); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	pin := func(what string, got []string, want string) {
		t.Helper()
		if g := strings.Join(got, ","); g != want {
			t.Errorf("%s fields:\n got %s\nwant %s", what, g, want)
		}
	}
	pin("top", keysOf(t, doc), "comparison,parameters,runs,tool")
	pin("parameters", keysOf(t, doc["parameters"]),
		"concurrency,durability,durationSec,endpoints,goVersion,gomaxprocs,keyPrefix,keySpace,numCpu,platform,rate,seed,started,targets,timeoutSec,ttlMs,warmupSec,workload")
	run := doc["runs"].([]any)[0]
	pin("run", keysOf(t, run), "aggregate,allocsPerOp,backlog,elapsedSec,errorBreakdown,interrupted,operations,target")
	opFields := "count,errors,maxMs,meanMs,misses,operation,p50Ms,p90Ms,p95Ms,p999Ms,p99Ms,rps,timeouts"
	pin("operation", keysOf(t, run.(map[string]any)["operations"].([]any)[0]), opFields)
	pin("aggregate", keysOf(t, run.(map[string]any)["aggregate"]), opFields)
	pin("comparison", keysOf(t, doc["comparison"].([]any)[0]), "p50Ms,p99Ms,ratios,rps,target")

	r := doc["runs"].([]any)[0].(map[string]any)
	if r["allocsPerOp"] != 2.0 || r["aggregate"].(map[string]any)["p50Ms"] != 0.005 {
		t.Errorf("values: allocsPerOp %v, p50Ms %v; want 2 and 0.005", r["allocsPerOp"], r["aggregate"].(map[string]any)["p50Ms"])
	}
	if p := doc["parameters"].(map[string]any); p["durationSec"] != 10.0 || p["seed"] != 42.0 || p["ttlMs"] != 5000.0 {
		t.Errorf("parameters: %v", p)
	}
	if got := doc["runs"].([]any)[1].(map[string]any)["allocsPerOp"]; got != nil {
		t.Errorf("remote target allocsPerOp = %v, want null", got)
	}
}

func TestCSVShape(t *testing.T) {
	var buf bytes.Buffer
	if err := sampleReport().write(&buf, "csv"); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(recs[0], ","); got != "Target,Operation,Count,Rps,P50Ms,P90Ms,P95Ms,P99Ms,P999Ms,MaxMs,MeanMs,Errors,Timeouts,Misses" {
		t.Errorf("header = %s", got)
	}
	// Per target: each operation, then TOTAL.
	if len(recs) != 5 || recs[1][1] != "lock" || recs[2][1] != "TOTAL" || recs[3][0] != "redis" {
		t.Errorf("rows = %v", recs[1:])
	}
	if recs[1][3] != "300000" || recs[1][4] != "0.005" || recs[1][13] != "3" {
		t.Errorf("embedded lock row = %v", recs[1])
	}
}

func TestConsoleReport(t *testing.T) {
	var buf bytes.Buffer
	if err := sampleReport().write(&buf, "console"); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"workload lock, ephemeral locks, 64 callers, closed loop; 10,000 keys",
		"seed 42",
		"p50", "p99.9", "misses",
		"300,000", "5.00µs", "3.00ms",
		"allocs/op 2.0",
		"1  TryLock: refused",
		"== comparison",
		"×redis",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("console report lacks %q:\n%s", want, out)
		}
	}
}

func TestFormatting(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{fmtDur(417 * time.Nanosecond), "417ns"},
		{fmtDur(4900 * time.Nanosecond), "4.90µs"},
		{fmtDur(26700 * time.Microsecond), "26.7ms"},
		{fmtDur(262 * time.Millisecond), "262ms"},
		{fmtDur(1500 * time.Millisecond), "1.50s"},
		{fmtDur(0), "-"},
		{fmtCount(960778.4), "960,778"},
		{fmtCount(999), "999"},
		{fmtCount(1000), "1,000"},
		{fmtCount(-1234), "-1,234"},
		{ninesLabel(0), "0%"},
		{ninesLabel(1), "90%"},
		{ninesLabel(2), "99%"},
		{ninesLabel(4), "99.99%"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
