package durability

import (
	"fmt"
	"net"
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
	benchProposeOn(b, goroutines, n)
}

var benchRuns atomic.Int64

// indexCompletion passes on the outcome and the applied index.
type indexCompletion chan [2]any

func (c indexCompletion) Committed(index uint64, err error) { c <- [2]any{index, err} }

// benchProposeOn measures G goroutines proposing to leader n, each write
// decided from the one before (the next one's base is its index).
func benchProposeOn(b *testing.B, goroutines int, n *node) {
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism((goroutines + procs - 1) / procs)
	var (
		mu      sync.Mutex
		lat     []time.Duration
		workers atomic.Int64
	)
	run := benchRuns.Add(1) // fresh resources: b.N rounds reuse the leader
	terms := make([]uint64, n.Partitions())
	for p := range terms {
		terms[p] = n.term(b, p)
	}
	before := appliedIndexes(b, n.Raft)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		id := workers.Add(1)
		p := int(id) % n.Partitions()
		r := Record{Resource: fmt.Sprintf("bench/%d/%d", run, id), Owner: []byte("owner-0123456789"), Token: 1, Locked: true, Term: terms[p]}
		c := make(indexCompletion, 1)
		local := make([]time.Duration, 0, 4096)
		for pb.Next() {
			r.Revision++
			t0 := time.Now()
			n.Propose(p, &r, c)
			res := <-c
			if err, _ := res[1].(error); err != nil {
				b.Error(err)
				return
			}
			r.Base = res[0].(uint64)
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

// BenchmarkProposeReplicated is BenchmarkPropose (G=1 and 64, K=4) against three
// on-disk replicas in this process over TCP on loopback, every partition
// led by replica 1: the backend's share of a cluster's persistent write.
//
//	go test -run '^$' -bench ProposeReplicated -benchtime 5s ./durability
func BenchmarkProposeReplicated(b *testing.B) {
	const partitions = 8
	members := tcpMembers(b)
	listeners := map[uint64]net.Listener{}
	for id, addr := range members {
		listeners[id] = bind(b, addr)
	}
	nodes := make([]*Raft, 3)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := uint64(i + 1)
			nodes[i], errs[i] = OpenRaft(RaftConfig{Dir: b.TempDir(), ReplicaID: id, Members: members, RaftAddress: members[id], Listener: listeners[id], Partitions: partitions, InitialClusterState: ClusterStateNew})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			b.Fatalf("replica %d: %v", i+1, err)
		}
	}
	b.Cleanup(func() {
		for _, n := range nodes {
			n.Close()
		}
	})
	leader := &node{Raft: nodes[0]}
	deadline := time.Now().Add(30 * time.Second)
	for p := 0; p < partitions; p++ {
		for {
			if id, _, ok := leader.LeaderID(p); ok && id == 1 {
				break
			} else if ok {
				_ = nodes[id-1].TransferLeadership(p, 1)
			}
			if time.Now().After(deadline) {
				b.Fatalf("partition %d not led by replica 1", p)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, g := range []int{1, 64} {
		b.Run(fmt.Sprintf("G=%d", g), func(b *testing.B) { benchProposeOn(b, g, leader) })
	}
}
