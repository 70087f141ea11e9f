package faults_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/checker"
	"github.com/kahunago/kahuna/faults"
	"github.com/kahunago/kahuna/internal/testcluster"
	"github.com/kahunago/kahuna/internal/testknobs"
)

// faultCluster is three nodes in this process whose links go through a
// faults.Network (testcluster: Raft over dragonboat's channel transport
// wrapped by the network, forwarding over one proxy per directed pair of
// nodes), with what the fault runs add: the reigns a run records and the
// evictions of nodes killed on the way.
type faultCluster struct {
	*testcluster.Cluster
	t          *testing.T
	net        *faults.Network
	partitions int

	fillerSeq atomic.Int64 // fillers' resource names
	// evicted counts the cache evictions of nodes killed since the start:
	// a node restarted counts from zero again (evictions).
	evicted atomic.Uint64
	// unfenced and unfencedBehind count, likewise, what nodes killed since
	// the start applied with their fence off (unfencedApplied).
	unfenced, unfencedBehind atomic.Uint64

	// reignSink, while a run records reigns (watchReigns), is told of
	// every reign a node begins, around the instant it begins.
	reignSink atomic.Pointer[func(node uint64, p int, term uint64, serve func())]
}

// serve starts a reign of node (the cluster's serve hook), through the
// sink if a run is recording.
func (c *faultCluster) serve(node uint64, p int, term uint64, serve func()) {
	if sink := c.reignSink.Load(); sink != nil {
		(*sink)(node, p, term, serve)
		return
	}
	serve()
}

// startFaultCluster starts the cluster; mod, if not nil, changes each
// node's config (the negative controls switch protections off with it).
func startFaultCluster(t *testing.T, seed uint64, partitions int, mod func(kahuna.Config) kahuna.Config) *faultCluster {
	t.Helper()
	c := &faultCluster{t: t, net: faults.NewNetwork(seed), partitions: partitions}
	c.Cluster = testcluster.Start(t, testcluster.Options{
		Partitions: partitions, Network: c.net, Channel: true, Proxies: true,
		Wait: safetyWait, OnServe: c.serve,
		Mod: func(_ uint64, cfg *kahuna.Config) {
			// Founds the cluster on the first start; every restart finds
			// its data (no test empties a node's dir). Leadership moves
			// only by the scenario or the nemesis: a balancing move would
			// drop a lease a scripted step relies on.
			cfg.LeaderBalanceCooldown = -1
			*cfg = testknobs.WithProposalTimeout(*cfg, faultProposalTimeout)
			if mod != nil {
				*cfg = mod(*cfg)
			}
		},
	})
	return c
}

// kill closes node id (calls in flight on it end with ErrClosed), as a
// crash would leave the cluster if crash.
func (c *faultCluster) kill(id uint64, crash bool) {
	n := c.Node(id)
	if n == nil {
		return
	}
	c.evicted.Add(n.Stats().Evictions)
	applied, behind := testknobs.Unfenced(n)
	c.unfenced.Add(applied)
	c.unfencedBehind.Add(behind)
	stop := c.Stop
	if crash {
		stop = c.Crash
	}
	if err := stop(id); err != nil {
		c.t.Logf("close node %d: %v", id, err)
	}
}

// unfencedApplied reports what every node since the start (those killed
// on the way included) applied with its fence off: records of a deposed
// epoch, and those of them that moved a lock behind a load of the current
// epoch (durability.Raft.Unfenced).
func (c *faultCluster) unfencedApplied() (applied, behindLoads uint64) {
	applied, behindLoads = c.unfenced.Load(), c.unfencedBehind.Load()
	for _, id := range c.Up() {
		if nd := c.Node(id); nd != nil {
			a, b := testknobs.Unfenced(nd)
			applied, behindLoads = applied+a, behindLoads+b
		}
	}
	return applied, behindLoads
}

// evictions counts the cache evictions of every node since the start,
// those of nodes killed on the way included.
func (c *faultCluster) evictions() uint64 {
	n := c.evicted.Load()
	for _, id := range c.Up() {
		if nd := c.Node(id); nd != nil {
			n += nd.Stats().Evictions
		}
	}
	return n
}

// leaderNow is the node that serves partition p as the leader its Raft
// replica knows it is, else p's leader as the first running node sees it.
func (c *faultCluster) leaderNow(p int) uint64 {
	if id := c.servingNow(p); id != 0 {
		return id
	}
	return c.Leader(p)
}

