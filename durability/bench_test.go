package durability

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkPropose: G goroutines (64, and 512 for a loaded node), each
// proposing its own resource and waiting for the outcome, against one
// on-disk node with 8 partitions. K is the number of proposals in flight
// per partition.
func BenchmarkPropose(b *testing.B) {
	for _, g := range []int{64, 512} {
		for _, k := range []int{1, 2, 4} {
			b.Run(fmt.Sprintf("G=%d/K=%d", g, k), func(b *testing.B) {
				benchPropose(b, g, RaftConfig{Dir: b.TempDir(), inFlight: k})
			})
		}
	}
}

func benchPropose(b *testing.B, goroutines int, cfg RaftConfig) {
	n := openNode(b, cfg)
	n.awaitSelfLeader(b)
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism((goroutines + procs - 1) / procs)
	var (
		mu      sync.Mutex
		lat     []time.Duration
		workers atomic.Int64
	)
	before := appliedIndexes(b, n.Raft)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		id := workers.Add(1)
		p := int(id) % n.Partitions()
		r := Record{Resource: fmt.Sprintf("bench/%d", id), Owner: []byte("owner-0123456789"), Token: 1, Locked: true}
		c := make(chanCompletion, 1)
		local := make([]time.Duration, 0, 4096)
		for pb.Next() {
			r.Revision++
			t0 := time.Now()
			n.Propose(p, &r, c)
			if err := <-c; err != nil {
				b.Error(err)
				return
			}
			local = append(local, time.Since(t0))
		}
		mu.Lock()
		lat = append(lat, local...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	var entries uint64
	for p, idx := range appliedIndexes(b, n.Raft) {
		entries += idx - before[p]
	}
	slices.Sort(lat)
	if len(lat) == 0 {
		return
	}
	pct := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))]) / 1e6 }
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "ops/s")
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	if entries > 0 {
		b.ReportMetric(float64(len(lat))/float64(entries), "recs/entry")
	}
}
