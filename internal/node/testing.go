package node

import (
	"math"
	"time"

	"github.com/kahunago/kahuna/durability"
)

// The hooks below reach into a running node for this module's tests
// (with Config.TestingKnobs): the fault suite pauses, crashes and samples
// nodes with them. Nothing else calls them.

// Pause freezes n as a process pause would (SIGSTOP, a long GC pause, a
// VM freeze), as far as a process can freeze part of itself: calls that
// reach it wait at its door, and the Raft leader events it would act on
// are held back, so its own view of who leads stays as it was. Its clock
// and dragonboat keep running. The caller must Resume it.
func (n *Node) Pause() {
	gate := make(chan struct{})
	n.paused.Store(&gate)
	n.leadership.Freeze()
}

// Resume lets the calls held by Pause in, then delivers the held leader
// events.
func (n *Node) Resume() {
	n.ResumeCalls()
	n.leadership.Thaw()
}

// ResumeCalls lets the calls held by Pause in but keeps the leader events
// held back until Resume or ResumeView.
func (n *Node) ResumeCalls() {
	if gate := n.paused.Swap(nil); gate != nil {
		close(*gate)
	}
}

// ResumeView delivers the leader events held since Pause.
func (n *Node) ResumeView() { n.leadership.Thaw() }

// Crash closes n as a crash would leave the cluster: nothing handed over
// or recorded for the next leader, though its own storage closes cleanly.
func (n *Node) Crash() error {
	n.crash.Store(true)
	return n.Close()
}

// TransferUnrelinquished asks Raft to move p to to without dropping n's
// lease first.
func (n *Node) TransferUnrelinquished(p int, to uint64) error {
	return n.backend.TransferLeadership(p, to)
}

// ServingNow reports whether n serves p at this instant, without taking
// any lock (safe inside a serve hook).
func (n *Node) ServingNow(p int) bool {
	_, ok := n.leadership.Serving(p)
	return ok
}

// ServingTerm reports whether n serves p now, and whether its Raft
// replica sees itself as p's leader, in term term.
func (n *Node) ServingTerm(p int) (serving, leads bool, term uint64) {
	_, serving = n.Leader(p)
	if n.backend == nil || p < 0 || p >= n.cfg.Partitions {
		return serving, false, 0
	}
	leader, term, ok := n.backend.LeaderID(p)
	return serving, ok && leader == n.backend.ReplicaID(), term
}

// StoredRecords counts the persistent records n stores, over every
// partition.
func (n *Node) StoredRecords() (int, error) {
	total := 0
	for p := range n.cfg.Partitions {
		err := n.backend.Released(p, math.MaxInt64, "", 0, func(durability.Record) bool { total++; return true })
		if err != nil {
			return 0, err
		}
	}
	return total, nil
}

// Unfenced reports what n's state machines applied with their fence off
// (durability.Raft.Unfenced).
func (n *Node) Unfenced() (applied, behindLoads uint64) { return n.backend.Unfenced() }

// CheckSpace makes n's space guard measure now, as its next tick would.
func (n *Node) CheckSpace() error {
	_, _, err := n.space.Check()
	return err
}

// SetConfigChangeHook makes n call f(p, phase) when, as the leader of
// partition p, it proposes a membership change of p: "proposing" after it
// dropped its lease, "applied" once the change applied (or failed),
// before it renews its lease. nil removes the hook.
func (n *Node) SetConfigChangeHook(f func(p int, phase string)) {
	if f == nil {
		n.ccHook.Store(nil)
		return
	}
	n.ccHook.Store(&f)
}

// LeaderLease is the leader lease of n (0: none).
func (n *Node) LeaderLease() time.Duration { return n.leaderLease() }
