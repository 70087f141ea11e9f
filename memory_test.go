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

// BenchmarkWaitingLockMemory is what a waiting Lock costs: b.N Locks from
// one client over kahuna's framing wait on 100 held locks of a node served
// on loopback (at most 8,192: two LockStreams of MaxLocksPerStream), and
// the goroutines, goroutine stacks and live heap of the process (client
// and node together) are measured before and once all wait. The
// client's callers park one goroutine each, so node goroutines per Lock
// is the goroutines added beyond b.N.
//
//	go test -run '^$' -bench WaitingLockMemory -benchtime 4000x .
func BenchmarkWaitingLockMemory(b *testing.B) {
	if b.N > 8192 {
		b.Skip("over the Locks two LockStreams carry: the rest would be unary calls")
	}
	n := openNode(b, kahuna.Config{ListenAddress: "127.0.0.1:0"})
	c, err := kahuna.Dial(context.Background(), []string{"http://" + n.ListenAddress()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	const held = 100
	for i := range held {
		if r, err := c.TryLock(ctx, fmt.Sprintf("bench/wait/%d", i), []byte("holder"), time.Hour, kahuna.Ephemeral); err != nil || r.Status != kahuna.Locked {
			b.Fatalf("hold %d: %+v, %v", i, r, err)
		}
	}
	var ms runtime.MemStats
	heap0, goroutines0 := liveHeap(), runtime.NumGoroutine()
	runtime.ReadMemStats(&ms)
	stack0 := ms.StackInuse
	b.ResetTimer()
	done := make(chan struct{}, b.N)
	for i := range b.N {
		go func() {
			defer func() { done <- struct{}{} }()
			_, _ = c.Lock(ctx, fmt.Sprintf("bench/wait/%d", i%held), []byte(fmt.Sprint("waiter-", i)), time.Hour, kahuna.WaitForever, kahuna.Ephemeral)
		}()
	}
	for deadline := time.Now().Add(time.Minute); n.Stats().Waiters < b.N; {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d Locks waiting after a minute", n.Stats().Waiters, b.N)
		}
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	heap1, goroutines1 := liveHeap(), runtime.NumGoroutine()
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(goroutines1-goroutines0-b.N)/float64(b.N), "node-goroutines/Lock")
	b.ReportMetric(float64(int64(ms.StackInuse)-int64(stack0))/float64(b.N), "stack-B/Lock")
	b.ReportMetric(float64(heap1-heap0)/float64(b.N), "heap-B/Lock")
	cancel()
	for range b.N {
		<-done
	}
}
