package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == "worker" {
		os.Exit(worker()) // the test binary is also the workers' binary
	}
	os.Exit(m.Run())
}

// TestScenario runs the example on SQLite: without the fence worker 1's
// stale write destroys worker 2's; with it, it is rejected with worker 2's
// token. In both, worker 1's handle said the lease was lost when it woke.
func TestScenario(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	runs, err := run(ctx, os.Args[0], "", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	printSideBySide(&out, runs)
	t.Log("\n" + out.String())
	if len(runs) != 2 {
		t.Fatalf("%d runs", len(runs))
	}
	without, with := runs[0], runs[1]
	if without.final != 1 || without.rejected || !without.c1Lost {
		t.Errorf("without the fence: final %d, rejected %v, lost %v; want the lost update (1), not rejected, lost", without.final, without.rejected, without.c1Lost)
	}
	if with.final != 100 || !with.rejected || with.current != with.c2Token || !with.c1Lost {
		t.Errorf("with the fence: final %d, rejected %v with %d (worker 2's token %d), lost %v; want 100, rejected with worker 2's token, lost",
			with.final, with.rejected, with.current, with.c2Token, with.c1Lost)
	}
}
