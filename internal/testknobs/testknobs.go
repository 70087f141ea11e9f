// Package testknobs is the module's tests' one way into a node: each
// With… sets a field of kahuna.Config.TestingKnobs, and the functions over
// a *kahuna.Node call the test hooks of the node machinery under it. The
// root package's tests, internal/testcluster and the fault suite
// (tests/faults) all use it; outside the module it cannot be imported.
package testknobs

import (
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/durability"
	"github.com/kahunago/kahuna/internal/node"
	"github.com/kahunago/kahuna/internal/testhooks"
)

// Inner is the node machinery under n, for tests that read its stats and
// admin views or call its test hooks.
func Inner(n *kahuna.Node) *node.Node {
	return testhooks.Inner.(func(*kahuna.Node) *node.Node)(n)
}

// WithoutLateExtendCap is an AcquireOption that switches the handle's
// cap for an Extend of unknown outcome off: the Lock's deadline ignores
// such an Extend, which may be delivered late and shorten the lease (the
// server's lease ends its ttl after it applies), as before the cap. A
// negative control: the fault suite's handle clients must be found
// holding past their lease.
func WithoutLateExtendCap() kahuna.AcquireOption {
	return testhooks.WithoutLateExtendCap.(func() kahuna.AcquireOption)()
}

// WithoutDeadline is an AcquireOption under which the Lock ignores its
// deadline: it is lost only when an answer says the lease is gone, as
// etcd's Campaign keeps a leader whose session lapsed until it hears of
// it. A negative control: the election fault test must find two leaders.
func WithoutDeadline() kahuna.AcquireOption {
	return testhooks.WithoutDeadline.(func() kahuna.AcquireOption)()
}

// ClientNative reports whether c's server offers the native service.
func ClientNative(c *kahuna.Client) (native, known bool) {
	return testhooks.ClientNative.(func(*kahuna.Client) (bool, bool))(c)
}

// knobs gives cfg a copy of its testing knobs to change, so configs built
// from one another do not share them.
func knobs(cfg *kahuna.Config) *node.TestingKnobs {
	k := &node.TestingKnobs{}
	if cfg.TestingKnobs != nil {
		*k = *cfg.TestingKnobs
	}
	cfg.TestingKnobs = k
	return k
}

// WithRaftTransport returns cfg with its Raft transport replaced by f: the
// fault tests wrap dragonboat's channel transport to cut, drop and delay
// Raft messages between the nodes of an in-process cluster.
func WithRaftTransport(cfg kahuna.Config, f durability.TransportFactory) kahuna.Config {
	knobs(&cfg).RaftTransport = f
	return cfg
}

// WithRaftTransportWrap returns cfg with its TCP Raft transport (raftnet)
// wrapped by wrap: a faults.Network's Factory cuts links between members
// that still speak kahuna's own transport, handshake included.
func WithRaftTransportWrap(cfg kahuna.Config, wrap func(durability.TransportFactory) durability.TransportFactory) kahuna.Config {
	knobs(&cfg).RaftTransportWrap = wrap
	return cfg
}

// WithProposalTimeout returns cfg with each Raft proposal bounded by d
// instead of the default 5 s: the fault cluster uses about a second, so a
// stalled leader's proposals time out, and the records queued behind them
// in the partition's group-commit lane are sent (or, fenced, failed)
// within a run.
func WithProposalTimeout(cfg kahuna.Config, d time.Duration) kahuna.Config {
	knobs(&cfg).ProposalTimeout = d
	return cfg
}

// RaftShard is the Raft shard ID of partition p (faults.Network stalls a
// node's replication by shard).
func RaftShard(p int) uint64 { return durability.ShardID(p) }

// WithoutFencing returns cfg with the state machine's fence switched off:
// records apply with the advance-only token guard alone (no compare-and-set
// on the record's base revision, no leader epoch), and queued records are
// proposed even after leadership is lost. A negative control: the fault
// suite must report the violations this lets through.
func WithoutFencing(cfg kahuna.Config) kahuna.Config {
	knobs(&cfg).UnsafeNoFence = true
	return cfg
}

// WithoutLeadershipProof returns cfg with the leader lease (and the new
// leader's wait for an old lease to run out) switched off:
// the node answers from its cache whenever Raft last told it that it leads,
// as a deposed leader that has not heard the news would. A negative
// control: the fault suite must report the stale answers.
func WithoutLeadershipProof(cfg kahuna.Config) kahuna.Config {
	knobs(&cfg).UnsafeNoLeaseCheck = true
	return cfg
}

// WithEphemeralTokensFromZero returns cfg with ephemeral tokens unfenced:
// a new leader counts a name's tokens from its stored record (from 0 for a
// name only ever locked ephemerally), as before the token reach. A
// negative control: the fencing checker must report tokens going backwards
// across leader changes.
func WithEphemeralTokensFromZero(cfg kahuna.Config) kahuna.Config {
	knobs(&cfg).UnsafeTokensFromZero = true
	return cfg
}

