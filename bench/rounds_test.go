package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestRunsOfAlternateTheOrder(t *testing.T) {
	var got []string
	for _, r := range runsOf([]string{"a", "b"}, 3) {
		got = append(got, r.target+string(rune('0'+r.round)))
	}
	if strings.Join(got, " ") != "a1 b1 b2 a2 a3 b3" {
		t.Fatalf("runs %v", got)
	}
	if r := runsOf([]string{"a"}, 1); len(r) != 1 || r[0].round != 0 {
		t.Fatalf("one round: %+v", r)
	}
}

// Each ratio is taken within a round, then its median and range over the
// rounds: a target twice as fast in every round is 2× however much both
// move between rounds.
func TestCompareRoundsTakesRatiosWithinRounds(t *testing.T) {
	res := func(name string, round int, rps float64) Result {
		return Result{Target: name, Round: round, Aggregate: OpSummary{Rps: rps}}
	}
	rows := compareRounds([]Result{
		res("k", 1, 100), res("r", 1, 50),
		res("r", 2, 10), res("k", 2, 30),
		res("k", 3, 40), res("r", 3, 20),
	})
	k, r := rows[0], rows[1]
	if k.Target != "k" || len(k.Rps) != 3 || k.Rps[1] != 30 || k.Median != 40 || r.Median != 20 {
		t.Fatalf("rows %+v", rows)
	}
	if k.Ratios["r"] != 2 || k.RatioMin["r"] != 2 || k.RatioMax["r"] != 3 {
		t.Errorf("k ÷ r median %v range %v–%v, want 2, 2–3", k.Ratios["r"], k.RatioMin["r"], k.RatioMax["r"])
	}
	var b strings.Builder
	writeRounds(&b, rows)
	if !strings.Contains(b.String(), "2.0 (2.0–3.0)") || !strings.Contains(b.String(), "100 30 40") {
		t.Errorf("table:\n%s", b.String())
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median of 4 values %v, want 2.5", m)
	}
}

func TestMainRounds(t *testing.T) {
	p := Program{Name: "kahuna-bench", Targets: DefaultTargets()}
	doc := mainJSON(t, p,
		"--compare", "embedded,mutex", "--rounds", "2", "--duration", "150ms", "--warmup", "20ms", "--concurrency", "4")
	var order []string
	for _, r := range doc.Runs {
		order = append(order, r.Target+string(rune('0'+r.Round)))
	}
	if strings.Join(order, " ") != "embedded1 mutex1 mutex2 embedded2" || doc.Parameters.Rounds != 2 {
		t.Fatalf("runs %v, rounds %d", order, doc.Parameters.Rounds)
	}
	if len(doc.Rounds) != 2 || len(doc.Rounds[0].Rps) != 2 || doc.Rounds[0].Ratios["mutex"] <= 0 || doc.Comparison != nil {
		t.Fatalf("rounds %+v, comparison %+v", doc.Rounds, doc.Comparison)
	}

	var stderr bytes.Buffer
	if code := Main(context.Background(), []string{"--rounds", "0"}, &bytes.Buffer{}, &stderr, p); code != 2 ||
		!strings.Contains(stderr.String(), "--rounds must be ≥ 1, got 0") {
		t.Errorf("--rounds 0: exit %d, stderr %q", code, stderr.String())
	}
}

func TestCSVHasARoundColumnWithRounds(t *testing.T) {
	r := Report{Params: Parameters{Rounds: 2, Workload: WorkloadLock}, Results: []Result{
		{Target: "k", Round: 1, Operations: []OpSummary{{Operation: "lock"}}},
		{Target: "k", Round: 2, Operations: []OpSummary{{Operation: "lock"}}},
	}}
	var b strings.Builder
	if err := r.writeCSV(&b); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if !strings.HasSuffix(lines[0], ",Round") || !strings.HasSuffix(lines[1], ",1") || !strings.HasSuffix(lines[len(lines)-1], ",2") {
		t.Fatalf("csv:\n%s", b.String())
	}
}