// servingNow is the node that serves and leads partition p, of the
// highest term if several say so; 0 if none does.
func (c *faultCluster) servingNow(p int) uint64 {
	var best, bestTerm uint64
	for _, id := range c.Up() {
		if n := c.Node(id); n != nil {
			if serving, leads, term := testknobs.ServingTerm(n, p); serving && leads && term > bestTerm {
				best, bestTerm = id, term
			}
		}
	}
	return best
}

// servingLeader is servingNow(p), waiting up to within (or until ctx
// ends) for a node to serve p; 0 if none does by then. A fault that stalls a
// leader's replication does nothing while the partition is between
// leaders (a new leader's takeover wait): the writes meant to pile up
// behind the stall are refused before they are proposed.
func (c *faultCluster) servingLeader(ctx context.Context, p int, within time.Duration) uint64 {
	deadline := time.Now().Add(within)
	for {
		if id := c.servingNow(p); id != 0 || ctx.Err() != nil || time.Now().After(deadline) {
			return id
		}
		time.Sleep(10 * time.Millisecond) // a reign's start sends no signal here
	}
}

// servingOf is a node that says it serves partition p (at random if
// several do: a deposed one that has not heard the news, and the new
// leader), else p's leader as a random running node sees it.
func (c *faultCluster) servingOf(p int, rng *rand.Rand) uint64 {
	up := c.Up()
	var serving []uint64
	for _, id := range up {
		if n := c.Node(id); n != nil {
			if _, s := n.Leader(p); s {
				serving = append(serving, id)
			}
		}
	}
	if len(serving) > 0 {
		return serving[rng.IntN(len(serving))]
	}
	if len(up) == 0 {
		return 0
	}
	if n := c.Node(up[rng.IntN(len(up))]); n != nil {
		l, _ := n.Leader(p)
		return l
	}
	return 0
}

// resourcesOnPartitions returns per resource names on each partition,
// partition by partition.
func (c *faultCluster) resourcesOnPartitions(prefix string, per int) []string {
	n := c.Node(c.Up()[0])
	byP := map[int][]string{}
	for i, full := 0, 0; full < c.partitions; i++ {
		r := fmt.Sprintf("%s-%d", prefix, i) // no "/": the whole name is hashed
		if p := n.Partition(r); len(byP[p]) < per {
			byP[p] = append(byP[p], r)
			if len(byP[p]) == per {
				full++
			}
		}
	}
	out := make([]string, 0, per*c.partitions)
	for p := 0; p < c.partitions; p++ {
		out = append(out, byP[p]...)
	}
	return out
}

// fillers returns n resources of partition p that no one used before: the
// nemesis writes to them, unrecorded, to fill a lane's in-flight slots (a
// resource's first TryLock is always a write).
func (c *faultCluster) fillers(node *kahuna.Node, p, n int) []string {
	var out []string
	for len(out) < n {
		r := fmt.Sprintf("filler-%d", c.fillerSeq.Add(1)) // no "/": the whole name is hashed
		if node.Partition(r) == p {
			out = append(out, r)
		}
	}
	return out
}

// reignCount counts the reigns a run recorded: in all, by partition, and
// how many were already going on when the recording began (the first
// sweep), so that a run can tell whether its faults moved any leadership.
type reignCount struct {
	total   atomic.Int64
	of      []atomic.Int64 // by partition
	initial int64          // total after the first sweep

	mu sync.Mutex
	// twoLeaders are the reigns begun while another node still served
	// the partition (its leader lease live by its own clock): two leaders
	// at once, which the takeover wait exists to prevent.
	twoLeaders []checker.Violation
	// starts are the reigns countReigns saw begin: partition and instant.
	starts []reignStart
}

// reignStart is when a reign of a partition began, as countReigns saw it.
type reignStart struct {
	partition int
	at        time.Time
}

// overlaps returns the two-leaders findings so far.
func (r *reignCount) overlaps() []checker.Violation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.twoLeaders)
}

// begun counts the reigns that began after the first sweep.
func (r *reignCount) begun() int64 { return r.total.Load() - r.initial }

