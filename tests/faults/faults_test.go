package faults_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/checker"
	"github.com/kahunago/kahuna/faults"
	"github.com/kahunago/kahuna/internal/testknobs"
)

// The fault tests run a workload on an in-process 3-node cluster while a
// seeded schedule injects faults, then feed the history to the checkers.
// Seeds with seed%3 == 2 run on ephemeral locks, the others on persistent
// ones.
//
//	go test -run Faults ./tests/faults                                  # the short run: a few seeds and the negative controls
//	go test -run 'Faults$' -v ./tests/faults -faults.seed=42            # replay one seed
//	go test -run Faults -timeout=0 ./tests/faults -faults.duration=10m  # the long run: seeds until 10m, summary printed
var (
	faultsSeed      = flag.Uint64("faults.seed", 0, "fault tests: run only this seed (0: the default seeds, or random ones in a long run)")
	faultsDuration  = flag.Duration("faults.duration", 0, "fault tests: keep running seeded schedules for this long and print a summary (0: the short run)")
	faultsRun       = flag.Duration("faults.run", 0, "fault tests: length of one seeded run (default 6s)")
	faultsMustRetry = flag.String("faults.mustretry", "no-effect", "fault tests: what a MustRetry answer (without an error) proves: no-effect (certainly not applied) or unknown (as before the fence: a forwarded request may have applied)")
	faultsKinds     = flag.String("faults.kinds", "", "fault tests: comma-separated fault kinds of TestFaults and TestFaultsLong (default: all)")
	faultsDump      = flag.String("faults.dump", "", "fault tests: directory for the history (JSON and text) of every run, and porcupine's HTML of a non-linearizable one (default: a failed run's go to the system's temp dir and stay there, logged)")
)

const (
	faultTTL = 2 * time.Second // lease of every workload grant
	// faultOpTimeout is a call's deadline: longer than any fault lasts
	// (a pause, a partition, a proposal's timeout), so an answer that comes
	// late is observed rather than excused as unknown.
	faultOpTimeout = 10 * time.Second
	faultMargin    = 50 * time.Millisecond  // lease clock vs recorder clock
	faultWarmup    = 300 * time.Millisecond // workload before the first fault
	faultTail      = 500 * time.Millisecond // workload after the last fault
	// servesAgainWithin bounds the wait for a fresh lock on every
	// partition once the faults are over: generous next to an election,
	// a restart and the grace (a TTL of faultTTL to wait out).
	servesAgainWithin = 20 * time.Second
)

// faultKind is one kind of nemesis action.
type faultKind string

const (
	fKill       faultKind = "kill-restart"
	fKillLeader faultKind = "kill-leader"
	// fCrashLeader stops a hot partition's leader as a crash would: it
	// hands nothing over to the next leader (a kill closes cleanly, and
	// hands its ephemeral leases over), then restarts it.
	fCrashLeader   faultKind = "crash-leader"
	fTransfer      faultKind = "leader-transfer"
	fIsolate       faultKind = "partition-symmetric"
	fIsolateLeader faultKind = "partition-minority-leader"
	fOneWayOut     faultKind = "partition-one-way-out"
	fOneWayIn      faultKind = "partition-one-way-in"
	fLossy         faultKind = "drop-delay"
	// fPause freezes a node, mostly a hot partition's leader, as SIGSTOP
	// would (PauseNode: calls wait at its door, its view of who
	// leads is frozen) and cuts its Raft and forwarding links both ways,
	// for longer than an election and than the leader lease, a third of the
	// time longer than a lock's TTL. It then wakes up: the held calls are
	// answered at once, before its view catches up (a process that wakes
	// still believes it leads), while it is still cut off or, half the
	// time, once its Raft already follows the new leader.
	fPause faultKind = "pause"
	// fSlowTransfer slows every link of a hot partition's leader (Raft
	// batches and forwarded bytes wait up to tens of milliseconds), so
	// proposals pile up behind those in flight, then moves the leadership
	// away while they are queued.
	fSlowTransfer faultKind = "slow-leader-transfer"
	// fStallReplication stalls a hot partition's leader L's replication of
	// the partition (faults.Network.StallReplication: its heartbeats pass,
	// so it keeps leading and keeps its lease, and nothing it proposes
	// commits) and fills L's group-commit lane with writes to other
	// resources of the partition (not recorded), so that its in-flight
	// slots are taken and the workload's writes, decided by L while it
	// legitimately leads, wait in the lane. Then L is cut off, another node
	// takes the partition over and serves it, and the network heals before
	// L's in-flight proposals time out (faultProposalTimeout): the records
	// still queued are then sent (fenced: failed, as L no longer leads
	// their term) while L follows the new leader, which would append them
	// (a deposed leader's queued write).
	fStallReplication faultKind = "stall-replication"
	// fStallHandOff stalls a hot partition's leader L's replication of the
	// partition, as fStallReplication does, until a holder's Unlock on the
	// partition is answered Errored (a handle client's: the lock was handed
	// to its head waiter in the Unlock's own record, whose proposal timed
	// out: the waiter may hold the lock), and resumes it a little later,
	// before the next record's proposal times out: L still leads, and the
	// stuck records commit. The waiter,
	// decided again from the record as it was (the holder's lease run
	// out), is granted again in a record of its own, which the fence
	// refuses once the first commits: it must be told Errored, not
	// MustRetry, or its handle counts its lease from its next attempt and
	// holds it past the server's end. Not in allFaults: run with handle
	// clients that hold their locks to the end (handleOpts.full).
	fStallHandOff faultKind = "stall-handoff"
	// fTransferUnrelinquished moves a hot partition's leadership away
	// from its leader L without L dropping its lease first
	// (TransferUnrelinquished), L's inbound links cut as its TimeoutNow leaves, so that it goes on
	// believing it leads and hears nothing of the election: what a
	// transfer forwarded to a leader with a live lease, or a paused
	// target's late TimeoutNow, does. The target must wait L's lease out
	// before it serves (the takeover wait). The links heal once L's lease
	// has surely run out. Not in allFaults: the takeover-wait-off control
	// and its clean twin run it.
	fTransferUnrelinquished faultKind = "transfer-unrelinquished"
)

// faultProposalTimeout bounds a Raft proposal in the fault cluster (the
// default is 5 s): a stalled leader's proposals give way within a run.
const faultProposalTimeout = time.Second

var allFaults = []faultKind{fKill, fKillLeader, fCrashLeader, fTransfer, fSlowTransfer, fIsolate, fIsolateLeader, fOneWayOut, fOneWayIn, fLossy, fPause, fPause, fPause, fStallReplication}

// scheduleKinds is allFaults, or the kinds -faults.kinds names.
func scheduleKinds(t *testing.T) []faultKind {
	if *faultsKinds == "" {
		return allFaults
	}
	var ks []faultKind
	for _, k := range strings.Split(*faultsKinds, ",") {
		if !slices.Contains(allFaults, faultKind(k)) {
			t.Fatalf("-faults.kinds: unknown kind %q (kinds: %v)", k, allFaults)
		}
		ks = append(ks, faultKind(k))
	}
	return ks
}

