package kahuna

import "time"

// SetConfigChangeHook makes n call f(p, phase) when, as the leader of
// partition p, it proposes a membership change of p: phase "proposing"
// after it dropped its lease and before it proposes, and "applied" once
// the change applied (or failed), before it renews its lease. f runs on
// the proposing goroutine: a slow f is a slow change.
func SetConfigChangeHook(n *Node, f func(p int, phase string)) { n.n.SetConfigChangeHook(f) }

// LeaderLease is the leader lease of n (0: none).
func LeaderLease(n *Node) time.Duration { return n.n.LeaderLease() }