// watchReigns records, until stop is closed, every reign of the
// partitions of byPartition into rec: one checker.Reign per resource of the
// partition each time a node begins to serve it in a Raft term no node
// served it in before. The nodes report each reign as it begins (the serve
// hook, whose span brackets the instant); the reigns already going on when
// it is called are found by asking every node once (a node serving while
// its Raft replica already knows another leader gives a reign of unknown
// term). That first sweep is done when it returns.
func (c *faultCluster) watchReigns(rec *checker.Recorder, byPartition map[int][]string, ephemeral, grace bool, stop <-chan struct{}) (reigns *reignCount, done <-chan struct{}) {
	var mu sync.Mutex
	seen := make([]map[uint64]bool, c.partitions)
	for p := range seen {
		seen[p] = map[uint64]bool{}
	}
	reigns = &reignCount{of: make([]atomic.Int64, c.partitions)}
	record := func(p int, node, term uint64, from, to time.Duration) {
		if _, watched := byPartition[p]; !watched {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if term != 0 && seen[p][term] {
			return
		}
		seen[p][term] = true
		for _, res := range byPartition[p] {
			if ephemeral && grace {
				rec.GraceReign(res, node, term, from, to)
			} else {
				rec.Reign(res, node, term, from, to, ephemeral)
			}
		}
		reigns.total.Add(1)
		reigns.of[p].Add(1)
	}
	sink := func(node uint64, p int, term uint64, serve func()) {
		from := rec.Now()
		serve()
		at := rec.Now()
		record(p, node, term, from, at)
		for _, o := range c.IDs() {
			if n := c.Node(o); o != node && n != nil && testknobs.ServingNow(n, p) {
				reigns.mu.Lock()
				reigns.twoLeaders = append(reigns.twoLeaders, checker.Violation{Checker: "reigns", Kind: "two-leaders-serving",
					Text: fmt.Sprintf("node %d began serving partition %d in term %d at %v while node %d still served it (its leader lease live)", node, p, term, at, o)})
				reigns.mu.Unlock()
			}
		}
	}
	c.reignSink.Store(&sink)
	for _, id := range c.IDs() {
		n := c.Node(id)
		if n == nil {
			continue
		}
		for p := range byPartition {
			from := rec.Now()
			serving, leads, term := testknobs.ServingTerm(n, p)
			switch {
			case serving && leads:
				record(p, id, term, 0, rec.Now())
			case serving:
				record(p, id, 0, from, rec.Now())
			}
		}
	}
	reigns.initial = reigns.total.Load()
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		<-stop
		c.reignSink.Store(nil)
	}()
	return reigns, ch
}

// servesAgainSeq names the fresh resources of servesAgain.
var servesAgainSeq atomic.Uint64

// servesAgain returns nil once every partition has granted a fresh lock
// (a name no one used, of durability d, asked of the running nodes in
// turn, each through its forwarding Locker) and released it, or an error
// naming the partitions that did not by within, with their last answers.
// A call that is not granted is asked again after a few milliseconds: the
// answers are what is waited on.
func (c *faultCluster) servesAgain(d kahuna.Durability, within time.Duration) error {
	deadline := time.Now().Add(within)
	names := c.resourcesOnPartitions(fmt.Sprintf("again%d", servesAgainSeq.Add(1)), 1)
	last := make([]string, len(names))
	for p := range last {
		last[p] = "no node up"
	}
	var wg sync.WaitGroup
	for p, res := range names {
		wg.Go(func() {
			for i := 0; ; i++ {
				up := c.Up()
				if len(up) > 0 {
					if n := c.Node(up[i%len(up)]); n != nil {
						ctx, cancel := context.WithTimeout(context.Background(), min(2*time.Second, time.Until(deadline)))
						r, err := n.TryLock(ctx, res, []byte("serves-again"), time.Minute, d)
						if err == nil && r.Status == kahuna.Locked {
							_, _ = n.Unlock(ctx, res, []byte("serves-again"), d)
							cancel()
							last[p] = ""
							return
						}
						cancel()
						last[p] = fmt.Sprintf("node %d: %v %v", up[i%len(up)], r.Status, err)
					}
				}
				if !time.Now().Before(deadline) {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	var missing []string
	for p, why := range last {
		if why != "" {
			missing = append(missing, fmt.Sprintf("partition %d (%s): %s", p, names[p], why))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("no fresh %s lock granted within %v of the faults' end on %s", d, within, strings.Join(missing, "; "))
	}
	return nil
}