// faultRun is the result of one seeded run.
type faultRun struct {
	seed    uint64
	dur     kahuna.Durability
	history checker.History
	report  checker.Report
	faults  map[faultKind]int // scheduled
	effects faultEffects      // what the scheduled faults did
	reigns  int64
	// begun counts the reigns that began during the run (not those going
	// on when it started).
	begun int64
	late  int // definite answers that took longer than a second
	net   struct{ dropped, delayed, stalled, held int64 }
	// evictions counts the cache entries the nodes evicted over the run (those of nodes killed on the way included).
	evictions uint64
	// unfenced counts the records of a deposed leader's epoch applied
	// over the run because the fence was off (faultCluster.unfencedApplied).
	unfenced uint64
	// unfencedBehind counts those that move the lock (releases and grants)
	// applied on a node that had loaded their resource in the partition's
	// new epoch (faultCluster.unfencedApplied).
	unfencedBehind uint64
	handles        *handleStats // what the handle clients saw
}

// faultEffects is what a run's faults did, as seen from outside the nodes.
type faultEffects struct {
	reigns *reignCount
	// Leader transfers (fTransfer, fSlowTransfer, fTransferUnrelinquished):
	// asked of the leader, refused, accepted, and of those accepted the
	// ones after which the partition had a new reign before the next fault
	// began (or the cluster was found serving again at the end).
	transfers, transfersRefused, transfersAccepted, transfersMoved int
	pending                                                        func() // checks the last accepted transfer
}

// transferred counts a transfer of p asked of its leader, err its answer,
// and, if accepted, arranges for the next check to see whether p had a new
// reign since.
func (e *faultEffects) transferred(p int, err error) {
	e.settle()
	e.transfers++
	if err != nil {
		e.transfersRefused++
		return
	}
	e.transfersAccepted++
	before := e.reigns.of[p].Load()
	e.pending = func() {
		if e.reigns.of[p].Load() > before {
			e.transfersMoved++
		}
	}
}

// settle checks the last accepted transfer, if it was not yet.
func (e *faultEffects) settle() {
	if e.pending != nil {
		e.pending()
		e.pending = nil
	}
}

func (e faultEffects) String() string {
	return fmt.Sprintf("transfers asked %d, refused %d, accepted %d, followed by a new reign %d",
		e.transfers, e.transfersRefused, e.transfersAccepted, e.transfersMoved)
}

// leaderFaults are the kinds of fault that move a hot partition's
// leadership (most of the time: a pause may hit a follower).
var leaderFaults = []faultKind{fKillLeader, fCrashLeader, fTransfer, fSlowTransfer, fTransferUnrelinquished, fIsolateLeader, fPause, fStallReplication}

// netFaults are the kinds of fault that cut, drop or stall messages.
var netFaults = []faultKind{fIsolate, fIsolateLeader, fOneWayOut, fOneWayIn, fLossy, fPause, fStallReplication, fTransferUnrelinquished}

// faultsMissed says which of run's scheduled faults took no effect: no
// transfer accepted, or none of several followed by a new reign, no reign begun at all
// though faults that move leaders were scheduled, no message cut or held
// though faults that cut links were. Empty: the faults happened.
func faultsMissed(run faultRun) []string {
	var why []string
	n := func(kinds ...faultKind) (sum int) {
		for _, k := range kinds {
			sum += run.faults[k]
		}
		return sum
	}
	// A Raft leader transfer is best effort: one whose target lags is
	// aborted after an election timeout, so a lone accepted transfer may
	// move nothing; of two or more, one must have.
	e := run.effects
	if k := n(fTransfer, fSlowTransfer, fTransferUnrelinquished); k > 0 && (e.transfersAccepted == 0 || e.transfersAccepted >= 2 && e.transfersMoved == 0) {
		why = append(why, fmt.Sprintf("%d transfers scheduled, but %s", k, run.effects))
	}
	// A transfer that moved nothing (aborted) is not a fault that moved
	// leaders.
	unmoved := e.transfersAccepted - e.transfersMoved
	if k := n(leaderFaults...) - unmoved; k > 0 && run.begun == 0 {
		why = append(why, fmt.Sprintf("%d faults that move leaders scheduled, but no reign began", k))
	}
	if k := n(netFaults...); k > 0 && run.net.dropped+run.net.stalled+run.net.held == 0 {
		why = append(why, fmt.Sprintf("%d faults that cut links scheduled, but no message was dropped, stalled or held", k))
	}
	if k := n(fStallReplication, fStallHandOff); k > 0 && run.net.held == 0 {
		why = append(why, fmt.Sprintf("%d stalled replications scheduled, but no Replicate message was held", k))
	}
	return why
}

// runOpts is what a run varies besides its seed.
type runOpts struct {
	d     time.Duration
	dur   kahuna.Durability
	kinds []faultKind
	mod   func(kahuna.Config) kahuna.Config // nil: the engine as it is
	name  string                            // for the replay hint
	tag   string                            // a negative control's name, in its files' names
	waits bool                              // a third of the clients acquire with waiting Locks (waitsOf)
	// gap bounds the quiet time between faults (0: 200–800ms).
	gapMin, gapMax time.Duration
	perPartition   int           // hot resources per partition (0: 2)
	onePartition   bool          // the clients use the resources of one partition only
	pauseMax       time.Duration // longest pause (0: 3s)
	// linTimeout bounds the linearizability search (0: 2 minutes); a
	// control, which is caught by definite findings, needs less.
	linTimeout time.Duration
	clients    []clientMode // nil: defaultClients
	// cachePressure caps each node's cached entries (4, over its 2 lock
	// actors), so released and lapsed entries are evicted all the time and
	// their names loaded again.
	cachePressure bool
	// grace runs ephemeral locks with the grace (the default engine), and
	// judges the history strictly: reigns do not end ephemeral holds,
	// which the engine waits out. Without it ephemeral runs are
	// fencing-only, and a reign ends every ephemeral hold.
	grace bool
	// handles is how the handle clients (clientMode handle) behave.
	handles handleOpts
}

// defaultClients are the workload's clients.
var defaultClients = []clientMode{direct, direct, forwarding, pool, pool, direct, pool, forwarding, pool}

// handleRun is a run whose clients mostly hold their locks through the
// handle, on the three resources of one partition (eight handle clients,
// three plain ones), and now and then send an Extend that is delivered late,
// after a longer one: the holder's deadline must not outlast the lease
// the late one shortened. Ephemeral locks run with the grace: fencing-only,
// a reign ends a lock under its holder.
func handleRun(d time.Duration, dur kahuna.Durability, kinds []faultKind) runOpts {
	return runOpts{d: d, dur: dur, kinds: kinds, grace: dur == kahuna.Ephemeral,
		onePartition: true, perPartition: 3, handles: handleOpts{late: true},
		clients: []clientMode{handle, handle, handle, direct, handle, pool, handle, forwarding, handle, handle, handle}}
}

// renewRun is a run of leader transfers on persistent locks held for two
// to four TTLs of 600 ms each and renewed every third of it (so past the
// first renewal in the leader's memory), three resources of one partition
// with handle clients waiting for each: a leader change in the middle of
// a hold finds its stored lease older than the renewed one.
func renewRun(d time.Duration) runOpts {
	return runOpts{d: d, dur: kahuna.Persistent, kinds: []faultKind{fTransfer}, gapMin: 100 * time.Millisecond, gapMax: 300 * time.Millisecond,
		onePartition: true, perPartition: 3, handles: handleOpts{renew: true, ttl: 600 * time.Millisecond},
		clients: []clientMode{handle, handle, handle, handle, handle, handle, handle, handle, handle, direct}}
}

