package kahuna_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/internal/testknobs"
)

// Short of disk space, a node refuses new persistent grants with MustRetry
// and the reason, and nothing else: holders extend and release, ephemeral
// locks go on; once space returns it grants again. A node short of space
// refuses to open.
func TestSpaceGuardRefusesPersistentGrants(t *testing.T) {
	ctx := context.Background()
	var free atomic.Uint64
	free.Store(1 << 30)
	statfs := func(string) (uint64, uint64, error) { return free.Load(), 4 << 30, nil }
	dir := t.TempDir()
	cfg := testknobs.WithStatfs(kahuna.Config{DataDir: dir, DiskReserve: "256MiB"}, statfs)
	n, err := kahuna.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mustStatus(t, n, kahuna.Locked, func() (kahuna.Result, error) {
		return n.TryLock(ctx, "held", []byte("a"), time.Minute, kahuna.Persistent)
	})

	free.Store(100 << 20)
	if err := testknobs.CheckSpace(n); err != nil {
		t.Fatal(err)
	}
	r, err := n.TryLock(ctx, "new", []byte("b"), time.Minute, kahuna.Persistent)
	if err != nil || r.Status != kahuna.MustRetry || !strings.Contains(r.Reason, "below the reserve") {
		t.Fatalf("persistent grant short of space: %+v, %v; want MustRetry with the reason", r, err)
	}
	if s := n.Stats(); s.NoSpace == "" || s.DiskFree != 100<<20 {
		t.Fatalf("Stats: NoSpace %q, DiskFree %d", s.NoSpace, s.DiskFree)
	}
	mustStatus(t, n, kahuna.Extended, func() (kahuna.Result, error) {
		return n.Extend(ctx, "held", []byte("a"), time.Minute, kahuna.Persistent)
	})
	mustStatus(t, n, kahuna.Unlocked, func() (kahuna.Result, error) { return n.Unlock(ctx, "held", []byte("a"), kahuna.Persistent) })
	mustStatus(t, n, kahuna.Locked, func() (kahuna.Result, error) {
		return n.TryLock(ctx, "eph", []byte("b"), time.Minute, kahuna.Ephemeral)
	})

	free.Store(1 << 30)
	if err := testknobs.CheckSpace(n); err != nil {
		t.Fatal(err)
	}
	mustStatus(t, n, kahuna.Locked, func() (kahuna.Result, error) {
		return n.TryLock(ctx, "new", []byte("b"), time.Minute, kahuna.Persistent)
	})
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	free.Store(100 << 20)
	if _, err := kahuna.Open(cfg); !errors.Is(err, kahuna.ErrNoSpace) || !strings.Contains(err.Error(), "refusing to start") {
		t.Fatalf("Open short of space: %v, want ErrNoSpace saying why", err)
	}
}
