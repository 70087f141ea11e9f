package faults_test

import (
	"flag"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/checker"
	"github.com/kahunago/kahuna/internal/testknobs"
)

// Negative controls: runs of the suite with one protection of the engine
// switched off, each of which must be reported. A control that is not
// caught fails: the suite could not see that class of bug.
//
//	go test -run 'FaultsNegativeControl' -v ./tests/faults
//	go test -run 'FaultsNegativeControl/no-fencing' -v ./tests/faults -faults.seed=7
var negativeControls = []negativeControl{
	{
		// A node answers from its cache whenever its own (late) view says
		// it leads: a paused leader that wakes up, or a cut-off one that has
		// not stepped down yet, answers after the new leader served. On
		// ephemeral locks, which never touch Raft, so only the missing
		// proof can be what is caught: by the stale-leader checker, an
		// answer of a node whose reign a later one had surely superseded.
		name: "no-leadership-proof", seed: 11, by: "stale-leader/answer-from-deposed-leader",
		opts: runOpts{
			d: 5 * time.Second, dur: kahuna.Ephemeral, kinds: []faultKind{fPause, fPause, fIsolateLeader},
			mod: testknobs.WithoutLeadershipProof, gapMin: 100 * time.Millisecond, gapMax: 300 * time.Millisecond,
			pauseMax: 1500 * time.Millisecond, linTimeout: 5 * time.Second,
		},
	},
	{
		// Records apply without compare-and-set and epoch, and records
		// queued when leadership moves are still proposed: a deposed
		// leader's write commits through the new leader, behind its cache.
		// With the leader lease on, a deposed node decides nothing, so the
		// only such write is one decided while the node legitimately led
		// and still waiting in its group-commit lane when the partition
		// moved: the stall-replication nemesis makes
		// exactly that, on persistent locks of one partition under write
		// load (8 resources, so the workload's own writes also fill the
		// lane's in-flight slots). A queued record that commits after the
		// new leader loaded its resource leaves that cache stale: what is
		// seen is an Unlock acknowledged (about a second late) while the new
		// leader goes on answering Busy, and Got the old holder, until the
		// old lease lapses by its cache. (A late Extend is overwritten only
		// if the new leader grants the lock before its holder lets go, and
		// the workload's holders let go at once.) Caught by such a write of a
		// deposed node acknowledged, or by a violation left once every
		// answer of a deposed node is discounted (the queued write was
		// called while its node led, so it stays; the stale answers are
		// the new leader's); not by stale answers of deposed nodes alone,
		// which are the other control's class.
		name: "no-fencing", seed: 12, residual: true, arose: deposedWritesApplied,
		opts: runOpts{
			d: 5 * time.Second, dur: kahuna.Persistent, kinds: []faultKind{fStallReplication},
			mod: testknobs.WithoutFencing, gapMin: 100 * time.Millisecond, gapMax: 300 * time.Millisecond,
			linTimeout:   20 * time.Second,
			onePartition: true, perPartition: 8, clients: []clientMode{direct, direct, direct, direct, direct, direct, direct, direct, pool, pool, pool, forwarding},
		},
	},
	{
		// Not a switch of the engine but of the checker: the ephemeral
		// history of leader crashes, with its reign events taken out,
		// must be found not linearizable (holds vanish at a leader change
		// that hands nothing over).
		// It proves that the reigns are what excuse those, and that the
		// runs do change leaders under the clients' feet. (The fencing
		// checker does not read reigns: tokens rise across them.)
		name: "ephemeral-without-reigns", seed: 101, strip: true,
		opts: runOpts{d: 4 * time.Second, dur: kahuna.Ephemeral, kinds: []faultKind{fCrashLeader}, linTimeout: 20 * time.Second},
	},
	{
		// Ephemeral locks fencing-only, judged as the grace promises (a
		// reign does not end an ephemeral hold), under leader crashes (a
		// planned move hands the leases over either way): a new leader grants a
		// lock its old holder still holds, or tells the holder, within its
		// lease, that it holds nothing. Caught by the linearizability
		// checker, whose model then keeps holds across reigns.
		name: "ephemeral-grace-off", seed: 103, by: "linearizability", arose: holdLiveAtReign,
		opts: runOpts{d: 4 * time.Second, dur: kahuna.Ephemeral, kinds: []faultKind{fCrashLeader}, grace: true,
			mod: func(cfg kahuna.Config) kahuna.Config { cfg.EphemeralFencingOnly = true; return cfg }, linTimeout: 20 * time.Second},
	},
	{
		// A planned move hands the old leader's ephemeral leases over, and
		// the new leader, trusting it, waits none out; here it drops them:
		// another owner is granted a lock its holder still holds. Judged as
		// the grace promises, caught by the linearizability checker.
		name: "handover-dropped", seed: 105, by: "linearizability",
		opts: runOpts{d: 4 * time.Second, dur: kahuna.Ephemeral, kinds: []faultKind{fTransfer}, grace: true,
			mod: testknobs.WithoutHandedOverLeases, linTimeout: 20 * time.Second},
	},
	{
		// Under cache pressure, an evicted ephemeral entry's token is
		// forgotten: the name's next grant repeats or goes below it, with
		// no leader change at all. Eight names on one partition, so its
		// leader, whichever node it is, always has more names than its
		// cache holds (spread over three partitions, the names only
		// outgrew a cache while one node led them all, which a loaded
		// machine's run could miss). Caught by the fencing checker: a new
		// owner granted the token an earlier grant had, or a lower one
		// (which of the two depends on where the forgotten entry's next
		// grant starts from, and so on timing).
		name: "ephemeral-eviction-floor-off", seed: 104, by: "fencing/token-not-increased|fencing/token-went-backwards",
		opts: runOpts{d: 4 * time.Second, dur: kahuna.Ephemeral, kinds: []faultKind{fTransfer}, cachePressure: true,
			onePartition: true, perPartition: 8,
			mod: testknobs.WithoutEvictionFloor, linTimeout: 20 * time.Second},
	},
	{
		// Each new leader counts ephemeral tokens from the stored record
		// (from 0), as before ephemeral tokens were fenced: a name's tokens
		// go backwards at every leader change. Caught by the fencing
		// checker: a token gone backwards.
		name: "ephemeral-tokens-from-zero", seed: 102, by: "fencing/token-went-backwards",
		opts: runOpts{d: 4 * time.Second, dur: kahuna.Ephemeral, kinds: []faultKind{fTransfer},
			mod: testknobs.WithEphemeralTokensFromZero, linTimeout: 20 * time.Second},
	},
	{
		// The token rule broken: a grant to a new owner takes the last
		// grant's token again instead of one more, on persistent locks
		// and with no fault that matters to it (a leader transfer now and
		// then). Caught by the fencing checker: a new owner's grant, asked
		// after the last one was answered, carries its token.
		name: "token-repeat", seed: 107, by: "fencing/token-not-increased",
		opts: runOpts{d: 4 * time.Second, dur: kahuna.Persistent, kinds: []faultKind{fTransfer},
			mod: testknobs.WithTokenRepeat, linTimeout: 20 * time.Second},
	},
	{
		// The token floor after a sweep broken: free records are swept
		// away (kept 100 ms after their release, a sweep every 20 ms) and
		// the partition's token floor is not raised above them, so a name
		// swept away is granted tokens from 0 again. Persistent locks on
		// eight resources per partition, so each is left alone long
		// enough to be swept. Caught by the fencing checker: a token gone
		// backwards. (The linearizability model counts tokens exactly and
		// does not model the floor: its finding does not catch it.)
		name: "sweep-floor-off", seed: 109, by: "fencing/token-went-backwards",
		opts: runOpts{d: 4 * time.Second, dur: kahuna.Persistent, kinds: []faultKind{fTransfer}, perPartition: 8,
			mod: func(cfg kahuna.Config) kahuna.Config {
				cfg.ReleasedRetention = 100 * time.Millisecond
				return testknobs.WithoutSweepFloor(testknobs.WithSweepEvery(cfg, 20*time.Millisecond))
			}, linTimeout: 20 * time.Second},
	},
	{
		// The takeover wait alone switched off (the leader lease on): a
		// leader that hands over without dropping its lease, cut off from
		// its peers' answers (fTransferUnrelinquished), still serves from
		// its cache until its lease runs out, while the target serves at
		// once. On persistent locks, whose new leader waits no grace.
		// Caught where it happens: a target that began serving while the
		// old leader still served (its lease live by its own clock), seen
		// by the serve hook. The stale answers the clients may see fall in
		// the short span between the two, which a loaded machine can leave
		// without a call in it.
		name: "takeover-wait-off", seed: 108, by: "reigns/two-leaders-serving",
		opts: func() runOpts {
			o := transferUnrelinquishedRun(5 * time.Second)
			tick := o.mod
			o.mod = func(cfg kahuna.Config) kahuna.Config { return testknobs.WithoutTakeoverWait(tick(cfg)) }
			o.linTimeout = 20 * time.Second
			return o
		}(),
	},
	{
		// The handle's deadline ignores an Extend of unknown outcome: a
		// short Extend whose caller gave up, delivered after a longer one
		// was answered, ends the server's lease early, and the head waiter
		// is granted the lock then, while the holder goes on for as long as
		// the longer Extend said. The servers did nothing wrong: only the
		// holder's belief (a Hold to its deadline) overlaps the next
		// owner's grant, so the exclusion checker alone can see it.
		name: "late-extend-cap-off", seed: 105, by: "exclusion", arose: lateExtendsApplied,
		opts: func() runOpts {
			o := handleRun(4*time.Second, kahuna.Persistent, []faultKind{fTransfer})
			o.handles.acquire = []kahuna.AcquireOption{testknobs.WithoutLateExtendCap()}
			o.linTimeout = 20 * time.Second
			return o
		}(),
	},
	{
		// A persistent lock's renewals are kept in its leader's memory, and
		// a new leader loads a lease at its stored expiry alone instead of
		// giving it at least its TTL from the new reign: a holder renewed
		// by the old leader past its stored expiry loses the lock at a
		// leader change, to the next contender, while it still holds by
		// its handle. Caught by the exclusion checker (the holder's belief
		// overlaps the next grant) or the linearizability checker.
		name: "renewal-floor-off", seed: 110, by: "exclusion|linearizability",
		opts: func() runOpts {
			o := renewRun(4 * time.Second)
			o.mod = testknobs.WithoutRenewalFloor
			o.linTimeout = 20 * time.Second
			return o
		}(),
	},
	{
		// A waiter whose hand-off's record timed out (it may hold the lock)
		// is told MustRetry or Busy when it is refused later: the
		// stall-handoff schedule's waiter, granted again from the record as
		// it was and refused by the fence once the hand-off commits, hears
		// "certainly not granted", asks again, and is answered Locked by
		// the committed hand-off; its handle counts the lease from that
		// attempt, a second or more after the server began it, and holds it
		// while the next waiter is granted. Caught by the exclusion checker.
		name: "unsure-handoff-not-granted", seed: 106, by: "exclusion", arose: handOffsUnsure,
		opts: func() runOpts {
			o := stallHandOffRun(5 * time.Second)
			o.mod = testknobs.WithoutUnsureHandOff
			o.linTimeout = 20 * time.Second
			return o
		}(),
	},
}

