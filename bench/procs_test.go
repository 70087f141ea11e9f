package bench

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

// startingProgram has one target, "started", whose Open starts a process
// as a server would and sets *saw to the GOMAXPROCS that process finds in
// its environment ("unset" if none).
func startingProgram(saw *string) Program {
	started := Target{Name: "started", Open: func(ctx context.Context, _ Settings) (System, error) {
		out, err := exec.CommandContext(ctx, "sh", "-c", `printf %s "${GOMAXPROCS-unset}"`).Output()
		if err != nil {
			return nil, err
		}
		*saw = string(out)
		return Shared{L: &fakeLocker{}}, nil
	}}
	return Program{Name: "kahuna-bench", Targets: Registry{started}}
}

// runStarted runs Main on startingProgram's target with flags, GOMAXPROCS
// set to env in the environment (and both it and the harness's Ps restored
// after the test), and returns what the started server saw and the report.
func runStarted(t *testing.T, env string, flags ...string) (string, jsonReport) {
	t.Helper()
	t.Setenv("GOMAXPROCS", env)
	prev := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	var saw string
	doc := mainJSON(t, startingProgram(&saw), append([]string{"--target", "started", "--duration", "50ms", "--warmup", "0s", "--concurrency", "2"}, flags...)...)
	return saw, doc
}

// wantHeader checks that the console report of p says want.
func wantHeader(t *testing.T, p Parameters, want string) {
	t.Helper()
	var console strings.Builder
	if err := (Report{Params: p}).writeConsole(&console); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(console.String(), want) {
		t.Errorf("console header, want %q:\n%s", want, console.String())
	}
}

// --procs sets GOMAXPROCS for the harness and for every server a target
// starts, which sees it in its environment, and the report says so.
func TestProcsReachesTheServersATargetStarts(t *testing.T) {
	serverSaw, doc := runStarted(t, os.Getenv("GOMAXPROCS"), "--procs", "1")
	if serverSaw != "1" || runtime.GOMAXPROCS(0) != 1 {
		t.Fatalf("a started server saw GOMAXPROCS=%q, the harness runs with %d; want 1 and 1", serverSaw, runtime.GOMAXPROCS(0))
	}
	if doc.Parameters.GoMaxProcs != 1 || doc.Parameters.Procs != 1 {
		t.Fatalf("report: gomaxprocs %d, procs %d; want 1 and 1", doc.Parameters.GoMaxProcs, doc.Parameters.Procs)
	}
	wantHeader(t, Parameters{Procs: 1, GoMaxProcs: 1, NumCPU: 2, Workload: WorkloadLock}, "GOMAXPROCS 1 of 2 CPUs (--procs: the servers started here too)")

	var stderr bytes.Buffer
	if code := Main(context.Background(), []string{"--procs", "-1"}, &bytes.Buffer{}, &stderr, startingProgram(new(string))); code != 2 ||
		!strings.Contains(stderr.String(), "--procs must be ≥ 0 (0 = Go's default), got -1") {
		t.Errorf("--procs -1: exit %d, stderr %q", code, stderr.String())
	}
}

// --client-procs sets GOMAXPROCS for the harness alone: a server a target
// starts finds no GOMAXPROCS in its environment, even one the harness was
// given, so it runs at Go's default; the report says so.
func TestClientProcsLeavesTheServersAtGosDefault(t *testing.T) {
	serverSaw, doc := runStarted(t, "2", "--client-procs", "1") // as if the harness were started with GOMAXPROCS=2
	if serverSaw != "unset" || runtime.GOMAXPROCS(0) != 1 {
		t.Fatalf("a started server saw GOMAXPROCS=%q, the harness runs with %d; want it unset and 1", serverSaw, runtime.GOMAXPROCS(0))
	}
	if doc.Parameters.GoMaxProcs != 1 || doc.Parameters.ClientProcs != 1 || doc.Parameters.Procs != 0 {
		t.Fatalf("report: gomaxprocs %d, clientProcs %d, procs %d; want 1, 1 and 0", doc.Parameters.GoMaxProcs, doc.Parameters.ClientProcs, doc.Parameters.Procs)
	}
	wantHeader(t, Parameters{ClientProcs: 1, GoMaxProcs: 1, NumCPU: 2, Workload: WorkloadLock}, "GOMAXPROCS 1 of 2 CPUs (--client-procs: the servers started here at Go's default)")

	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--client-procs", "-1"}, "--client-procs must be ≥ 0 (0 = Go's default), got -1"},
		{[]string{"--client-procs", "1", "--procs", "1"}, "--procs and --client-procs: give one"},
	} {
		var stderr bytes.Buffer
		if code := Main(context.Background(), bad.args, &bytes.Buffer{}, &stderr, startingProgram(new(string))); code != 2 || !strings.Contains(stderr.String(), bad.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", bad.args, code, stderr.String(), bad.want)
		}
	}
}