// stallHandOffRun is a run of the stall-handoff schedule on persistent
// locks: four resources of one partition, each with two or three handle
// clients that hold it to the end of their lease and wait up to 5 s for
// it, so a holder's Unlock mostly hands the lock to a waiter.
//
// The gap after each stall lets the chain it started finish with the
// replication working: the waiter granted by the stuck record is answered,
// and the next waiter is granted once the first one's lease ends.
func stallHandOffRun(d time.Duration) runOpts {
	return runOpts{d: d, dur: kahuna.Persistent, kinds: []faultKind{fStallHandOff}, gapMin: time.Second, gapMax: 1500 * time.Millisecond,
		onePartition: true, perPartition: 4, handles: handleOpts{full: true},
		clients: []clientMode{handle, handle, handle, handle, handle, handle, handle, handle, handle, handle, direct}}
}

// transferUnrelinquishedRun is a run of the transfer-unrelinquished
// schedule on persistent locks: every client on the three resources of one
// partition, which moves every 100–300 ms between faults.
//
// The Raft tick is 30 ms (a 208 ms lease) rather than the default 10 ms
// (69 ms): a target that serves at once (the takeover wait off) begins
// while the old leader still serves only if its election takes less than
// what is left of the old lease, and on a loaded machine it can take
// most of 69 ms.
func transferUnrelinquishedRun(d time.Duration) runOpts {
	return runOpts{d: d, dur: kahuna.Persistent, kinds: []faultKind{fTransferUnrelinquished},
		gapMin: 100 * time.Millisecond, gapMax: 300 * time.Millisecond, onePartition: true, perPartition: 3,
		mod: withRaftRTT(30 * time.Millisecond)}
}

// withRaftRTT returns a Config change setting the Raft tick to rtt.
func withRaftRTT(rtt time.Duration) func(kahuna.Config) kahuna.Config {
	return func(cfg kahuna.Config) kahuna.Config {
		cfg.RaftRTT = rtt
		return cfg
	}
}

// requireArose fails a run whose scenario did not arise (arose, e.g.
// handOffsUnknown, says why): it tested nothing of what it is for.
func requireArose(t *testing.T, run faultRun, arose func(faultRun) string) {
	t.Helper()
	if why := arose(run); why != "" {
		t.Errorf("seed %d: %s: the run did not test what it is for", run.seed, why)
	}
}

// renewedThroughReigns says why run had no renewed hold through a leader
// change ("" if it had: holds renewed for two TTLs or more, and reigns
// begun while they ran).
func renewedThroughReigns(run faultRun) string {
	if run.handles.holds.Load() == 0 || run.begun == 0 {
		return fmt.Sprintf("%d holds, %d reigns begun: no renewed hold through a leader change", run.handles.holds.Load(), run.begun)
	}
	return ""
}

// handOffsUnknown says why run left no hand-off's outcome unknown ("" if
// it did: a waiter was answered Errored).
func handOffsUnknown(run faultRun) string {
	if run.handles.waitsErrored.Load() == 0 {
		return fmt.Sprintf("no waiter was answered Errored (%s): no hand-off of unknown outcome", run.handles)
	}
	return ""
}

// lateExtendsApplied says why no late short Extend shortened a live lease
// in run ("" if one did).
func lateExtendsApplied(run faultRun) string {
	if run.handles.lateApplied.Load() == 0 {
		return fmt.Sprintf("no late short Extend was applied (%s)", run.handles)
	}
	return ""
}

// durabilityOf is the durability of a seed's run.
// waitsOf: the runs whose clients partly acquire with waiting Locks
// (queues, hand-offs, forwarded waits under faults): seeds 4, 8, 12, …
// Waiters make other clients' TryLocks Busy more often, so such a run
// grants less; the others keep the plain workload the controls are tuned
// on.
func waitsOf(seed uint64) bool { return seed%4 == 0 }

func durabilityOf(seed uint64) kahuna.Durability {
	if seed%3 == 2 {
		return kahuna.Ephemeral
	}
	return kahuna.Persistent
}

// stallLeaderWait bounds how long a stall of replication waits for its
// partition to have a serving leader (a takeover wait lasts about an
// election timeout, or a grace as long as the longest ephemeral lease).
const stallLeaderWait = 3 * time.Second