type negativeControl struct {
	name  string
	seed  uint64
	opts  runOpts
	strip bool // check the history without its reigns
	// by, if set, is the finding that catches the control: a checker
	// ("fencing", "exclusion", "linearizability", "stale-leader"), or a
	// checker and the kind of its violation
	// ("fencing/token-not-increased"), or several such separated by "|".
	// Findings of other kinds are logged and do not catch it.
	by string
	// arose, if set, says why a run's scenario did not arise ("" when it
	// did): a measured precondition that the faults alone do not make
	// certain on a loaded machine (a stall that left no hand-off's
	// outcome unknown). Such a run could not catch the control either
	// way, so it is run again with the next seed (at most three runs);
	// a run whose scenario arose and was not caught fails at once.
	arose func(faultRun) string
	// residual: caught only by a committed write of a deposed node, or by
	// findings that answers given by deposed nodes do not explain (see
	// withoutDeposedAnswers), so that on an engine that also lacks the
	// leadership proof the control still shows its own class is seen.
	residual bool
}

// withoutDeposedAnswers is h without the evidence of stale answers: every
// call made to a node after a reign of a later term than its own had
// begun (called on its own Locker or on its forwarding one, which such a
// node may answer itself) becomes unknown if it answered a change (it may
// or may not have taken effect), and is left out if it changed nothing.
// Both only weaken the history, so what the checkers still find is not
// explained by such answers.
func withoutDeposedAnswers(h checker.History) (out checker.History, changed int) {
	type reign struct {
		node, term uint64
		from, to   time.Duration
	}
	reigns := map[string][]reign{}
	for _, o := range h {
		if o.Kind == checker.Reign {
			reigns[o.Resource] = append(reigns[o.Resource], reign{o.Node, uint64(o.Token), o.Call, o.Return})
		}
	}
	deposed := func(o checker.Op) bool {
		var own uint64
		for _, r := range reigns[o.Resource] {
			if r.node == o.Node && r.from < o.Return {
				if r.term == 0 {
					return false
				}
				own = max(own, r.term)
			}
		}
		if own == 0 && !o.Local {
			return false // a node that never led forwards such calls
		}
		for _, r := range reigns[o.Resource] {
			if r.term > own && r.to < o.Call {
				return true
			}
		}
		return false
	}
	for _, o := range h {
		if o.Kind != checker.Reign && o.Node != 0 && o.Outcome != checker.Indeterminate && o.Status != kahuna.MustRetry && deposed(o) {
			changed++
			if o.Outcome == checker.Fail || o.Kind == checker.Get {
				continue
			}
			o.Outcome = checker.Indeterminate
		}
		out = append(out, o)
	}
	return out, changed
}

