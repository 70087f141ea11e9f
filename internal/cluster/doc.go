// Package cluster is what a node does as a member of a cluster, above
// its lock calls: leader balancing (Balancer). It is handed the node's
// parts (partition.Leadership, the admin client) and a small Node
// interface for the rest, never the node itself.
package cluster
