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

// --procs sets GOMAXPROCS for the harness and for every server a target
// starts, which sees it in its environment, and the report says so.
func TestProcsReachesTheServersATargetStarts(t *testing.T) {
	t.Setenv("GOMAXPROCS", os.Getenv("GOMAXPROCS")) // restored after Main sets it
	prev := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })

	var serverSaw string
	started := Target{Name: "started", Open: func(ctx context.Context, _ Settings) (System, error) {
		// What a server process started here finds in its environment.
		out, err := exec.CommandContext(ctx, "sh", "-c", `printf %s "$GOMAXPROCS"`).Output()
		if err != nil {
			return nil, err
		}
		serverSaw = string(out)
		return Shared{L: &fakeLocker{}}, nil
	}}
	p := Program{Name: "kahuna-bench", Targets: Registry{started}}
	doc := mainJSON(t, p, "--target", "started", "--procs", "1", "--duration", "50ms", "--warmup", "0s", "--concurrency", "2")
	if serverSaw != "1" || runtime.GOMAXPROCS(0) != 1 {
		t.Fatalf("a started server saw GOMAXPROCS=%q, the harness runs with %d; want 1 and 1", serverSaw, runtime.GOMAXPROCS(0))
	}
	if doc.Parameters.GoMaxProcs != 1 || doc.Parameters.Procs != 1 {
		t.Fatalf("report: gomaxprocs %d, procs %d; want 1 and 1", doc.Parameters.GoMaxProcs, doc.Parameters.Procs)
	}
	var console strings.Builder
	if err := (Report{Params: Parameters{Procs: 1, GoMaxProcs: 1, NumCPU: 2, Workload: WorkloadLock}}).writeConsole(&console); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(console.String(), "GOMAXPROCS 1 of 2 CPUs (--procs: the servers started here too)") {
		t.Errorf("console header:\n%s", console.String())
	}

	var stderr bytes.Buffer
	if code := Main(context.Background(), []string{"--procs", "-1"}, &bytes.Buffer{}, &stderr, p); code != 2 ||
		!strings.Contains(stderr.String(), "--procs must be ≥ 0 (0 = Go's default), got -1") {
		t.Errorf("--procs -1: exit %d, stderr %q", code, stderr.String())
	}
}

// --client-procs sets GOMAXPROCS for the harness alone: a server a target
// starts finds no GOMAXPROCS in its environment, even one the harness was
// given, so it runs at Go's default; the report says so.
func TestClientProcsLeavesTheServersAtGosDefault(t *testing.T) {
	t.Setenv("GOMAXPROCS", "2") // as if the harness were started with it
	prev := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })

	serverSaw := "unset"
	started := Target{Name: "started", Open: func(ctx context.Context, _ Settings) (System, error) {
		out, err := exec.CommandContext(ctx, "sh", "-c", `printf %s "${GOMAXPROCS-unset}"`).Output()
		if err != nil {
			return nil, err
		}
		serverSaw = string(out)
		return Shared{L: &fakeLocker{}}, nil
	}}
	p := Program{Name: "kahuna-bench", Targets: Registry{started}}
	doc := mainJSON(t, p, "--target", "started", "--client-procs", "1", "--duration", "50ms", "--warmup", "0s", "--concurrency", "2")
	if serverSaw != "unset" || runtime.GOMAXPROCS(0) != 1 {
		t.Fatalf("a started server saw GOMAXPROCS=%q, the harness runs with %d; want it unset and 1", serverSaw, runtime.GOMAXPROCS(0))
	}
	if doc.Parameters.GoMaxProcs != 1 || doc.Parameters.ClientProcs != 1 || doc.Parameters.Procs != 0 {
		t.Fatalf("report: gomaxprocs %d, clientProcs %d, procs %d; want 1, 1 and 0", doc.Parameters.GoMaxProcs, doc.Parameters.ClientProcs, doc.Parameters.Procs)
	}
	var console strings.Builder
	if err := (Report{Params: Parameters{ClientProcs: 1, GoMaxProcs: 1, NumCPU: 2, Workload: WorkloadLock}}).writeConsole(&console); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(console.String(), "GOMAXPROCS 1 of 2 CPUs (--client-procs: the servers started here at Go's default)") {
		t.Errorf("console header:\n%s", console.String())
	}

	for _, args := range [][]string{{"--client-procs", "-1"}, {"--client-procs", "1", "--procs", "1"}} {
		var stderr bytes.Buffer
		want := map[bool]string{true: "--client-procs must be ≥ 0 (0 = Go's default), got -1", false: "--procs and --client-procs: give one"}[args[1] == "-1"]
		if code := Main(context.Background(), args, &bytes.Buffer{}, &stderr, p); code != 2 || !strings.Contains(stderr.String(), want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", args, code, stderr.String(), want)
		}
	}
}
