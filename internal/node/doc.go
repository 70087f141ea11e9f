// Package node is the running kahuna node under the public package: it
// assembles a node (Open: Raft, the lock actors, partition leadership,
// the space guard, the sweeper, and internal/cluster's membership and
// balancer, handed the node's parts: cluster.go), routes each call to the
// partition's leader and forwards it there at most once, keeps the
// forwarding peers, and serves the admin API and the wire server
// (NewServer). The root package wraps a *Node in the public kahuna.Node
// and converts kahuna.Config into Config.
//
// The path of a lock call, one lease.Request checked once where it enters
// (Request.Check) and carried as a lease.Checked from there:
//
//	Node.TryLock (check) ─────────────┐
//	wire server (check) ─ Node.Do ────┴─ do (route.go) ─┬─ this node serves the partition ─ actors.Ring ─ durability
//	                                                    └─ another leads it ─ hop ─ forward ─ peer's server (check) ─ Local.Do (never forwards again)
package node