// definite counts a report's definite findings (an undecided
// linearizability search is not one).
func definite(r checker.Report) int {
	n := len(r.Exclusion) + len(r.Fencing) + len(r.StaleLeader)
	if r.Linearizable.Result == checker.NotLinearizable {
		n++
	}
	return n
}

// missed runs the control once with seed and says why it was not caught
// ("" when it was), and whether that is because its scenario did not
// arise (see negativeControl.arose). checkMeasure fails t when the
// control is caught although its measure says the scenario did not
// arise: the measure is then no precondition, and would excuse misses.
func (nc negativeControl) missed(t *testing.T, seed uint64, checkMeasure bool) (why string, untested bool) {
	o := nc.opts
	o.d = min(o.d, faultsRunLength())
	o.name = "TestFaultsNegativeControl/" + nc.name
	o.tag = nc.name
	run := runFaults(t, seed, o)
	why = nc.judge(t, run)
	if nc.arose == nil {
		return why, false
	}
	cause := nc.arose(run)
	switch {
	case cause != "" && why == "" && checkMeasure:
		t.Errorf("negative control %s caught although its scenario did not arise by its measure: %s", nc.name, cause)
	case cause != "":
		return why + "; the scenario did not arise: " + cause, true
	}
	return why, false
}

// deposedWritesApplied says why the no-fencing control's scenario did not
// arise ("" if it did): no record decided in a deposed leader's epoch
// reached a state machine after the new leader had loaded its resource,
// so no leader's cache was left behind the store for an answer to show.
// (A deposed write applied before the new leader loads its resource is
// what the fence would refuse too, but the new leader then serves what
// the store says, and no answer can tell.)
func deposedWritesApplied(run faultRun) string {
	if run.unfencedBehind == 0 {
		return fmt.Sprintf("no record of a deposed leader's epoch that moves the lock (a release or a grant; an extension changes no answer) was applied behind a new leader's load of its resource (%d records of it applied)", run.unfenced)
	}
	return ""
}