// nemesis runs the fault schedule until ctx ends, then heals the network
// and restarts every node it killed. One fault at a time, so a majority is
// reachable between faults.
//
// unsure is told the partition of an Unlock a handle client saw answered
// Errored (fStallHandOff waits for one).
func nemesis(ctx context.Context, t *testing.T, c *faultCluster, rng *rand.Rand, o runOpts, hot []int, counts map[faultKind]int, eff *faultEffects, start time.Time, unsure <-chan int) {
	logf := func(format string, args ...any) {
		t.Logf("%7.3fs nemesis: %s", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	between := func(min, max time.Duration) time.Duration {
		return min + time.Duration(rng.Int64N(int64(max-min)+1))
	}
	sleep := func(min, max time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(between(min, max)):
			return true
		}
	}
	// hold keeps a fault for [min, max] even if ctx ends, so its effect on
	// the history is seen; it is healed right after.
	hold := func(min, max time.Duration) { time.Sleep(between(min, max)) }
	randomNode := func() uint64 { return c.IDs()[rng.IntN(len(c.IDs()))] }
	hotLeader := func() uint64 {
		if l := c.leaderNow(hot[rng.IntN(len(hot))]); l != 0 {
			return l
		}
		return randomNode()
	}
	gapMin, gapMax := o.gapMin, o.gapMax
	if gapMax == 0 {
		gapMin, gapMax = 200*time.Millisecond, 800*time.Millisecond
	}
	var fill sync.WaitGroup // fStallReplication's writes
	defer fill.Wait()
	if !sleep(faultWarmup, faultWarmup) {
		return
	}
	for ctx.Err() == nil {
		eff.settle() // the last transfer had the gap to take effect
		k := o.kinds[rng.IntN(len(o.kinds))]
		counts[k]++
		switch k {
		case fKill, fKillLeader, fCrashLeader:
			id := randomNode()
			if k != fKill {
				id = hotLeader()
			}
			logf("%s: kill node %d", k, id)
			c.kill(id, k == fCrashLeader)
			hold(200*time.Millisecond, 1500*time.Millisecond)
			logf("restart node %d", id)
			if err := c.StartNode(id); err != nil {
				t.Errorf("restart node %d: %v", id, err)
				return
			}
		case fTransfer:
			p := hot[rng.IntN(len(hot))]
			to := randomNode()
			l := c.leaderNow(p)
			if l == to {
				// Not to the leader itself, which moves nothing: the next
				// node (no draw of its own, so a seed's schedule stays).
				to = c.IDs()[(slices.Index(c.IDs(), to)+1)%len(c.IDs())]
			}
			if n := c.Node(l); n != nil {
				logf("transfer partition %d to node %d", p, to)
				err := n.TransferLeadership(p, to) // may be refused mid-election
				eff.transferred(p, err)
				if err != nil {
					logf("transfer refused: %v", err)
				}
			}
		case fSlowTransfer:
			p := hot[rng.IntN(len(hot))]
			id := c.leaderNow(p)
			n := c.Node(id)
			if n == nil {
				break
			}
			l := faults.Link{Delay: between(time.Millisecond, 8*time.Millisecond)}
			to := c.Others(id)[rng.IntN(len(c.IDs())-1)]
			logf("%s: links of node %d %s, then partition %d to node %d", k, id, l, p, to)
			for _, o := range c.Others(id) {
				c.net.Set(id, o, l)
				c.net.Set(o, id, l)
			}
			hold(100*time.Millisecond, 300*time.Millisecond)
			err := n.TransferLeadership(p, to)
			eff.transferred(p, err)
			if err != nil {
				logf("transfer refused: %v", err)
			}
			hold(200*time.Millisecond, 800*time.Millisecond)
			logf("heal")
			c.net.Heal()
		case fTransferUnrelinquished:
			p := hot[rng.IntN(len(hot))]
			id := c.leaderNow(p)
			n := c.Node(id)
			if n == nil {
				break
			}
			to := c.Others(id)[rng.IntN(len(c.IDs())-1)]
			logf("%s: partition %d to node %d with its lease kept, node %d's inbound links cut as it sends TimeoutNow", k, p, to, id)
			// Cut when the TimeoutNow leaves, not before: a leader cut
			// off first never hears its target catch up, and Raft sends
			// no TimeoutNow to a target behind it.
			c.net.CutInboundOnTimeoutNow(id, c.Others(id))
			err := testknobs.TransferUnrelinquished(n, p, to)
			eff.transferred(p, err)
			if err != nil {
				logf("transfer refused: %v", err)
			}
			// Cut off, L cannot renew its lease: past it, L stepped down.
			lease := testknobs.LeaderLease(n)
			hold(lease+100*time.Millisecond, lease+400*time.Millisecond)
			logf("heal")
			c.net.Heal()
		case fStallReplication:
			p := hot[rng.IntN(len(hot))]
			id := c.servingLeader(ctx, p, stallLeaderWait)
			n := c.Node(id)
			if n == nil {
				counts[k]-- // not injected: no fault to claim
				logf("%s: partition %d has no serving leader after %v: skipped", k, p, stallLeaderWait)
				break
			}
			shard := testknobs.RaftShard(p)
			logf("%s: node %d's replication of partition %d stalled, its lane filled", k, id, p)
			c.net.StallReplication(id, shard)
			// One filler at a time, so each takes an entry (a slot) of its
			// own; one more than the slots, in case the workload's writes
			// took none.
			for _, res := range c.fillers(n, p, 5) {
				fill.Add(1)
				go func() {
					defer fill.Done()
					ctx, cancel := context.WithTimeout(context.Background(), faultOpTimeout)
					defer cancel()
					_, _ = n.Local().TryLock(ctx, res, []byte("filler"), time.Minute, kahuna.Persistent)
				}()
				time.Sleep(3 * time.Millisecond)
			}
			// The workload's writes to the partition queue behind them.
			hold(100*time.Millisecond, 300*time.Millisecond)
			logf("cut node %d off", id)
			c.net.Isolate(id, c.Others(id), true, true)
			// Past its lease, its step-down and an election (≈100–300 ms),
			// and short of its proposals' timeout.
			hold(350*time.Millisecond, 500*time.Millisecond)
			logf("heal (node %d's replication resumed, it follows the new leader)", id)
			c.net.Heal()
			// Its proposals time out and the queued records go: keep the
			// next fault away from them.
			hold(faultProposalTimeout, faultProposalTimeout+200*time.Millisecond)
		case fStallHandOff:
			p := hot[rng.IntN(len(hot))]
			id := c.servingLeader(ctx, p, stallLeaderWait)
			if c.Node(id) == nil {
				counts[k]-- // not injected: no fault to claim
				logf("%s: partition %d has no serving leader after %v: skipped", k, p, stallLeaderWait)
				break
			}
			shard := testknobs.RaftShard(p)
			for len(unsure) > 0 {
				<-unsure // before the stall
			}
			logf("%s: node %d's replication of partition %d stalled", k, id, p)
			c.net.StallReplication(id, shard)
			// A holder unlocks within its TTL, and its record times out a
			// proposal timeout later (the stall runs its course even if ctx
			// ends meanwhile, as hold does).
			waited := time.NewTimer(faultTTL + faultProposalTimeout + 500*time.Millisecond)
			timedOut := false
		next:
			for {
				select {
				case q := <-unsure:
					if timedOut = q == p; timedOut {
						break next
					}
				case <-waited.C:
					break next
				}
			}
			waited.Stop()
			if timedOut {
				logf("an Unlock on partition %d was answered Errored", p)
				// The waiter's second grant was proposed right after the
				// first timed out: resume before it times out too.
				hold(100*time.Millisecond, 600*time.Millisecond)
			}
			logf("node %d's replication of partition %d resumed", id, p)
			c.net.ResumeReplication(id, shard)
		case fPause:
			id := randomNode()
			if rng.IntN(5) > 0 {
				id = hotLeader()
			}
			n := c.Node(id)
			if n == nil {
				break
			}
			// Past an election (≈100–300ms here) and the leader lease
			// (≈70ms); past a lock's TTL about a third of the time.
			maxPause := o.pauseMax
			if maxPause == 0 {
				maxPause = 3 * time.Second
			}
			d := between(400*time.Millisecond, maxPause)
			logf("pause node %d for %v", id, d.Round(time.Millisecond))
			testknobs.PauseNode(n)
			c.net.Isolate(id, c.Others(id), true, true)
			time.Sleep(d)
			// It wakes: held calls are answered at once by a node that still
			// believes it leads, until its view catches up (within an
			// election timeout, when its Raft would step down or hear the new
			// leader), while still cut off or, half the time, with its links
			// back and its Raft already following the new leader (it then
			// forwards what the node proposes).
			stepDown := between(0, 150*time.Millisecond)
			healFirst := rng.IntN(2) == 0
			logf("resume node %d (its view catches up %v later, links healed %s)", id, stepDown.Round(time.Millisecond), map[bool]string{true: "first", false: "after"}[healFirst])
			if healFirst {
				// Its Raft reads the new leader's messages first.
				c.net.Heal()
				time.Sleep(between(20*time.Millisecond, 60*time.Millisecond))
			}
			testknobs.ResumeCalls(n)
			time.Sleep(stepDown)
			testknobs.ResumeView(n)
			if !healFirst {
				hold(0, 100*time.Millisecond)
				if rng.IntN(2) == 0 {
					c.net.ResetProxies(id)
				}
				logf("heal")
				c.net.Heal()
			}
		case fIsolate, fIsolateLeader, fOneWayOut, fOneWayIn:
			id := randomNode()
			if k == fIsolateLeader || (k != fIsolate && rng.IntN(2) == 0) {
				id = hotLeader()
			}
			out, in := k != fOneWayIn, k != fOneWayOut
			logf("%s: node %d (out=%v in=%v)", k, id, out, in)
			c.net.Isolate(id, c.Others(id), out, in)
			hold(300*time.Millisecond, 2500*time.Millisecond)
			if rng.IntN(2) == 0 {
				c.net.ResetProxies(id) // broken connections rather than stalled ones
			}
			logf("heal")
			c.net.Heal()
		case fLossy:
			l := faults.Link{Drop: 0.05 + rng.Float64()*0.25, Delay: time.Duration(rng.IntN(20)) * time.Millisecond}
			logf("lossy links: %s", l)
			c.net.SetAll(c.IDs(), l)
			hold(500*time.Millisecond, 2500*time.Millisecond)
			logf("heal")
			c.net.Heal()
		}
		if !sleep(gapMin, gapMax) {
			break
		}
	}
	c.net.Heal()
	for _, id := range c.IDs() {
		if c.Node(id) == nil {
			if err := c.StartNode(id); err != nil {
				t.Errorf("final restart of node %d: %v", id, err)
			}
		}
	}
}

// clientMode is how a client picks the node it calls.
type clientMode int

const (
	// direct calls a node that says it serves the partition (the new
	// leader, or a deposed one that has not heard the news) on its own
	// Locker, which never forwards.
	direct clientMode = iota
	// forwarding calls a node that does not lead the partition, so the
	// call crosses the forwarding link; it retries directly.
	forwarding
	// pool is a client with every endpoint: each call goes to any of the
	// three nodes, paused or deposed ones included, on the node's own
	// Locker or on its forwarding one, and is hedged on other endpoints
	// when it is slow (see once), so one owner talks to the old and the
	// new leader together.
	pool
	// handle holds its locks through the handle (kahuna.Acquire, with a
	// wait three times in four; Extend; Unlock), and records what it
	// believed besides what the servers answered: see handleClient.
	handle
)

func (m clientMode) String() string { return [...]string{"direct", "forwarding", "pool", "handle"}[m] }

// lockClient is one client of the workload: it cycles acquire (→ extend,
// re-lock) → release on the hot resources with a fresh owner per cycle.
type lockClient struct {
	id   int
	mode clientMode
	c    *faultCluster
	rec  *checker.Recorder
	rng  *rand.Rand
	d    kahuna.Durability
	// waits: its acquires are mostly waiting Locks (up to 300 ms in the
	// resource's queue on the leader), so hand-offs in the actor (an Unlock
	// granting the head in the same record, a holder's expiry waking it)
	// and forwarded waits meet the faults too. A waited grant linearizes
	// somewhere in its call's span, as a TryLock does, and its lease began
	// after the call: the checkers need nothing new.
	waits bool

	background sync.WaitGroup // calls racing another one
}

// target is one node to call and which of its Lockers.
type target struct {
	node  uint64
	local bool // its own Locker (never forwards), else its forwarding one
}

// pick chooses whom to call for res on the given attempt (0 the first);
// node 0 if none is up.
func (cl *lockClient) pick(res string, attempt int) target {
	up := cl.c.Up()
	if len(up) == 0 {
		return target{}
	}
	if cl.mode == pool {
		return target{node: up[cl.rng.IntN(len(up))], local: cl.rng.IntN(10) < 7}
	}
	n := cl.c.Node(up[0])
	if n == nil {
		return target{}
	}
	forward := cl.mode == forwarding && attempt == 0
	leader := cl.c.servingOf(n.Partition(res), cl.rng)
	var candidates []uint64
	for _, id := range up {
		if (id == leader) != forward {
			candidates = append(candidates, id)
		}
	}
	if len(candidates) == 0 {
		candidates = up
	}
	return target{node: candidates[cl.rng.IntN(len(candidates))], local: !forward}
}

// call runs one recorded operation on to.
func (cl *lockClient) call(to target, kind checker.Kind, res, owner string, ttl time.Duration) checker.Op {
	n := cl.c.Node(to.node)
	if n == nil {
		time.Sleep(10 * time.Millisecond)
		return checker.Op{Outcome: checker.Fail, Status: kahuna.MustRetry} // nothing sent
	}
	var l kahuna.Locker = n
	if to.local {
		l = n.Local()
	}
	ctx, cancel := context.WithTimeout(context.Background(), faultOpTimeout)
	defer cancel()
	p := cl.rec.Begin(checker.Op{Client: cl.id, Node: to.node, Local: to.local, Ephemeral: cl.d == kahuna.Ephemeral,
		Kind: kind, Resource: res, Owner: owner, TTL: ttl})
	var (
		r    kahuna.Result
		info kahuna.LockInfo
		err  error
	)
	switch kind {
	case checker.Acquire:
		// rand's own source: a pool client's calls run on goroutines of
		// their own, and cl.rng is its caller's.
		if wl, ok := l.(kahuna.WaitLocker); ok && cl.waits && rand.IntN(4) != 0 {
			r, err = wl.Lock(ctx, res, []byte(owner), ttl, rand.N(300*time.Millisecond), cl.d)
		} else {
			r, err = l.TryLock(ctx, res, []byte(owner), ttl, cl.d)
		}
	case checker.Extend:
		r, err = l.Extend(ctx, res, []byte(owner), ttl, cl.d)
	case checker.Release:
		r, err = l.Unlock(ctx, res, []byte(owner), cl.d)
	default:
		info, r, err = l.Get(ctx, res, cl.d)
	}
	// MustRetry means certainly not applied, forwarded or
	// not: the suite holds the engine to it, which also keeps the
	// operations of unknown outcome few (timeouts, transport errors,
	// Errored). With -faults.mustretry=unknown only a node's own Locker is
	// trusted with it, as Jepsen's Kahuna client trusts nothing.
	outcome := checker.Classify(r.Status, err)
	if err == nil && r.Status == kahuna.MustRetry && (to.local || *faultsMustRetry != "unknown") {
		outcome = checker.Fail
	}
	return p.EndOutcome(outcome, r.Status, r.FencingToken, string(info.Owner), err)
}

// once runs one operation: on one node, or for a pool client on one node
// and, each time no useful answer has come for a while (tens of
// milliseconds, doubling), on another endpoint too: a client hedging over
// its endpoints, every node on its own Locker and on its forwarding one.
// The first answer that is neither MustRetry nor unknown is used; calls
// still out go on in the background and are recorded when they end (one
// held by a paused node, when the node wakes). So a pool client keeps
// calling a paused or deposed node while it works with the new leader, and
// one owner's calls reach the old and the new leader at once.
//
// uncertain reports whether a call may have taken effect unseen (one that
// is still out when the answer is used does not count: that answer is
// definite).
func (cl *lockClient) once(kind checker.Kind, res, owner string, ttl time.Duration, attempt int) (_ checker.Op, uncertain bool) {
	if cl.mode != pool {
		op := cl.call(cl.pick(res, attempt), kind, res, owner, ttl)
		return op, op.Outcome == checker.Indeterminate
	}
	ops := make(chan checker.Op, 8)
	var tried []target
	launch := func() {
		x := cl.pick(res, attempt)
		for i := 0; i < 8 && slices.Contains(tried, x); i++ {
			x = cl.pick(res, attempt)
		}
		tried = append(tried, x)
		cl.background.Add(1)
		go func() { defer cl.background.Done(); ops <- cl.call(x, kind, res, owner, ttl) }()
	}
	launch()
	var last checker.Op
	wait := time.Duration(10+cl.rng.IntN(40)) * time.Millisecond
	for out := 1; out > 0; {
		var hedge <-chan time.Time
		if len(tried) < cap(ops) && !uncertain {
			hedge = time.After(wait)
		}
		select {
		case op := <-ops:
			out--
			if op.Outcome != checker.Indeterminate && op.Status != kahuna.MustRetry {
				return op, false
			}
			uncertain = uncertain || op.Outcome == checker.Indeterminate
			last = op
			if out == 0 && len(tried) < 3 && !uncertain {
				out++
				launch()
			}
		case <-hedge:
			out++
			launch()
			wait *= 2
		}
	}
	return last, uncertain
}

// settle tries to make an operation's outcome known. It retries while the
// answer is a definite MustRetry (nothing happened) and stops at the first
// definite answer, or at an unknown outcome (for a forwarding client: of a
// direct attempt): the client then gives the owner up (its lease lapses on
// its own). So each owner has at most a few operations of unknown outcome,
// which keeps the linearizability search small; a client that kept
// retrying one owner through a long stall would leave dozens, each of
// which may take effect at any later time.
//
// uncertain reports whether an attempt may have taken effect unseen.
func (cl *lockClient) settle(kind checker.Kind, res, owner string, ttl time.Duration, attempts int) (op checker.Op, uncertain bool) {
	for i := 0; i < attempts; i++ {
		var maybe bool
		op, maybe = cl.once(kind, res, owner, ttl, i)
		if maybe {
			uncertain = true
			if cl.mode != forwarding || i > 0 {
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
	defer cl.background.Wait()
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		res := hot[cl.rng.IntN(len(hot))]
		owner := fmt.Sprintf("c%d-%d", cl.id, n)
		if cl.rng.IntN(10) == 0 {
			_, _ = cl.once(checker.Get, res, "", 0, 0)
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
		// Hold: the critical section, sometimes extended, sometimes
		// re-locked by the same owner (Locked with the same token, the
		// expiry not refreshed), sometimes read.
		for i := cl.rng.IntN(4); i > 0; i-- {
			time.Sleep(time.Duration(cl.rng.IntN(15)) * time.Millisecond)
			var (
				op    checker.Op
				maybe bool
			)
			switch x := cl.rng.IntN(10); {
			case x < 5:
				op, maybe = cl.once(checker.Extend, res, owner, faultTTL, 0)
			case x < 9:
				op, maybe = cl.once(checker.Acquire, res, owner, faultTTL, 0)
			default:
				op, maybe = cl.once(checker.Get, res, "", 0, 0)
			}
			if maybe || op.Outcome != checker.OK || (op.Kind == checker.Acquire && op.Token != a.Token) {
				break // lost, or unknown: let it go
			}
		}
		time.Sleep(time.Duration(cl.rng.IntN(15)) * time.Millisecond)
		cl.settle(checker.Release, res, owner, 0, 20)
	}
}

// runFaults runs one seeded schedule on a fresh cluster.
func runFaults(t *testing.T, seed uint64, o runOpts) faultRun {
	name := o.name
	if name == "" {
		name = "TestFaults$"
	}
	t.Logf("seed %d, %s locks (replay: go test -run '%s' -v ./tests/faults -faults.seed=%d -faults.run=%v)", seed, o.dur, name, seed, o.d)
	const partitions = 3
	mod := func(cfg kahuna.Config) kahuna.Config {
		if o.dur == kahuna.Ephemeral && !o.grace {
			cfg.EphemeralFencingOnly = true
		}
		if o.cachePressure {
			cfg.MaxCachedEntries = 4
		}
		if o.mod != nil {
			cfg = o.mod(cfg)
		}
		return cfg
	}
	modes := o.clients
	if modes == nil {
		modes = defaultClients
	}
	if o.dur == kahuna.Ephemeral && !o.grace && slices.Contains(modes, handle) {
		// A reign ends a fencing-only ephemeral lock under its holder.
		t.Fatal("handle clients on ephemeral locks need the grace (runOpts.grace)")
	}
	c := startFaultCluster(t, seed, partitions, mod)
	first := c.Node(c.Up()[0])
	byPartition := map[int][]string{}
	var hot []string
	per := o.perPartition
	if per == 0 {
		per = 2
	}
	for _, r := range c.resourcesOnPartitions(fmt.Sprintf("hot%d", seed), per) {
		hot = append(hot, r)
		byPartition[first.Partition(r)] = append(byPartition[first.Partition(r)], r)
	}
	if o.onePartition {
		p := first.Partition(hot[0])
		hot = byPartition[p]
		byPartition = map[int][]string{p: hot}
	}
	hotParts := make([]int, 0, len(byPartition))
	for p := range byPartition {
		hotParts = append(hotParts, p)
	}
	sort.Ints(hotParts)
	rec := checker.NewRecorder()
	start := time.Now()
	run := faultRun{seed: seed, dur: o.dur, faults: map[faultKind]int{}, handles: &handleStats{}}

	stopWatch := make(chan struct{})
	reigns, watched := c.watchReigns(rec, byPartition, o.dur == kahuna.Ephemeral, o.grace, stopWatch)
	stopClients := make(chan struct{})
	var wg sync.WaitGroup
	unsure := make(chan int, 16)
	for i, m := range modes {
		var work func(<-chan struct{}, []string)
		if m == handle {
			work = newHandleClient(i, c, rec, seed, o.dur, o.handles, run.handles, unsure).run
		} else {
			work = (&lockClient{id: i, mode: m, c: c, rec: rec, rng: rand.New(rand.NewPCG(seed, uint64(i)+100)), d: o.dur, waits: o.waits && i%3 == 1}).run
		}
		wg.Add(1)
		go func() { defer wg.Done(); work(stopClients, hot) }()
	}
	run.effects.reigns = reigns
	ctx, cancel := context.WithTimeout(context.Background(), o.d)
	nemesis(ctx, t, c, rand.New(rand.NewPCG(seed, 1)), o, hotParts, run.faults, &run.effects, start, unsure)
	cancel()
	// The cluster must serve again after the faults: a fresh lock on
	// every partition, while the workload goes on for a healthy tail of at
	// least faultTail.
	tail := time.Now().Add(faultTail)
	if err := c.servesAgain(o.dur, servesAgainWithin); err != nil {
		t.Errorf("seed %d: the cluster does not serve again after the faults: %v", seed, err)
	}
	run.effects.settle()
	time.Sleep(time.Until(tail)) // the workload's length, not a wait for an event
	close(stopClients)
	wg.Wait()
	close(stopWatch)
	<-watched
	run.reigns = reigns.total.Load()
	run.begun = reigns.begun()
	run.evictions = c.evictions()
	run.unfenced, run.unfencedBehind = c.unfencedApplied()
	run.net.dropped, run.net.delayed, run.net.stalled, run.net.held = c.net.Dropped.Load(), c.net.Delayed.Load(), c.net.Stalled.Load(), c.net.Held.Load()
	c.Close() // the checkers get the CPU

	run.history = rec.History()
	for _, op := range run.history {
		if op.Kind != checker.Reign && op.Outcome != checker.Indeterminate && op.Return-op.Call > time.Second {
			run.late++
		}
	}
	// A correct run's history is decided in well under a second (its
	// operations of unknown outcome are few); a search that takes longer
	// is most likely lost in a history that is not linearizable.
	opts := checker.Options{Margin: faultMargin, Timeout: time.Minute}
	if o.linTimeout > 0 {
		opts.Timeout = o.linTimeout
	}
	dump := *faultsDump
	base := fmt.Sprintf("faults-%d", seed)
	if o.tag != "" {
		base = fmt.Sprintf("faults-%s-%d", o.tag, seed)
	}
	switch {
	case dump != "":
		if err := os.MkdirAll(dump, 0o755); err != nil {
			t.Errorf("-faults.dump: %v", err)
		}
	case o.tag != "":
		dump = t.TempDir() // a negative control's violations are meant: its files go with the test
	default:
		// Not t.TempDir: a failed run's history must outlive the test, to
		// be read after a CI run. Several runs of a seed, and several test
		// processes, share the directory.
		dump = os.TempDir()
		base = fmt.Sprintf("kahuna-%s-%s", strings.ReplaceAll(t.Name(), "/", "_"), time.Now().Format("150405.000000"))
	}
	if o.tag == "" || *faultsDump != "" {
		opts.VisualizePath = filepath.Join(dump, base+".html") // a control is drawn only when asked
	}
	run.report = checker.Check(run.history, opts)
	if run.report.Undecided() && o.tag == "" {
		// A correct run's search has run out of time on CI's loaded
		// machine (60 s, where the same seed decides in 0.2 s here): search
		// what it left undecided again, with three times the budget. Still
		// undecided, the run fails. A negative control is not searched
		// again: it is meant to fail.
		t.Logf("seed %d: linearizability undecided on %v after %v (%d operations of unknown outcome): searching again",
			seed, run.report.Linearizable.Undecided, run.report.Linearizable.Elapsed.Round(time.Second), run.report.Stats.Indeterminate)
		again := opts
		again.Timeout *= 3
		run.report = run.report.Recheck(run.history, again)
	}
	// Seen at the servers rather than in the history: a reign begun while
	// an earlier leader still served (a stale-leader finding).
	run.report.StaleLeader = append(run.report.StaleLeader, reigns.overlaps()...)
	t.Logf("seed %d: %d ops (%d ok, %d fail, %d indeterminate, %d definite answers after more than 1s), %d reigns (%d begun in the run), %d hold windows, faults %v (%s), raft batches dropped %d, delayed %d, forwarded chunks stalled %d, replicate messages held %d; linearizability %s in %v; violations %s",
		seed, run.report.Stats.Ops, run.report.Stats.OK, run.report.Stats.Fail, run.report.Stats.Indeterminate, run.late,
		run.reigns, run.begun, run.report.HoldWindows, fmtCounts(run.faults), run.effects, run.net.dropped, run.net.delayed, run.net.stalled, run.net.held,
		run.report.Linearizable.Result, run.report.Linearizable.Elapsed.Round(time.Millisecond), fmtViolations(run.report))
	if slices.Contains(modes, handle) {
		t.Logf("seed %d: handle clients: %s; %d holds recorded", seed, run.handles, run.report.Stats.Holds)
	}
	if run.report.Violations() > 0 || *faultsDump != "" {
		path := filepath.Join(dump, base+".history")
		js, _ := json.Marshal(run.history)
		if os.WriteFile(path+".txt", []byte(run.history.String()), 0o644) == nil && os.WriteFile(path+".json", js, 0o644) == nil {
			drawn := ""
			if opts.VisualizePath != "" {
				drawn = ", porcupine visualization (if not linearizable) in " + opts.VisualizePath
			}
			t.Logf("seed %d: history in %s.{txt,json}%s", seed, path, drawn)
		}
	}
	return run
}

func fmtCounts[K ~string](m map[K]int) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// violationKinds counts a report's findings by checker and kind.
func violationKinds(r checker.Report) map[string]int {
	m := map[string]int{}
	if r.Linearizable.Result != checker.Linearizable {
		m["linearizability/"+strings.ReplaceAll(string(r.Linearizable.Result), " ", "-")] += len(r.Linearizable.Failed)
	}
	for _, vs := range [][]checker.Violation{r.Exclusion, r.Fencing, r.StaleLeader} {
		for _, v := range vs {
			m[v.Checker+"/"+v.Kind]++
		}
	}
	return m
}

func fmtViolations(r checker.Report) string {
	if r.Violations() == 0 {
		return "none"
	}
	return fmtCounts(violationKinds(r))
}

// reportViolations fails t with a summary of run's violations: their
// kinds, and a few examples of each.
func reportViolations(t *testing.T, run faultRun) {
	t.Helper()
	r := run.report
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d (%s): violations %s", run.seed, run.dur, fmtViolations(r))
	if r.Linearizable.Result != checker.Linearizable {
		fmt.Fprintf(&b, "\nlinearizability: %s (resources %v)", r.Linearizable.Result, r.Linearizable.Failed)
	}
	for _, vs := range [][]checker.Violation{r.Exclusion, r.Fencing, r.StaleLeader} {
		for i, v := range vs {
			if i == 3 {
				fmt.Fprintf(&b, "\n… and %d more %s violations", len(vs)-i, v.Checker)
				break
			}
			b.WriteString("\n")
			b.WriteString(v.String())
		}
	}
	t.Error(b.String())
}

// requireClean fails the test on any violation, on an empty run, and on
// a run whose faults did not happen.
func requireClean(t *testing.T, run faultRun) {
	t.Helper()
	if run.report.Violations() > 0 {
		reportViolations(t, run)
	}
	if run.report.HoldWindows < 20 {
		t.Errorf("seed %d: only %d definite grants: an empty test is not a pass", run.seed, run.report.HoldWindows)
	}
	for _, why := range faultsMissed(run) {
		t.Errorf("seed %d: the faults did not happen: %s", run.seed, why)
	}
}

// requireCleanRetried is requireClean for a schedule whose faults may
// not happen on a loaded machine (two Raft leader transfers both aborted,
// their targets lagging): a clean run whose faults did not happen proves
// less, not nothing wrong, so it is run again with the next seed of the
// same kind (+1200 keeps durabilityOf and waitsOf, so the replay hint
// holds), at most three runs in all. Any violation fails at once.
func requireCleanRetried(t *testing.T, seed uint64, run func(seed uint64) faultRun) {
	t.Helper()
	for try := 1; ; try++ {
		r := run(seed)
		missed := faultsMissed(r)
		if r.report.Violations() > 0 || r.report.HoldWindows < 20 || len(missed) == 0 || try == 3 {
			requireClean(t, r)
			return
		}
		t.Logf("seed %d: clean, but the faults did not happen (%s); again with seed %d", seed, strings.Join(missed, "; "), seed+1200)
		seed += 1200
	}
}

func faultsRunLength() time.Duration { return runLength(6 * time.Second) }

// runLength is -faults.run, or d if it is not set.
func runLength(d time.Duration) time.Duration {
	if *faultsRun > 0 {
		return *faultsRun
	}
	return d
}

// TestFaults is the short run: a few seeded schedules of every fault kind,
// on persistent and ephemeral locks; the history must pass every checker.
func TestFaults(t *testing.T) {
	t.Parallel()
	if *faultsDuration > 0 {
		t.Skip("long run: see TestFaultsLong")
	}
	if testing.Short() {
		t.Skip("fault schedules take half a minute")
	}
	// Persistent, ephemeral, persistent (seed%3); seed 19's schedule
	// includes a stall-replication (the mix draws one seldom); seeds 4 and
	// 8 wait in the lock queues, persistent and ephemeral.
	seeds := []uint64{1, 2, 19, 4, 8}
	if *faultsSeed != 0 {
		seeds = []uint64{*faultsSeed}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			requireCleanRetried(t, seed, func(seed uint64) faultRun {
				return runFaults(t, seed, runOpts{d: faultsRunLength(), dur: durabilityOf(seed), kinds: scheduleKinds(t), waits: waitsOf(seed)})
			})
		})
	}
	// Ephemeral locks with the grace, judged strictly: no two holders
	// across reigns either. And ephemeral locks under cache pressure: their
	// entries evicted and loaded again all the time.
	if *faultsSeed == 0 {
		t.Run("seed=5/grace", func(t *testing.T) {
			requireClean(t, runFaults(t, 5, runOpts{d: faultsRunLength(), dur: kahuna.Ephemeral, kinds: scheduleKinds(t), grace: true, name: "TestFaults/seed=5/grace"}))
		})
		// The schedule of the takeover-wait-off control, with the wait
		// on: leaders that hand over with their lease kept, cut off.
		t.Run("seed=13/transfer-unrelinquished", func(t *testing.T) {
			o := transferUnrelinquishedRun(runLength(5 * time.Second))
			o.name = "TestFaults/seed=13/transfer-unrelinquished"
			requireClean(t, runFaults(t, 13, o))
		})
		t.Run("seed=11/cache-pressure", func(t *testing.T) {
			run := runFaults(t, 11, runOpts{d: faultsRunLength(), dur: kahuna.Ephemeral, kinds: scheduleKinds(t), cachePressure: true, name: "TestFaults/seed=11/cache-pressure"})
			requireClean(t, run)
			if run.evictions == 0 {
				t.Errorf("seed 11: no entry evicted under cache pressure: the run did not test what it is for")
			}
			t.Logf("seed 11: %d entries evicted over the run", run.evictions)
		})
	}
}

// TestFaultsHandles: locks held through the handle (kahuna.Acquire,
// Extend, Unlock), what each holder believed recorded to its handle's
// deadline. Extends delivered late, on both durabilities; and hand-offs of
// unknown outcome (persistent locks only: an ephemeral hand-off is decided
// in memory, its outcome always known). Each run must also show that its
// fault happened.
//
//	go test -run 'TestFaultsHandles/stall-handoff' -v ./tests/faults -faults.seed=25
func TestFaultsHandles(t *testing.T) {
	t.Parallel()
	if *faultsDuration > 0 {
		t.Skip("long run: see TestFaultsLong")
	}
	if testing.Short() {
		t.Skip("fault schedules")
	}
	seedOr := func(s uint64) uint64 {
		if *faultsSeed != 0 {
			return *faultsSeed
		}
		return s
	}
	for _, c := range []struct {
		name  string
		seed  uint64
		opts  runOpts
		arose func(faultRun) string
	}{
		{"handles", 41, handleRun(runLength(4*time.Second), kahuna.Persistent, scheduleKinds(t)), lateExtendsApplied},
		{"handles-grace", 37, handleRun(runLength(4*time.Second), kahuna.Ephemeral, scheduleKinds(t)), lateExtendsApplied},
		{"stall-handoff", 25, stallHandOffRun(runLength(5 * time.Second)), handOffsUnknown},
		{"renewals", 43, renewRun(runLength(4 * time.Second)), renewedThroughReigns},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := c.opts
			o.name = "TestFaultsHandles/" + c.name + "$"
			run := runFaults(t, seedOr(c.seed), o)
			requireClean(t, run)
			requireArose(t, run, c.arose)
		})
	}
}

