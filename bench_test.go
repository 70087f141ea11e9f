package kahuna_test

import (
	"context"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/lease"
)

// BenchmarkLockOp measures one lock op = TryLock + Unlock of a random key
// out of 10,000, from 64 concurrent callers, against:
//   - mutex: a mutex-guarded map deciding with the same lease rules (the
//     physical limit on this machine, no actors, no Raft);
//   - ephemeral: the embedded node, in-memory locks;
//   - persistent: the embedded node on disk (b.TempDir()), every grant and
//     release committed through Raft and applied to badger.
//
// It reports ops/s and the p50/p99 latency of a whole lock op.
//
//	go test -run '^$' -bench LockOp -benchtime 5s .
func BenchmarkLockOp(b *testing.B) {
	const keys = 10_000
	names := make([]string, keys)
	for i := range names {
		// No '/': the whole name is hashed, so the keys spread over every
		// partition (as kahuna-bench's do), not one.
		names[i] = "bench:" + strconv.Itoa(i)
	}
	b.Run("mutex", func(b *testing.B) { benchLockOp(b, newMutexLocker(), kahuna.Ephemeral, names) })
	b.Run("ephemeral", func(b *testing.B) {
		benchLockOp(b, openNode(b, kahuna.Config{}), kahuna.Ephemeral, names)
	})
	b.Run("persistent", func(b *testing.B) {
		n := openNode(b, kahuna.Config{DataDir: b.TempDir()})
		before := n.Stats()
		benchLockOp(b, n, kahuna.Persistent, names)
		reportRaft(b, before, n.Stats())
	})
}

// reportRaft reports where the persistent writes between two Stats spent
// their time, per Raft entry: records it carried, µs waiting for a
// proposal slot, µs from proposal to outcome (append and fsync, commit,
// apply).
func reportRaft(b *testing.B, before, after kahuna.Stats) {
	entries := float64(after.RaftProposals - before.RaftProposals)
	if entries == 0 {
		return
	}
	b.ReportMetric(float64(after.RaftRecords-before.RaftRecords)/entries, "records/entry")
	b.ReportMetric(float64((after.RaftWait-before.RaftWait).Microseconds())/entries, "wait-µs/entry")
	b.ReportMetric(float64((after.RaftCommit-before.RaftCommit).Microseconds())/entries, "raft-µs/entry")
}

func benchLockOp(b *testing.B, l kahuna.Locker, d kahuna.Durability, names []string) {
	const callers = 64
	b.SetParallelism(max(1, callers/runtime.GOMAXPROCS(0)))
	var mu sync.Mutex
	total := &histogram{}
	var owners sync.Map
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		h := &histogram{}
		owner := kahuna.NewOwner()
		owners.Store(string(owner), true)
		rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
		for pb.Next() {
			key := names[rng.IntN(len(names))]
			t0 := time.Now()
			r, err := l.TryLock(ctx, key, owner, 30*time.Second, d)
			if err != nil {
				b.Error(err)
				return
			}
			if r.Status == kahuna.Locked {
				if r, err := l.Unlock(ctx, key, owner, d); err != nil || r.Status != kahuna.Unlocked {
					b.Errorf("unlock: %v %v", r.Status, err)
					return
				}
			} else if r.Status != kahuna.Busy {
				b.Errorf("lock: %v", r.Status)
				return
			}
			h.record(time.Since(t0))
		}
		mu.Lock()
		total.merge(h)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	reportLockOps(b, elapsed, total)
}

// mutexLocker is the baseline: one map behind one mutex, same lease rules.
type mutexLocker struct {
	kahuna.Locker
	mu      sync.Mutex
	entries map[string]*lease.Entry
}

func newMutexLocker() *mutexLocker { return &mutexLocker{entries: map[string]*lease.Entry{}} }

func (m *mutexLocker) apply(op lease.Op, resource string, owner []byte, ttl time.Duration) kahuna.Result {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entries[resource]
	if e == nil {
		e = &lease.Entry{}
		m.entries[resource] = e
	}
	d := lease.Decide(*e, op, owner, ttl, now)
	if d.Write {
		if op == lease.TryLock {
			d.Next.Owner = append([]byte(nil), owner...)
		}
		*e = d.Next
	}
	return kahuna.Result{Status: d.Status, FencingToken: d.Token}
}

func (m *mutexLocker) TryLock(_ context.Context, resource string, owner []byte, ttl time.Duration, _ kahuna.Durability) (kahuna.Result, error) {
	return m.apply(lease.TryLock, resource, owner, ttl), nil
}

func (m *mutexLocker) Unlock(_ context.Context, resource string, owner []byte, _ kahuna.Durability) (kahuna.Result, error) {
	return m.apply(lease.Unlock, resource, owner, 0), nil
}

// histogram buckets durations log-linearly (16 sub-buckets per power of
// two, ≤ 6% error): enough for p50/p99 without keeping every sample.
type histogram struct {
	counts [64 * 16]uint64
	n      uint64
}

func bucketOf(ns uint64) int {
	if ns < 16 {
		return int(ns)
	}
	e := bits.Len64(ns) - 5 // keep the top 5 bits
	return (e+1)*16 + int(ns>>e) - 16
}

func bucketValue(i int) uint64 {
	if i < 16 {
		return uint64(i)
	}
	e := i/16 - 1
	return uint64(i%16+16) << e
}

func (h *histogram) record(d time.Duration) {
	h.counts[bucketOf(uint64(max(d, 0)))]++
	h.n++
}

// reportLockOps reports the throughput and the p50/p99 latency of b's
// lock ops, whose latencies total holds.
func reportLockOps(b *testing.B, elapsed time.Duration, total *histogram) {
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	b.ReportMetric(float64(total.quantile(0.50))/1e3, "p50-µs")
	b.ReportMetric(float64(total.quantile(0.99))/1e3, "p99-µs")
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

func (h *histogram) quantile(q float64) uint64 {
	target := uint64(q * float64(h.n))
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen > target {
			return bucketValue(i)
		}
	}
	return 0
}

func TestHistogramQuantiles(t *testing.T) {
	h := &histogram{}
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}} {
		got := time.Duration(h.quantile(c.q))
		if got < c.want*94/100 || got > c.want*106/100 {
			t.Errorf("q%.2f = %v, want %v ±6%%", c.q, got, c.want)
		}
	}
}

// BenchmarkLockActors is how DefaultLockActors was chosen: the ephemeral
// lock op for several ring sizes.
//
//	go test -run '^$' -bench LockActors -benchtime 3s .
func BenchmarkLockActors(b *testing.B) {
	names := make([]string, 10_000)
	for i := range names {
		names[i] = "bench:" + strconv.Itoa(i)
	}
	for _, actors := range []int{1, 2, 4, 8, 32} {
		b.Run("actors="+strconv.Itoa(actors), func(b *testing.B) {
			benchLockOp(b, openNode(b, kahuna.Config{LockActors: actors}), kahuna.Ephemeral, names)
		})
	}
}