// handOffsUnsure says why the unsure-handoff control's scenario did not
// arise ("" if it did): no Unlock, and no waiter, was answered Errored.
// The control's knob answers such a waiter MustRetry or Busy instead of
// Errored (that is the bug it plants), so the waiters' Errored count
// (handOffsUnknown) cannot see its scenario; the releaser's Unlock of the
// stalled hand-off record still comes back Errored.
func handOffsUnsure(run faultRun) string {
	if run.handles.waitsErrored.Load()+run.handles.unlocksErrored.Load() == 0 {
		return fmt.Sprintf("no Unlock and no waiter was answered Errored (%s): no hand-off of unknown outcome", run.handles)
	}
	return ""
}

// holdLiveAtReign says why the grace-off control's scenario did not arise
// ("" if it did): no reign of a resource began, by the history, while a
// grant of it made under an earlier reign was surely live (from its call
// for its TTL less the checker's margin) and its owner had not let go (a
// release refused does not let go), with the resource asked about after
// the reign began and before that lease surely ended. The checker lets a
// reign keep an ephemeral hold (handed over), so only an answer of the
// new leader can contradict it: a grant to another owner, a Get of
// nobody, the holder told it holds nothing. A crash that took longer than
// the leases to elect the next leader (a loaded machine), or a lease
// nobody asked about, leaves nothing to see.
func holdLiveAtReign(run faultRun) string {
	byResource := map[string][]checker.Op{}
	for _, o := range run.history {
		if o.Kind != checker.Hold {
			byResource[o.Resource] = append(byResource[o.Resource], o)
		}
	}
	released := func(ops []checker.Op, owner string, from, to time.Duration) bool {
		for _, o := range ops {
			if o.Kind == checker.Release && o.Owner == owner && o.Outcome != checker.Fail && o.Call > from && o.Call < to {
				return true
			}
		}
		return false
	}
	asked := func(ops []checker.Op, from, to time.Duration) bool {
		for _, o := range ops {
			if o.Kind != checker.Reign && o.Outcome != checker.Indeterminate && o.Status != kahuna.MustRetry && o.Call > from && o.Return < to {
				return true
			}
		}
		return false
	}
	for _, ops := range byResource {
		for _, g := range ops {
			if g.Outcome != checker.OK || (g.Kind != checker.Acquire && g.Kind != checker.Extend) {
				continue
			}
			end := g.Call + g.TTL - faultMargin
			for _, r := range ops {
				if r.Kind == checker.Reign && r.Call > g.Return && r.Return < end &&
					!released(ops, g.Owner, g.Call, r.Return) && asked(ops, r.Return, end) {
					return ""
				}
			}
		}
	}
	return "no hold live when a new reign began was asked about under it within its lease"
}

