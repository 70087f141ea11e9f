package kahuna

// ServingTerm reports whether n serves partition p now (its own view, as
// Leader reports it) and whether its Raft replica sees itself as p's
// leader, in term term: a node that serves while leads is true serves the
// reign of that term. A deposed node that has not heard the news (paused,
// or cut off) may serve with leads false. The fault tests sample it to
// record when a partition's leadership really changed (checker.Reign).
func ServingTerm(n *Node, p int) (serving, leads bool, term uint64) { return n.n.ServingTerm(p) }

// ResumeView delivers the leader events held since PauseNode, after
// ResumeCalls let the held calls in: in between, the node answers as the
// leader it believes it is, as a process that wakes from SIGSTOP does
// until its Raft steps down at its next quorum check or the first message
// of the new term. (In process, dragonboat kept running through the
// pause, so only the node's view can lag; with its links healed first, its
// Raft already follows the new leader and forwards whatever the node
// proposes meanwhile.)
func ResumeView(n *Node) { n.n.ResumeView() }
