package peers

import (
	"context"
	"io"
	"strings"
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
		if r.Busy <= 0 || r.Client <= 0 {
			t.Fatalf("%s: server %.2f%%, client %.2f%% with the sessions: nothing measured", r.System, r.Busy, r.Client)
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
