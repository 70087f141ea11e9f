// Package cluster is what a node does as a member of a cluster, above
// its lock calls: membership changes and the address book of members
// (Members, members.go), joining an existing cluster (Members.OpenBook,
// members_join.go) and leader balancing (Balancer, balance.go). It is
// handed the node's parts (partition.Leadership, its Raft, the admin
// client, the forwarding peers) and small interfaces for the rest
// (MemberNode, BalancerNode), never the node itself: internal/node builds it and
// is its only user.
package cluster
