package kahuna

// ServingTerm reports whether n serves partition p now (its own view, as
// Leader reports it) and whether its Raft replica sees itself as p's
// leader, in term term: a node that serves while leads is true serves the
// reign of that term. A deposed node that has not heard the news (paused,
// or cut off) may serve with leads false. The fault tests sample it to
// record when a partition's leadership really changed (checker.Reign).
func ServingTerm(n *Node, p int) (serving, leads bool, term uint64) {
	_, serving = n.Leader(p)
	if n.backend == nil || p < 0 || p >= n.cfg.Partitions {
		return serving, false, 0
	}
	leader, term, ok := n.backend.LeaderID(p)
	return serving, ok && leader == n.backend.ReplicaID(), term
}

// ResumeCalls and ResumeView are ResumeNode in two steps, for a process
// that wakes up: ResumeCalls lets the calls held by PauseNode in at once,
// ResumeView delivers the held leader events (call it after ResumeCalls).
// In between the node answers as the leader it believes it is. A process
// stopped while it led (SIGSTOP) still believes it leads when it wakes: its
// Raft steps down at its next quorum check or when the first message of
// the new term reaches it, and its own view follows. In this process
// dragonboat kept running through the pause, so only the node's view can
// lag; with its links healed first, its Raft learns the new leader at once
// and forwards whatever the node proposes meanwhile.
func ResumeCalls(n *Node) {
	if gate := n.paused.Swap(nil); gate != nil {
		close(*gate)
	}
}

// ResumeView: see ResumeCalls.
func ResumeView(n *Node) { n.leadership.Thaw() }
