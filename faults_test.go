package kahuna_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/checker"
	"github.com/kahunago/kahuna/faults"
)

// The fault tests run a workload on an in-process 3-node cluster while a
// seeded schedule injects faults, then feed the history to the checkers.
//
//	go test -run Faults .                                  # the short run: a few seeds
//	go test -run Faults -faults.seed=42 -v .               # replay one seed
//	go test -run Faults -faults.duration=10m -timeout=0 .  # the long run: seeds until 10m, summary printed
var (
	faultsSeed     = flag.Uint64("faults.seed", 0, "fault tests: run only this seed (0: the default seeds, or random ones in a long run)")
	faultsDuration = flag.Duration("faults.duration", 0, "fault tests: keep running seeded schedules for this long and print a summary (0: the short run)")
	faultsRun      = flag.Duration("faults.run", 0, "fault tests: length of one seeded run (default 6s)")
	faultsDump     = flag.String("faults.dump", "", "fault tests: directory for the history (JSON and text) of every run, and porcupine's HTML of a non-linearizable one (default: a failed run's go to the test's temp dir, logged)")
)

const (
	faultTTL       = 2 * time.Second        // lease of every workload grant
	faultOpTimeout = 1 * time.Second        // a call's deadline
	faultMargin    = 50 * time.Millisecond  // lease clock vs recorder clock
	faultWarmup    = 300 * time.Millisecond // workload before the first fault
)

// faultKind is one kind of nemesis action.
type faultKind string

const (
	fKill          faultKind = "kill-restart"
	fKillLeader    faultKind = "kill-leader"
	fTransfer      faultKind = "leader-transfer"
	fIsolate       faultKind = "partition-symmetric"
	fIsolateLeader faultKind = "partition-minority-leader"
	fOneWayOut     faultKind = "partition-one-way-out"
	fOneWayIn      faultKind = "partition-one-way-in"
	fLossy         faultKind = "drop-delay"
	fPause         faultKind = "pause"
)

var allFaults = []faultKind{fKill, fKillLeader, fTransfer, fTransfer, fIsolate, fIsolateLeader, fOneWayOut, fOneWayIn, fLossy, fPause}

// faultRun is the result of one seeded run.
type faultRun struct {
	seed    uint64
	history checker.History
	report  checker.Report
	faults  map[faultKind]int
	net     struct{ dropped, delayed, stalled int64 }
}