// TestFaultsLong runs seeded schedules until -faults.duration is spent, and
// every negative control every tenth seed, and prints a summary: runs,
// operations, faults, violations, controls caught. Half the ephemeral
// seeds (seed%6 == 5) run with the grace, judged strictly; seeds with
// seed%9 == 8 run under cache pressure. Seeds with seed%7 == 3 run
// TestFaultsHandles' handle clients with late Extends (ephemeral ones with
// the grace), and seeds with seed%7 == 6 its stall-handoff schedule.
func TestFaultsLong(t *testing.T) {
	if *faultsDuration == 0 {
		t.Skip("set -faults.duration (e.g. 10m) for the long run")
	}
	d := faultsRunLength()
	seed := *faultsSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano()) % 1_000_000
	}
	var (
		runs, ops, indeterminate, late, windows, violations, failedRuns int
		reigns, dropped, stalled                                        int64
		faultsTotal                                                     = map[faultKind]int{}
		kinds                                                           = map[string]int{}
		byDur                                                           = map[kahuna.Durability]int{}
		failed                                                          []uint64
		controls, caught                                                int
		missed                                                          []string
	)
	deadline := time.Now().Add(*faultsDuration)
	for ; time.Now().Before(deadline); seed++ {
		var run faultRun
		ok := t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			o := runOpts{d: d, dur: durabilityOf(seed), kinds: scheduleKinds(t), waits: waitsOf(seed),
				grace: seed%6 == 5, cachePressure: seed%9 == 8}
			switch seed % 7 {
			case 3:
				o = handleRun(d, durabilityOf(seed), scheduleKinds(t))
				o.name = map[kahuna.Durability]string{kahuna.Persistent: "TestFaultsHandles/handles$", kahuna.Ephemeral: "TestFaultsHandles/handles-grace"}[o.dur]
			case 6:
				o = stallHandOffRun(d)
				o.name = "TestFaultsHandles/stall-handoff"
			}
			run = runFaults(t, seed, o)
			requireClean(t, run)
			switch seed % 7 {
			case 3:
				requireArose(t, run, lateExtendsApplied)
			case 6:
				requireArose(t, run, handOffsUnknown)
			}
		})
		runs++
		byDur[run.dur]++
		ops += run.report.Stats.Ops
		indeterminate += run.report.Stats.Indeterminate
		late += run.late
		reigns += run.reigns
		windows += run.report.HoldWindows
		violations += run.report.Violations()
		dropped += run.net.dropped
		stalled += run.net.stalled
		for k, v := range run.faults {
			faultsTotal[k] += v
		}
		for k, v := range violationKinds(run.report) {
			kinds[k] += v
		}
		if !ok {
			failedRuns++
			failed = append(failed, seed)
		}
		// Every tenth seed also runs every negative control, each of which
		// must be caught every time (and the last seed, if none did yet).
		if runs%10 == 0 || (controls == 0 && !time.Now().Add(d).Before(deadline)) {
			for _, nc := range negativeControls {
				controls++
				name := fmt.Sprintf("control=%s/seed=%d", nc.name, seed)
				if t.Run(name, func(t *testing.T) { nc.run(t, seed) }) {
					caught++
				} else {
					missed = append(missed, name)
				}
			}
		}
	}
	total := 0
	for _, v := range faultsTotal {
		total += v
	}
	summary := fmt.Sprintf("faults summary: %d runs of %v (%d persistent, %d ephemeral), %d operations (%d indeterminate, %d definite answers after more than 1s), %d reigns, %d definite hold windows, %d faults injected (%s), %d raft batches dropped, %d forwarded chunks stalled, %d violations (%s), %d failed runs %v; negative controls caught %d of %d %v",
		runs, d, byDur[kahuna.Persistent], byDur[kahuna.Ephemeral], ops, indeterminate, late, reigns, windows, total, fmtCounts(faultsTotal),
		dropped, stalled, violations, fmtCounts(kinds), failedRuns, failed, caught, controls, missed)
	t.Log(summary)
	fmt.Println(summary)
}

// untilTested runs run with seed and, while a run is clean but tested too
// little (short says what it missed: on a loaded machine a transfer whose
// target lags moves nothing), again with the next seed (+1000), at most
// three runs in all; the third such run fails t.
func untilTested(t *testing.T, seed uint64, run func(seed uint64) (clean bool, short []string, summary string)) {
	t.Helper()
	for try := 1; ; try++ {
		clean, short, summary := run(seed)
		if !clean || len(short) == 0 {
			return
		}
		if try == 3 {
			t.Errorf("seed %d tested too little (%s): %s", seed, strings.Join(short, "; "), summary)
			return
		}
		t.Logf("seed %d: clean, but tested too little (%s); again with seed %d", seed, strings.Join(short, "; "), seed+1000)
		seed += 1000
	}
}
