package kahuna_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
)

// TestNeverLockedNamesLeaveNoEntries is the measure of names never locked: 100k Gets,
// Unlocks and Extends of names never locked, through a node, leave no
// cache entry (before the fix they left one each).
func TestNeverLockedNamesLeaveNoEntries(t *testing.T) {
	n := openNode(t, kahuna.Config{})
	ctx := context.Background()
	const calls = 100_000
	for i := range calls {
		name := fmt.Sprintf("never-%d", i)
		d := durabilities[i%2]
		var r kahuna.Result
		var err error
		switch i % 3 {
		case 0:
			_, r, err = n.Get(ctx, name, d)
		case 1:
			r, err = n.Unlock(ctx, name, []byte("a"), d)
		default:
			r, err = n.Extend(ctx, name, []byte("a"), time.Minute, d)
		}
		if err != nil || r.Status != kahuna.LockDoesNotExist {
			t.Fatalf("call %d on %s: %v, %v, want LockDoesNotExist", i, name, r.Status, err)
		}
	}
	s := n.Stats()
	t.Logf("after %d Gets/Unlocks/Extends of never-locked names: %d cached entries", calls, s.CachedEntries)
	if s.CachedEntries != 0 {
		t.Fatalf("%d cached entries left behind, want 0", s.CachedEntries)
	}
}

// BenchmarkHeldLockMemory is the heap a held lock takes in the node: b.N
// ephemeral locks of 20-byte names and 16-byte owners taken and held, the
// live heap measured after a collection before and after.
//
//	go test -run '^$' -bench HeldLockMemory -benchtime 200000x .
func BenchmarkHeldLockMemory(b *testing.B) {
	n := openNode(b, kahuna.Config{})
	ctx := context.Background()
	owner := []byte("owner-0123456789")
	before := liveHeap()
	b.ResetTimer()
	for i := range b.N {
		r, err := n.TryLock(ctx, fmt.Sprintf("bench/held/%09d", i), owner, time.Hour, kahuna.Ephemeral)
		if err != nil || r.Status != kahuna.Locked {
			b.Fatalf("lock %d: %v, %v", i, r.Status, err)
		}
	}
	b.StopTimer()
	after := liveHeap()
	if got := n.Stats().CachedEntries; got != b.N {
		b.Fatalf("%d cached entries, want %d", got, b.N)
	}
	b.ReportMetric(float64(after-before)/float64(b.N), "B/held-lock")
}

// liveHeap is the heap in use after a full collection.
func liveHeap() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