// nemesis runs the fault schedule until ctx ends, then heals the network
// and restarts every node it killed. One fault at a time, so a majority is
// reachable between faults.
func nemesis(ctx context.Context, t *testing.T, c *faultCluster, rng *rand.Rand, kinds []faultKind, hot []int, counts map[faultKind]int, start time.Time) {
	logf := func(format string, args ...any) {
		t.Logf("%7.3fs nemesis: %s", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	sleep := func(min, max time.Duration) bool {
		d := min + time.Duration(rng.Int64N(int64(max-min)+1))
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	// hold keeps a fault for [min, max] even if ctx ends, so its effect on
	// the history is seen; it is healed right after.
	hold := func(min, max time.Duration) {
		time.Sleep(min + time.Duration(rng.Int64N(int64(max-min)+1)))
	}
	randomNode := func() uint64 { return c.ids[rng.IntN(len(c.ids))] }
	hotLeader := func() uint64 {
		if l := c.leaderOf(hot[rng.IntN(len(hot))]); l != 0 {
			return l
		}
		return randomNode()
	}
	others := func(id uint64) []uint64 {
		var o []uint64
		for _, x := range c.ids {
			if x != id {
				o = append(o, x)
			}
		}
		return o
	}
	if !sleep(faultWarmup, faultWarmup) {
		return
	}
	for ctx.Err() == nil {
		k := kinds[rng.IntN(len(kinds))]
		counts[k]++
		switch k {
		case fKill, fKillLeader:
			id := randomNode()
			if k == fKillLeader {
				id = hotLeader()
			}
			logf("%s: kill node %d", k, id)
			c.kill(id)
			hold(200*time.Millisecond, 1500*time.Millisecond)
			logf("restart node %d", id)
			if err := c.start(id); err != nil {
				t.Errorf("restart node %d: %v", id, err)
				return
			}
		case fTransfer:
			p := hot[rng.IntN(len(hot))]
			to := randomNode()
			if n := c.node(c.leaderOf(p)); n != nil {
				logf("transfer partition %d to node %d", p, to)
				_ = n.TransferLeadership(p, to) // may be refused mid-election
			}
		case fIsolate, fIsolateLeader, fOneWayOut, fOneWayIn, fPause:
			id := randomNode()
			if k == fIsolateLeader || (k != fIsolate && rng.IntN(2) == 0) {
				id = hotLeader()
			}
			out, in := k != fOneWayIn, k != fOneWayOut
			logf("%s: node %d (out=%v in=%v)", k, id, out, in)
			c.net.Isolate(id, others(id), out, in)
			if k == fPause {
				// Frozen longer than a lease: its peers' view of it expires.
				hold(faultTTL+200*time.Millisecond, faultTTL+800*time.Millisecond)
			} else {
				hold(300*time.Millisecond, 2500*time.Millisecond)
			}
			if k != fPause && rng.IntN(2) == 0 {
				c.net.ResetProxies(id) // broken connections rather than stalled ones
			}
			logf("heal")
			c.net.Heal()
		case fLossy:
			l := faults.Link{Drop: 0.05 + rng.Float64()*0.25, Delay: time.Duration(rng.IntN(20)) * time.Millisecond}
			logf("lossy links: %s", l)
			c.net.SetAll(c.ids, l)
			hold(500*time.Millisecond, 2500*time.Millisecond)
			logf("heal")
			c.net.Heal()
		}
		if !sleep(200*time.Millisecond, 800*time.Millisecond) {
			break
		}
	}
	c.net.Heal()
	for _, id := range c.ids {
		if c.node(id) == nil {
			if err := c.start(id); err != nil {
				t.Errorf("final restart of node %d: %v", id, err)
			}
		}
	}
}

// lockClient is one sequential client of the workload: it cycles acquire
// (→ extend) → release on the hot resources with a fresh owner per cycle.
// A direct client calls the partition's leader (as it sees it) on the
// leader's own Locker, which never forwards: a MustRetry from it promises the
// request was not committed, so it is a definite failure. A forwarding client
// calls a node that does not lead the partition, so every call crosses the
// forwarding link, and a MustRetry may hide a request that got through.
type lockClient struct {
	id      int
	forward bool
	c       *faultCluster
	rec     *checker.Recorder
	rng     *rand.Rand
	d       kahuna.Durability
}

// pick chooses the node to call for res, or 0 if none is up: the
// partition's leader as the cluster sees it for a direct call, another node
// for a forwarded one.
func (cl *lockClient) pick(res string, forward bool) uint64 {
	up := cl.c.up()
	if len(up) == 0 {
		return 0
	}
	n := cl.c.node(up[0])
	if n == nil {
		return 0
	}
	leader := cl.c.leaderOf(n.Partition(res))
	var candidates []uint64
	for _, id := range up {
		if (id == leader) != forward {
			candidates = append(candidates, id)
		}
	}
	if len(candidates) == 0 {
		candidates = up
	}
	return candidates[cl.rng.IntN(len(candidates))]
}

// call runs one recorded operation, forwarded or direct.
func (cl *lockClient) call(kind checker.Kind, res, owner string, ttl time.Duration, forward bool) checker.Op {
	id := cl.pick(res, forward)
	n := cl.c.node(id)
	if n == nil {
		time.Sleep(10 * time.Millisecond)
		return checker.Op{Outcome: checker.Fail, Status: kahuna.MustRetry} // nothing sent
	}
	var l kahuna.Locker = n
	if !forward {
		l = n.Local()
	}
	ctx, cancel := context.WithTimeout(context.Background(), faultOpTimeout)
	defer cancel()
	p := cl.rec.Begin(checker.Op{Client: cl.id, Node: id, Kind: kind, Resource: res, Owner: owner, TTL: ttl})
	var (
		r    kahuna.Result
		info kahuna.LockInfo
		err  error
	)
	switch kind {
	case checker.Acquire:
		r, err = l.TryLock(ctx, res, []byte(owner), ttl, cl.d)
	case checker.Extend:
		r, err = l.Extend(ctx, res, []byte(owner), ttl, cl.d)
	case checker.Release:
		r, err = l.Unlock(ctx, res, []byte(owner), cl.d)
	default:
		info, r, err = l.Get(ctx, res, cl.d)
	}
	outcome := checker.Classify(r.Status, err)
	if err == nil && r.Status == kahuna.MustRetry && !forward {
		outcome = checker.Fail
	}
	return p.EndOutcome(outcome, r.Status, r.FencingToken, string(info.Owner), err)
}

// settle tries to make an operation's outcome known. A forwarding client
// tries once through the forwarding link, then, like every client, directly
// on the leader. It retries while the answer is a definite MustRetry
// (nothing happened) and stops at the first definite answer, or at an
// unknown outcome of a direct attempt: the client then gives the owner up
// (its lease lapses on its own). So each owner has at most a few operations
// of unknown outcome, which keeps the linearizability search small; a
// client that kept retrying one owner through a long stall would leave
// dozens, each of which may take effect at any later time.
//
// uncertain reports whether an attempt may have taken effect unseen.
func (cl *lockClient) settle(kind checker.Kind, res, owner string, ttl time.Duration, attempts int) (op checker.Op, uncertain bool) {
	for i := 0; i < attempts; i++ {
		forward := cl.forward && i == 0
		op = cl.call(kind, res, owner, ttl, forward)
		if op.Outcome == checker.Indeterminate {
			uncertain = true
			if !forward {
				return op, true
			}
		} else if op.Status != kahuna.MustRetry {
			return op, uncertain
		}
		time.Sleep(time.Duration(5+cl.rng.IntN(20)) * time.Millisecond)
	}
	return op, uncertain
}

func (cl *lockClient) run(stop <-chan struct{}, hot []string) {
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		res := hot[cl.rng.IntN(len(hot))]
		owner := fmt.Sprintf("c%d-%d", cl.id, n)
		if cl.rng.IntN(10) == 0 {
			cl.call(checker.Get, res, "", 0, cl.forward)
		}
		a, uncertain := cl.settle(checker.Acquire, res, owner, faultTTL, 10)
		if a.Outcome != checker.OK {
			if uncertain {
				cl.settle(checker.Release, res, owner, 0, 20) // in case it was granted
				// Back off, as a client seeing timeouts would.
				time.Sleep(time.Duration(50+cl.rng.IntN(100)) * time.Millisecond)
			} else {
				time.Sleep(time.Duration(cl.rng.IntN(5)) * time.Millisecond)
			}
			continue
		}
		// Hold: the critical section, sometimes extended.
		for i := cl.rng.IntN(3); i > 0; i-- {
			time.Sleep(time.Duration(cl.rng.IntN(15)) * time.Millisecond)
			if e := cl.call(checker.Extend, res, owner, faultTTL, cl.forward); e.Status != kahuna.Extended {
				break
			}
		}
		time.Sleep(time.Duration(cl.rng.IntN(15)) * time.Millisecond)
		cl.settle(checker.Release, res, owner, 0, 20)
	}
}

// runFaults runs one seeded schedule of length d on a fresh cluster.
func runFaults(t *testing.T, seed uint64, d time.Duration, dur kahuna.Durability, kinds []faultKind) faultRun {
	replay := "TestFaults$"
	if dur == kahuna.Ephemeral {
		replay = "TestFaultsNegativeControlEphemeral"
	}
	t.Logf("seed %d (replay: go test -run '%s' -faults.seed=%d -faults.run=%v .)", seed, replay, seed, d)
	const partitions = 3
	c := startFaultCluster(t, seed, partitions)
	hot := c.resourcesOnPartitions(fmt.Sprintf("hot%d", seed))
	hotParts := []int{}
	for _, r := range hot {
		hotParts = append(hotParts, c.node(c.up()[0]).Partition(r))
	}
	rec := checker.NewRecorder()
	start := time.Now()
	run := faultRun{seed: seed, faults: map[faultKind]int{}}

	stopClients := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		cl := &lockClient{id: i, forward: i%3 == 2, c: c, rec: rec, rng: rand.New(rand.NewPCG(seed, uint64(i)+100)), d: dur}
		wg.Add(1)
		go func() { defer wg.Done(); cl.run(stopClients, hot) }()
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	nemesis(ctx, t, c, rand.New(rand.NewPCG(seed, 1)), kinds, hotParts, run.faults, start)
	cancel()
	// A healthy tail: the cluster must serve again after the faults.
	time.Sleep(500 * time.Millisecond)
	close(stopClients)
	wg.Wait()
	run.net.dropped, run.net.delayed, run.net.stalled = c.net.Dropped.Load(), c.net.Delayed.Load(), c.net.Stalled.Load()
	c.close() // the checkers get the CPU

	run.history = rec.History()
	opts := checker.Options{Margin: faultMargin, Timeout: 2 * time.Minute}
	dump := *faultsDump
	if dump == "" {
		dump = t.TempDir()
	}
	opts.VisualizePath = filepath.Join(dump, fmt.Sprintf("faults-%d.html", seed))
	run.report = checker.Check(run.history, opts)
	t.Logf("seed %d: %d ops (%d ok, %d fail, %d indeterminate), %d hold windows, faults %v, raft batches dropped %d, delayed %d, forwarded chunks stalled %d; linearizability %s in %v",
		seed, run.report.Stats.Ops, run.report.Stats.OK, run.report.Stats.Fail, run.report.Stats.Indeterminate,
		run.report.HoldWindows, fmtCounts(run.faults), run.net.dropped, run.net.delayed, run.net.stalled,
		run.report.Linearizable.Result, run.report.Linearizable.Elapsed.Round(time.Millisecond))
	if run.report.Violations() > 0 || *faultsDump != "" {
		path := filepath.Join(dump, fmt.Sprintf("faults-%d.history", seed))
		js, _ := json.Marshal(run.history)
		if os.WriteFile(path+".txt", []byte(run.history.String()), 0o644) == nil && os.WriteFile(path+".json", js, 0o644) == nil {
			t.Logf("seed %d: history in %s.{txt,json}, porcupine visualization (if not linearizable) in %s", seed, path, opts.VisualizePath)
		}
	}
	return run
}

func fmtCounts(m map[faultKind]int) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// requireClean fails the test on any violation and on an empty run.
func requireClean(t *testing.T, run faultRun) {
	t.Helper()
	if err := run.report.Err(); err != nil {
		t.Errorf("seed %d: violations:\n%v", run.seed, err)
	}
	if run.report.HoldWindows < 20 {
		t.Errorf("seed %d: only %d definite grants: an empty test is not a pass", run.seed, run.report.HoldWindows)
	}
}

// TestFaults is the short run: a few seeded schedules of every fault kind
// on persistent locks; the history must pass every checker.
func TestFaults(t *testing.T) {
	if *faultsDuration > 0 {
		t.Skip("long run: see TestFaultsLong")
	}
	if testing.Short() {
		t.Skip("fault schedules take half a minute")
	}
	d := *faultsRun
	if d == 0 {
		d = 6 * time.Second
	}
	seeds := []uint64{1, 2, 3}
	if *faultsSeed != 0 {
		seeds = []uint64{*faultsSeed}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			requireClean(t, runFaults(t, seed, d, kahuna.Persistent, allFaults))
		})
	}
}

