package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// hot-wait on a read/write lock and on a semaphore, through the real
// node: every acquire carries the kind's request (a plain lock call on
// their names would be refused InvalidInput, an error), reads are a row of
// their own, and the run is fair and answers each grant in about two
// requests.
func TestMainHotWaitKinds(t *testing.T) {
	for _, kind := range [][]string{{"--kind", "rwlock", "--reads", "0.5"}, {"--kind", "semaphore", "--limit", "3"}} {
		t.Run(kind[1], func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			p := Program{Name: "kahuna-bench", Targets: DefaultTargets()}
			args := append([]string{"--workload", "hot-wait", "--target", "embedded", "--durability", "persistent",
				"--concurrency", "6", "--hold", "2ms", "--duration", "500ms", "--warmup", "100ms", "--format", "json", "--progress=false"}, kind...)
			if code := Main(context.Background(), args, &stdout, &stderr, p); code != 0 {
				t.Fatalf("exit %d\n%s", code, stderr.String())
			}
			var out struct {
				Parameters struct{ Kind, KeyPrefix string }
				Runs       []struct {
					Operations []struct {
						Operation string
						Count     int64
						Errors    int64
					}
					Wait struct {
						Jain             float64
						RequestsPerGrant float64
					}
				}
			}
			if err := json.Unmarshal(stdout.Bytes(), &out); err != nil || len(out.Runs) != 1 {
				t.Fatalf("%v: %s", err, stdout.String())
			}
			if out.Parameters.Kind == "" || !strings.HasPrefix(out.Parameters.KeyPrefix, kind[1]+":") {
				t.Errorf("parameters %+v", out.Parameters)
			}
			rows := map[string]int64{}
			for _, o := range out.Runs[0].Operations {
				rows[o.Operation] = o.Count
				if o.Errors > 0 {
					t.Errorf("%s: %d errors", o.Operation, o.Errors)
				}
			}
			_, handoff := rows[rowHandoff]
			switch {
			case rows[rowGrant] == 0 || handoff:
				t.Errorf("rows %v: want grants and no handoff row (several holders at once)", rows)
			case kind[1] == "rwlock" && (rows[rowRead] == 0 || rows[rowRead] >= rows[rowGrant]):
				t.Errorf("rows %v: want some reads among the grants, not all", rows)
			}
			if w := out.Runs[0].Wait; w.Jain < 0.9 || w.RequestsPerGrant < 1.8 || w.RequestsPerGrant > 2.3 {
				t.Errorf("Jain %.3f, %.2f requests per grant", w.Jain, w.RequestsPerGrant)
			}
		})
	}
}

// A target that cannot carry the kind's requests fails the run with that
// reason, instead of measuring a mutex under a semaphore's name.
func TestMainHotWaitKindNeedsWholeRequests(t *testing.T) {
	var stdout, stderr bytes.Buffer
	p := Program{Name: "kahuna-bench", Targets: DefaultTargets()}
	code := Main(context.Background(), []string{"--workload", "hot-wait", "--target", "mutex", "--durability", "persistent", "--kind", "semaphore",
		"--concurrency", "2", "--duration", "100ms", "--warmup", "0s", "--progress=false"}, &stdout, &stderr, p)
	if code == 0 || !strings.Contains(stderr.String(), errNoWholeRequests.Error()) {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}

// Bad combinations are usage errors.
func TestKindFlags(t *testing.T) {
	p := Program{Name: "kahuna-bench", Targets: DefaultTargets()}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--workload", "hot-wait", "--kind", "queue"}, `--kind "queue"`},
		{[]string{"--workload", "hot-wait", "--kind", "semaphore"}, "needs --durability persistent"},
		{[]string{"--workload", "hot-wait", "--kind", "semaphore", "--durability", "persistent", "--limit", "0"}, "--limit must be 1 to 256"},
		{[]string{"--workload", "hot-wait", "--kind", "rwlock", "--durability", "persistent", "--reads", "1.5"}, "--reads must be 0 to 1"},
		{[]string{"--workload", "lock", "--kind", "rwlock", "--durability", "persistent"}, "goes with --workload hot-wait only"},
	} {
		var stderr bytes.Buffer
		if code := Main(context.Background(), c.args, &bytes.Buffer{}, &stderr, p); code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q, want 2 and %q", c.args, code, stderr.String(), c.want)
		}
	}
}