// judge says why run did not catch the control ("" when it did).
func (nc negativeControl) judge(t *testing.T, run faultRun) string {
	if run.report.HoldWindows < 20 {
		return fmt.Sprintf("weak control run: only %d definite grants", run.report.HoldWindows)
	}
	r := run.report
	if nc.strip {
		if run.reigns < 2 {
			return fmt.Sprintf("no leader change in the control run (%d reigns)", run.reigns)
		}
		h := slices.DeleteFunc(run.history, func(o checker.Op) bool { return o.Kind == checker.Reign })
		r = checker.Check(h, checker.Options{Margin: faultMargin, Timeout: 20 * time.Second})
		t.Logf("with its reigns the history has violations %s; without them %s", fmtViolations(run.report), fmtViolations(r))
		if r.Linearizable.Result != checker.NotLinearizable {
			return fmt.Sprintf("without reigns linearizability %s", r.Linearizable.Result)
		}
		return ""
	}
	if nc.by != "" {
		t.Logf("negative control %s: findings %s", nc.name, fmtViolations(r))
		for _, vs := range [][]checker.Violation{r.Exclusion, r.Fencing, r.StaleLeader} {
			if len(vs) > 0 {
				t.Logf("e.g. %v", vs[0])
			}
		}
		if !caughtBy(r, nc.by) {
			return fmt.Sprintf("no %s finding (all findings: %s)%s", nc.by, fmtViolations(r), missedFaults(run))
		}
		return ""
	}
	t.Logf("negative control %s: %d findings: %s", nc.name, definite(r), fmtViolations(r))
	if nc.residual {
		writes := 0
		for _, v := range r.StaleLeader {
			if v.Kind == "write-from-deposed-leader" {
				writes++
			}
		}
		h, changed := withoutDeposedAnswers(run.history)
		r = checker.Check(h, checker.Options{Margin: faultMargin, Timeout: 20 * time.Second})
		t.Logf("negative control %s: %d records of a deposed epoch applied (%d releases or grants behind a new leader's load), %d writes of deposed nodes committed; without the %d answers of deposed nodes: %d findings: %s", nc.name, run.unfenced, run.unfencedBehind, writes, changed, definite(r), fmtViolations(r))
		for _, vs := range [][]checker.Violation{r.Exclusion, r.Fencing} {
			if len(vs) > 0 {
				t.Logf("e.g. %v", vs[0])
			}
		}
		if writes == 0 && definite(r) == 0 {
			return "no write of a deposed node was acknowledged, and no violation is left once answers of deposed nodes are discounted"
		}
		return ""
	}
	for _, vs := range [][]checker.Violation{r.StaleLeader, r.Exclusion, r.Fencing} {
		if len(vs) > 0 {
			t.Logf("e.g. %v", vs[0])
		}
	}
	if definite(r) == 0 {
		return fmt.Sprintf("the suite reported no violation (linearizability %s)", r.Linearizable.Result)
	}
	return ""
}