// TestFaultsLong runs seeded schedules until -faults.duration is spent and
// prints a summary: runs, operations, faults, violations.
func TestFaultsLong(t *testing.T) {
	if *faultsDuration == 0 {
		t.Skip("set -faults.duration (e.g. 10m) for the long run")
	}
	d := *faultsRun
	if d == 0 {
		d = 6 * time.Second
	}
	seed := *faultsSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano()) % 1_000_000
	}
	var (
		runs, ops, indeterminate, windows, violations, failedRuns int
		faultsTotal                                               = map[faultKind]int{}
		dropped, stalled                                          int64
		failed                                                    []uint64
		controls, caught                                          int
	)
	deadline := time.Now().Add(*faultsDuration)
	for ; time.Now().Before(deadline); seed++ {
		var run faultRun
		ok := t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			run = runFaults(t, seed, d, kahuna.Persistent, allFaults)
			requireClean(t, run)
		})
		runs++
		ops += run.report.Stats.Ops
		indeterminate += run.report.Stats.Indeterminate
		windows += run.report.HoldWindows
		violations += run.report.Violations()
		dropped += run.net.dropped
		stalled += run.net.stalled
		for k, v := range run.faults {
			faultsTotal[k] += v
		}
		if !ok {
			failedRuns++
			failed = append(failed, seed)
		}
		// Every tenth seed also runs the negative control, which must be
		// caught every time.
		if runs%10 == 0 {
			controls++
			if t.Run(fmt.Sprint("control/seed=", seed), func(t *testing.T) { negativeControl(t, seed) }) {
				caught++
			}
		}
	}
	total := 0
	for _, v := range faultsTotal {
		total += v
	}
	summary := fmt.Sprintf("faults summary: %d runs of %v, %d operations (%d indeterminate), %d definite hold windows, %d faults injected (%s), %d raft batches dropped, %d forwarded chunks stalled, %d violations, %d failed runs %v; negative controls caught %d of %d",
		runs, d, ops, indeterminate, windows, total, fmtCounts(faultsTotal), dropped, stalled, violations, failedRuns, failed, caught, controls)
	t.Log(summary)
	fmt.Println(summary)
}