// WithoutEvictionFloor returns cfg with an evicted ephemeral entry's token
// forgotten: the name's next grant counts from the stored record (from 0,
// or the partition's base) again. A negative control: under cache pressure
// the fencing checker must report tokens going backwards.
func WithoutEvictionFloor(cfg kahuna.Config) kahuna.Config {
	knobs(&cfg).UnsafeNoEvictFloor = true
	return cfg
}

// WithTokenRepeat returns cfg with the token rule broken: a grant to a
// new owner of a name with a record or a cached entry (of a semaphore's
// slot) takes the last grant's token again instead of one more. A
// negative control: the fencing checkers must report a token granted to
// two owners.
func WithTokenRepeat(cfg kahuna.Config) kahuna.Config {
	knobs(&cfg).UnsafeTokenRepeat = true
	return cfg
}

// WithGroupPartial returns cfg with the grants of a lock of several names
// proposed one by one, even when another of its names was busy. A
// negative control: a caller told busy must be found holding some of its
// names.
func WithGroupPartial(cfg kahuna.Config) kahuna.Config {
	knobs(&cfg).UnsafeGroupPartial = true
	return cfg
}

// WithoutRenewalFloor returns cfg with a persistent lease loaded at its
// stored expiry alone: a new leader (or a restarted node) forgets that
// renewals kept in its predecessor's memory promised it longer. A negative
// control: a holder must be found acting while a new owner holds.
func WithoutRenewalFloor(cfg kahuna.Config) kahuna.Config {
	knobs(&cfg).UnsafeNoRenewalFloor = true
	return cfg
}

// WithGroupApart returns cfg with a grant of several names in one record
// group applied record by record: one the fence refuses leaves the others
// applied. A negative control: a partial grant must be caught.
func WithGroupApart(cfg kahuna.Config) kahuna.Config {
	knobs(&cfg).UnsafeGroupApart = true
	return cfg
}

// WithProclaimAnyValue returns cfg with a proclaim taken from any owner
// with the election holder's candidate ID, not only from the holder: a
// proclaim delivered late undoes a later one. A negative control: the
// election checker must report an observer seeing a term's value go back.
func WithProclaimAnyValue(cfg kahuna.Config) kahuna.Config {
	knobs(&cfg).UnsafeProclaimAnyValue = true
	return cfg
}

// WithPermitOvercommit returns cfg with a semaphore's permits granted as
// if every slot were free, live ones included, and a read/write lock as if
// its holders' leases had lapsed. A negative control: the checkers must
// report more holders acting than the limit, and a writer acting beside
// another holder.
func WithPermitOvercommit(cfg kahuna.Config) kahuna.Config {
	knobs(&cfg).UnsafePermitOvercommit = true
	return cfg
}

// WithoutSweepFloor returns cfg with free records removed by the sweep
// without raising the partition's token floor: a name swept away is
// granted tokens from the old floor again (from 0), below its removed
// record's. A negative control: the fencing checker must report tokens
// going backwards.
func WithoutSweepFloor(cfg kahuna.Config) kahuna.Config {
	knobs(&cfg).UnsafeNoSweepFloor = true
	return cfg
}

// WithoutHandedOverLeases returns cfg with a new leader that drops the
// ephemeral leases handed over to it, though it waits none of them out: a
// planned move loses the locks while their holders still hold them. A
// negative control: judged as the grace promises, the suite must report
// another owner granted a lock its holder still holds.
func WithoutHandedOverLeases(cfg kahuna.Config) kahuna.Config {
	knobs(&cfg).UnsafeDropHandedOver = true
	return cfg
}

// WithoutUnsureHandOff returns cfg with a waiter whose grant's outcome is
// unknown (a hand-off whose Raft record timed out: it may hold the lock)
// told Busy or MustRetry, "certainly not granted", when it leaves the
// queue or is refused, as before such waiters were answered Errored. Its
// handle then counts its deadline from a later attempt. A negative
// control: the fault suite must find two holders.
func WithoutUnsureHandOff(cfg kahuna.Config) kahuna.Config {
	knobs(&cfg).UnsafeUnsureNotGranted = true
	return cfg
}

// PauseNode freezes n as a process pause would (SIGSTOP, a long GC pause, a
// VM freeze), as far as a process can freeze part of itself: calls that
// reach it wait at its door, and the Raft leader events it would act on
// are held back, so its own view of who leads stays as it was. Its clock
// and dragonboat keep running; cut its links with faults.Network too. The
// caller must ResumeNode it.
func PauseNode(n *kahuna.Node) { Inner(n).Pause() }

// ResumeNode lets the calls held by PauseNode in (they are answered as a
// resumed process would answer them: late), then delivers the held leader
// events.
func ResumeNode(n *kahuna.Node) { Inner(n).Resume() }

// ResumeCalls lets the calls held by PauseNode in but keeps n's leader
// events held back until ResumeNode: a resumed process serves the requests
// waiting in its sockets before its Raft has run a step and told it the
// news. (In process, dragonboat kept running through the pause, so the held
// events are already there; ResumeNode delivers them at once, and a call
// woken by it would race them.) ResumeNode must still be called.
func ResumeCalls(n *kahuna.Node) { Inner(n).ResumeCalls() }

