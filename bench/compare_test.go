package bench

import (
	"strings"
	"testing"
)

func TestCompareRatios(t *testing.T) {
	res := func(name string, rps float64) Result {
		return Result{Target: name, Aggregate: OpSummary{Rps: rps}}
	}
	rows := compare([]Result{res("kahuna", 66_000), res("redis", 22_000), res("etcd", 0)})
	k, r, e := rows[0], rows[1], rows[2]
	if k.Ratios["redis"] != 3 || r.Ratios["kahuna"] != 1.0/3 {
		t.Errorf("kahuna/redis = %v, redis/kahuna = %v; want 3 and 1/3", k.Ratios["redis"], r.Ratios["kahuna"])
	}
	if _, ok := k.Ratios["etcd"]; ok {
		t.Error("a ratio to a target with no successes")
	}
	if e.Ratios["kahuna"] != 0 {
		t.Errorf("etcd/kahuna = %v, want 0", e.Ratios["kahuna"])
	}
	if _, ok := k.Ratios["kahuna"]; ok {
		t.Error("a target compared with itself")
	}

	var b strings.Builder
	writeComparison(&b, rows)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("table:\n%s", b.String())
	}
	for _, want := range []string{"×kahuna", "×redis", "×etcd"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("header %q lacks %q", lines[1], want)
		}
	}
	if f := strings.Fields(lines[2]); strings.Join(f[4:], " ") != "1 3.0 -" {
		t.Errorf("kahuna row = %q, want ratios 1 3.0 -", lines[2])
	}
	if f := strings.Fields(lines[3]); strings.Join(f[4:], " ") != "0.33 1 -" {
		t.Errorf("redis row = %q, want ratios 0.33 1 -", lines[3])
	}
}

func TestFmtRatio(t *testing.T) {
	for v, want := range map[float64]string{290.4: "290", 15.2: "15", 2.14: "2.1", 0.364: "0.36", 0.0123: "0.012", 0: "0"} {
		if got := fmtRatio(v); got != want {
			t.Errorf("fmtRatio(%v) = %q, want %q", v, got, want)
		}
	}
}
