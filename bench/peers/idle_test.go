package peers

import (
	"context"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// RunIdle measures every system with a few sessions: each keeps all of
// them live through its window and reports its CPU; the table names each.
func TestRunIdle(t *testing.T) {
	needServer(t, "etcd")
	bin := buildKahuna(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := IdleConfig{Systems: []string{"kahuna:persistent", "kahuna:ephemeral", "etcd"}, Sessions: 5, Locks: 3,
		TTL: 2 * time.Second, Window: time.Second, KahunaServer: bin, Etcd: "etcd", Progress: io.Discard, Logf: t.Logf}
	results := RunIdle(ctx, cfg)
	if len(results) != 3 {
		t.Fatalf("%d results, want 3", len(results))
	}
	for _, r := range results {
		if r.Err != nil {
			t.Fatalf("%s: %v", r.System, r.Err)
		}
		// A second of a few sessions may take less than one clock tick
		// (10 ms) of a server's CPU: TestProcessCPU checks the reading.
		if r.Idle < 0 || r.Busy < 0 || r.Client < 0 {
			t.Fatalf("%s: idle %.2f%%, server %.2f%%, client %.2f%% with the sessions", r.System, r.Idle, r.Busy, r.Client)
		}
	}
	var table strings.Builder
	PrintIdle(&table, cfg, results)
	for _, name := range cfg.Systems {
		if !strings.Contains(table.String(), "| "+name+" |") {
			t.Fatalf("the table has no row for %s:\n%s", name, table.String())
		}
	}
	if r := RunIdle(ctx, IdleConfig{Systems: []string{"nope"}, Progress: io.Discard, Logf: t.Logf}); r[0].Err == nil {
		t.Fatal("an unknown system ran")
	}
}

// ProcessCPU reads a process's CPU over a window: this one's, while a
// goroutine spins through it.
func TestProcessCPU(t *testing.T) {
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() { // spins: the CPU to be read
		}
	}()
	got, err := processCPU(context.Background(), os.Getpid(), 500*time.Millisecond)
	stop.Store(true)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	// One core spinning; a loaded machine may give it less than all.
	if got < 20 {
		t.Fatalf("%.2f%% of a core while a goroutine spun, want at least 20%%", got)
	}
	if _, err := processCPU(context.Background(), -1, time.Millisecond); err == nil {
		t.Fatal("no error for a process that does not exist")
	}
}