// TestFaultsNegativeControlEphemeral runs the workload on ephemeral locks
// with leader transfers: tokens restart at 0 on the new leader (documented
// for ephemeral locks), which the fencing checker must flag every time.
func TestFaultsNegativeControlEphemeral(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster run")
	}
	seed := uint64(101)
	if *faultsSeed != 0 {
		seed = *faultsSeed
	}
	negativeControl(t, seed)
}

func negativeControl(t *testing.T, seed uint64) {
	run := runFaults(t, seed, 4*time.Second, kahuna.Ephemeral, []faultKind{fTransfer})
	if run.report.HoldWindows < 20 {
		t.Fatalf("only %d grants", run.report.HoldWindows)
	}
	kinds := map[string]int{}
	for _, v := range run.report.Fencing {
		kinds[v.Kind]++
	}
	t.Logf("fencing checker on ephemeral locks across %d transfers: %d violations %v; exclusion %d; linearizability %s",
		run.faults[fTransfer], len(run.report.Fencing), kinds, len(run.report.Exclusion), run.report.Linearizable.Result)
	if len(run.report.Fencing) == 0 {
		t.Fatal("the fencing checker missed ephemeral tokens restarting across leader changes")
	}
	if run.report.Linearizable.Result == checker.Linearizable {
		t.Error("the linearizability checker missed ephemeral tokens restarting across leader changes")
	}
	for _, v := range run.report.Fencing {
		if v.Kind == "token-went-backwards" {
			t.Logf("e.g. %v", v)
			break
		}
	}
}
