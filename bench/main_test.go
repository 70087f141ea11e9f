package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// One invocation through Main: two in-process targets compared, JSON to a
// file, a chart, the live line. It covers the embedded target end to end.
func TestMainCompareEmbeddedAndMutex(t *testing.T) {
	dir := t.TempDir()
	out, plotFile := filepath.Join(dir, "r.json"), filepath.Join(dir, "p.svg")
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), []string{
		"--compare", "kahuna-embedded,mutex", "--duration", "1200ms", "--warmup", "100ms",
		"--concurrency", "8", "--format", "json", "--output", out, "--plot", plotFile, "--seed", "7",
	}, &stdout, &stderr, Program{Name: "kahuna-bench", Targets: DefaultTargets()})
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	doc, data := readReport(t, out)
	if len(doc.Runs) != 2 || doc.Runs[0].Target != "embedded" || doc.Runs[1].Target != "mutex" || doc.Parameters.Seed != 7 {
		t.Fatalf("report: %s", data)
	}
	for _, r := range doc.Runs {
		if r.Aggregate.Count == 0 || r.Aggregate.Errors != 0 || r.AllocsPerOp == nil {
			t.Errorf("%s: %+v allocs %v", r.Target, r.Aggregate, r.AllocsPerOp)
		}
	}
	if len(doc.Comparison) != 2 || doc.Comparison[0].Ratios["mutex"] <= 0 {
		t.Errorf("comparison: %+v", doc.Comparison)
	}
	if info, err := os.Stat(plotFile); err != nil || info.Size() < 1000 {
		t.Errorf("plot: %v %v", info, err)
	}
	if !strings.Contains(stderr.String(), "embedded     1s  in-flight") {
		t.Errorf("no live line on stderr:\n%s", stderr.String())
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout used despite --output: %q", stdout.String())
	}
}

// A program can add targets and flags of its own, as the peers' command does.
func TestMainWithExtraTargetsAndFlags(t *testing.T) {
	var opened string
	p := Program{
		Name: "kahuna-bench-peers",
		Targets: append(DefaultTargets(), Target{Name: "busy", Open: func(context.Context, Settings) (System, error) {
			return Shared{L: &fakeLocker{status: lease.Busy}}, nil
		}}),
		Flags: func(fs *flag.FlagSet) { fs.StringVar(&opened, "peer-flag", "", "") },
	}
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), []string{"--target", "busy", "--peer-flag", "x", "--duration", "100ms", "--warmup", "0s", "--format", "csv", "--progress=false"}, &stdout, &stderr, p)
	if code != 0 || opened != "x" {
		t.Fatalf("exit %d, flag %q\n%s", code, opened, stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), "Target,Operation,") || !strings.Contains(stdout.String(), "busy,lock,0,") {
		t.Errorf("csv:\n%s", stdout.String())
	}
}

func TestMainExitCodes(t *testing.T) {
	var stderr bytes.Buffer
	p := Program{Name: "kahuna-bench", Targets: DefaultTargets()}
	if code := Main(context.Background(), []string{"--concurrency", "0"}, &bytes.Buffer{}, &stderr, p); code != 2 {
		t.Errorf("bad flag: exit %d, want 2", code)
	}
	if !strings.Contains(stderr.String(), "kahuna-bench: --concurrency must be ≥ 1") {
		t.Errorf("stderr = %q", stderr.String())
	}
	if code := Main(context.Background(), []string{"-h"}, &bytes.Buffer{}, &bytes.Buffer{}, p); code != 0 {
		t.Errorf("-h: exit %d, want 0", code)
	}
	stderr.Reset()
	code := Main(context.Background(), []string{"--target", "rest", "--endpoints", "ftp://x", "--duration", "10ms"}, &bytes.Buffer{}, &stderr, p)
	if code != 1 || !strings.Contains(stderr.String(), `endpoint "ftp://x": want http://host:port`) {
		t.Errorf("target that cannot open: exit %d, stderr %q", code, stderr.String())
	}
}

// A target that fails every call (dead, or the wrong protocol) makes the
// run fail, says so with the kind of error, and is not flooded: each
// worker backs off after failures in a row.
func TestMainFailsWhenErrorsDominate(t *testing.T) {
	refusing := &countingLocker{fakeLocker: fakeLocker{err: errors.New("dial tcp 127.0.0.1:40123->127.0.0.1:2070: connect: connection refused")}}
	p := Program{
		Name: "kahuna-bench",
		Targets: append(DefaultTargets(), Target{Name: "refusing", Open: func(context.Context, Settings) (System, error) {
			return Shared{L: refusing}, nil
		}}),
	}
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), []string{"--target", "refusing", "--concurrency", "2", "--duration", "300ms", "--warmup", "0s", "--progress=false"}, &stdout, &stderr, p)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if !strings.Contains(stderr.String(), `kahuna-bench: refusing FAILED: `) ||
		!strings.Contains(stderr.String(), `most of them "TryLock: dial tcp 127.0.0.1:2070: connect: connection refused"`) {
		t.Errorf("stderr = %q", stderr.String())
	}
	// Backoff doubling from 1 ms up to 250 ms sleeps at least half of
	// 1+2+4+…+128 ms ≈ 127 ms over a worker's first 8 failures, so no
	// worker can fail more than about 9 times in 300 ms; a tight loop
	// fails thousands of times.
	if n := refusing.calls.Load(); n > 2*12 {
		t.Errorf("%d calls in 300 ms by 2 workers against a refusing target: no backoff", n)
	}
}

type countingLocker struct {
	fakeLocker
	calls atomic.Int64
}

func (c *countingLocker) TryLock(ctx context.Context, name string, owner []byte, ttl time.Duration, d lease.Durability) (lease.Result, error) {
	c.calls.Add(1)
	return lease.Result{}, c.err
}

// readReport decodes the JSON report Main wrote to path; data is its text.
// mainJSON runs Main with args and the JSON report written to a file,
// fails the test unless it exits 0, and returns the report.
func mainJSON(t *testing.T, p Program, args ...string) jsonReport {
	t.Helper()
	out := filepath.Join(t.TempDir(), "r.json")
	var stderr bytes.Buffer
	args = append(args, "--format", "json", "--output", out, "--progress=false")
	if code := Main(context.Background(), args, &bytes.Buffer{}, &stderr, p); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	doc, _ := readReport(t, out)
	return doc
}

func readReport(t *testing.T, path string) (doc jsonReport, data []byte) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	return doc, data
}
