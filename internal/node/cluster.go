package node

import (
	"time"

	"github.com/kahunago/kahuna/admin"
	"github.com/kahunago/kahuna/internal/cluster"
)

// startBalancer runs leader balancing (internal/cluster) until the node
// closes, unless Config.LeaderBalanceCooldown turned it off.
func (n *Node) startBalancer() {
	n.balancer = cluster.StartBalancer(n.life, cluster.Parts{
		Self:       n.cfg.NodeID,
		Partitions: n.cfg.Partitions,
		Cooldown:   n.cfg.LeaderBalanceCooldown,
		Leadership: n.leadership,
		Admin:      n.admin,
		Logger:     n.cfg.Logger,
		WaitMove:   spreadTimeout,
		Node:       clusterNode{n},
	})
}

// clusterNode is the node as internal/cluster sees it (cluster.Node).
type clusterNode struct{ n *Node }

func (c clusterNode) Steady() bool {
	return c.n.clustered() && !c.n.closing.Load() && c.n.paused.Load() == nil
}

func (c clusterNode) Reachable() map[uint64]bool {
	up := map[uint64]bool{}
	for _, ps := range c.n.peers.stats() {
		up[ps.ID] = ps.Reachable
	}
	return up
}

func (c clusterNode) Status() admin.NodeStatus { return c.n.Status() }

func (c clusterNode) LeaderSince(p int) time.Time { return c.n.leaderSince(p) }

func (c clusterNode) Endpoint(id uint64) string {
	m, _ := c.n.book.get(id)
	return m.Endpoint
}

func (c clusterNode) Leads(p int, term uint64) bool { return c.n.backend.Leads(p, term) }

func (c clusterNode) Transfer(p int, term, to uint64) error { return c.n.moveLeader(p, term, to) }