// WithServeHook returns cfg with f starting every reign of the node: f must
// call serve once (partition.Options.OnServe). The fault tests record the
// instants around it as the reign's span.
func WithServeHook(cfg kahuna.Config, f func(p int, term uint64, serve func())) kahuna.Config {
	knobs(&cfg).OnServe = f
	return cfg
}

// Crash closes n as a crash would leave the cluster: nothing handed over
// or recorded for the next leader (its ephemeral leases are lost to it),
// though the node's own storage closes cleanly.
func Crash(n *kahuna.Node) error { return Inner(n).Crash() }

// TransferUnrelinquished asks Raft to move p from n's replica to to without
// dropping n's lease first: what happens when a transfer requested by a
// node that has just been deposed is forwarded by dragonboat to the new
// leader, or when a target paused with a TimeoutNow in its socket buffer
// campaigns after the old leader's grace ran out and it renewed its lease.
func TransferUnrelinquished(n *kahuna.Node, p int, to uint64) error {
	return Inner(n).TransferUnrelinquished(p, to)
}

// ServingNow reports whether n serves p at this instant, without taking
// any lock (safe inside a serve hook).
func ServingNow(n *kahuna.Node, p int) bool { return Inner(n).ServingNow(p) }

// WithoutTakeoverWait returns cfg with a new leader serving as soon as its
// epoch is fenced, without waiting out the leases an earlier leader may
// still hold: a negative control for the leader-transfer scenario.
func WithoutTakeoverWait(cfg kahuna.Config) kahuna.Config {
	knobs(&cfg).UnsafeNoTakeoverWait = true
	return cfg
}

// WithoutRaftTimingCheck returns cfg with Raft connections let in
// whatever the peer's tick (Config.RaftRTT): a negative control, members
// of different ticks then form one cluster, and their leases disagree.
func WithoutRaftTimingCheck(cfg kahuna.Config) kahuna.Config {
	knobs(&cfg).UnsafeAnyRaftTiming = true
	return cfg
}

// WithoutRaftTimingWait returns cfg with a member whose data dir last ran
// under another tick taking part in Raft at once, while leases it
// acknowledged under the old tick may still run: a negative control.
func WithoutRaftTimingWait(cfg kahuna.Config) kahuna.Config {
	knobs(&cfg).UnsafeNoTimingWait = true
	return cfg
}

// WithSweepEvery returns cfg with the sweep of free records run every d
// instead of every ReleasedRetention/10 (at least 1 s).
func WithSweepEvery(cfg kahuna.Config, d time.Duration) kahuna.Config {
	knobs(&cfg).SweepEvery = d
	return cfg
}

// Unfenced reports, for a node started WithoutFencing, how many records of
// a deposed epoch its state machines applied, and how many of those moved
// a lock behind a load of the current epoch (durability.Raft.Unfenced).
func Unfenced(n *kahuna.Node) (applied, behindLoads uint64) { return Inner(n).Unfenced() }

// StoredRecords counts the persistent records n stores, over every
// partition.
func StoredRecords(n *kahuna.Node) (int, error) { return Inner(n).StoredRecords() }

// WithStatfs returns cfg with the space guard measuring free and total
// bytes with f instead of the file system.
func WithStatfs(cfg kahuna.Config, f func(dir string) (free, total uint64, err error)) kahuna.Config {
	knobs(&cfg).Statfs = f
	return cfg
}

// CheckSpace makes n's space guard measure now, as its next tick would.
func CheckSpace(n *kahuna.Node) error { return Inner(n).CheckSpace() }

// ServingTerm reports whether n serves partition p now (its own view, as
// Leader reports it) and whether its Raft replica sees itself as p's
// leader, in term term: a node that serves while leads is true serves the
// reign of that term. A deposed node that has not heard the news (paused,
// or cut off) may serve with leads false. The fault tests sample it to
// record when a partition's leadership really changed (checker.Reign).
func ServingTerm(n *kahuna.Node, p int) (serving, leads bool, term uint64) {
	return Inner(n).ServingTerm(p)
}

// ResumeView delivers the leader events held since PauseNode, after
// ResumeCalls let the held calls in: in between, the node answers as the
// leader it believes it is, as a process that wakes from SIGSTOP does
// until its Raft steps down at its next quorum check or the first message
// of the new term. (In process, dragonboat kept running through the
// pause, so only the node's view can lag; with its links healed first, its
// Raft already follows the new leader and forwards whatever the node
// proposes meanwhile.)
func ResumeView(n *kahuna.Node) { Inner(n).ResumeView() }

// SetConfigChangeHook makes n call f(p, phase) when, as the leader of
// partition p, it proposes a membership change of p: phase "proposing"
// after it dropped its lease and before it proposes, and "applied" once
// the change applied (or failed), before it renews its lease. f runs on
// the proposing goroutine: a slow f is a slow change.
func SetConfigChangeHook(n *kahuna.Node, f func(p int, phase string)) {
	Inner(n).SetConfigChangeHook(f)
}

// LeaderLease is the leader lease of n (0: none).
func LeaderLease(n *kahuna.Node) time.Duration { return Inner(n).LeaderLease() }