// caughtBy reports whether r has the finding by names (see
// negativeControl.by).
func caughtBy(r checker.Report, by string) bool {
	for alt := range strings.SplitSeq(by, "|") {
		name, kind, _ := strings.Cut(alt, "/")
		if name == "linearizability" && r.Linearizable.Result == checker.NotLinearizable {
			return true
		}
		for _, vs := range [][]checker.Violation{r.Exclusion, r.Fencing, r.StaleLeader} {
			for _, v := range vs {
				if v.Checker == name && (kind == "" || v.Kind == kind) {
					return true
				}
			}
		}
	}
	return false
}

// missedFaults says, for a control not caught, which of its faults did
// not happen ("" if they all did).
func missedFaults(run faultRun) string {
	if why := faultsMissed(run); len(why) > 0 {
		return "; the faults did not happen: " + strings.Join(why, "; ")
	}
	return ""
}

// run runs the control with seed and fails t unless it is caught (again
// with the next seeds, +1000 each, only while its scenario did not arise).
func (nc negativeControl) run(t *testing.T, seed uint64) {
	for try := 1; ; try++ {
		why, untested := nc.missed(t, seed, false)
		switch {
		case why == "":
			return
		case !untested:
			t.Errorf("negative control %s not caught: %s", nc.name, why)
			return
		case try == 3:
			t.Errorf("negative control %s untested in %d runs: %s", nc.name, try, why)
			return
		}
		t.Logf("negative control %s, seed %d: %s; again with seed %d", nc.name, seed, why, seed+1000)
		seed += 1000
	}
}

// TestFaultsNegativeControl runs every negative control once: each must
// be caught in a single attempt (TestFaultsControlRates measures how
// often one is).
func TestFaultsNegativeControl(t *testing.T) {
	t.Parallel()
	if *faultsDuration > 0 {
		t.Skip("long run: see TestFaultsLong")
	}
	if testing.Short() {
		t.Skip("cluster runs")
	}
	for _, nc := range negativeControls {
		t.Run(nc.name, func(t *testing.T) {
			seed := nc.seed
			if *faultsSeed != 0 {
				seed = *faultsSeed
			}
			nc.run(t, seed)
		})
	}
}

var (
	controlSeeds = flag.Int("faults.controlseeds", 0, "TestFaultsControlRates: run each negative control once with this many seeds and print each control's single-attempt catch rate (0: skip)")
	controlsOnly = flag.String("faults.controls", "", "TestFaultsControlRates: a regular expression of the controls to measure (default: all)")
)

// TestFaultsControlRates measures how often each negative control is
// caught in a single attempt: each runs once with each of
// -faults.controlseeds seeds (its own seed, then +1000, +2000, …), and
// a table of controls, seeds, catches and rates is printed. It fails
// where a control's measure of its scenario (negativeControl.arose) says
// "did not arise" of a run that caught it.
//
//	go test -run TestFaultsControlRates -timeout=0 ./tests/faults -faults.controlseeds=20
func TestFaultsControlRates(t *testing.T) {
	if *controlSeeds == 0 {
		t.Skip("set -faults.controlseeds (e.g. 20) to measure the controls' catch rates")
	}
	only, err := regexp.Compile(*controlsOnly)
	if err != nil {
		t.Fatalf("-faults.controls: %v", err)
	}
	var table []string
	for _, nc := range negativeControls {
		if !only.MatchString(nc.name) {
			continue
		}
		caught, untested := 0, 0
		var missed []string
		for i := range uint64(*controlSeeds) {
			seed := nc.seed + 1000*i
			t.Run(fmt.Sprintf("%s/seed=%d", nc.name, seed), func(t *testing.T) {
				why, unarisen := nc.missed(t, seed, true)
				switch {
				case why == "":
					caught++
				case unarisen:
					untested++
					t.Logf("untested: %s", why)
				default:
					missed = append(missed, fmt.Sprintf("seed %d: %s", seed, why))
					t.Logf("not caught: %s", why)
				}
			})
		}
		tested := *controlSeeds - untested
		row := fmt.Sprintf("| %s | %d | %d | %d | %.0f%% |", nc.name, *controlSeeds, untested, caught, 100*float64(caught)/float64(max(tested, 1)))
		table = append(table, row)
		fmt.Println("control rate " + row)
		for _, m := range missed {
			fmt.Printf("control missed %s %s\n", nc.name, m)
		}
	}
	summary := "| control | seeds | scenario did not arise | caught | single-attempt rate where it arose |\n|---|---|---|---|---|\n" + strings.Join(table, "\n")
	t.Log("\n" + summary)
	fmt.Println(summary)
}
