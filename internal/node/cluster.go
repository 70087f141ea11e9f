package node

import (
	"context"
	"errors"
	"time"

	"github.com/kahunago/kahuna/admin"
	"github.com/kahunago/kahuna/durability"
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

// clusterNode is the node as internal/cluster sees it (cluster.BalancerNode
// and cluster.MemberNode).
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
	m, _ := c.n.book.Get(id)
	return m.Endpoint
}

func (c clusterNode) Leads(p int, term uint64) bool { return c.n.backend.Leads(p, term) }

func (c clusterNode) MoveLeader(p int, term, to uint64) error { return c.n.moveLeader(p, term, to) }

func (c clusterNode) AwaitMove(ctx context.Context, p int, term, to uint64) (int, error) {
	return c.n.awaitMove(ctx, p, term, to)
}

// ErrMemberRemoved: the ID was removed from the cluster; Raft never lets a
// removed ID back (its log and votes are gone with it). Add the node under
// a new ID. It is the admin API's error, so either name matches it.
var ErrMemberRemoved = cluster.ErrMemberRemoved

// openMembers sets up the node's membership (internal/cluster) and loads
// or creates its address book before Raft starts, joining the cluster if
// this is a new member (cluster.Members.OpenBook). Raft and leadership
// are handed over once they run.
func (n *Node) openMembers() error {
	n.members = &cluster.Members{
		Self:       n.cfg.NodeID,
		Partitions: n.cfg.Partitions,
		Admin:      n.admin,
		Peers:      n.peers,
		Logger:     n.cfg.Logger,
		Node:       clusterNode{n},
	}
	if err := n.members.OpenBook(n.join()); err != nil {
		return err
	}
	n.book = n.members.Book
	return nil
}

// join is what the node's config says of the cluster it opens in.
func (n *Node) join() cluster.Join {
	return cluster.Join{
		DataDir:     n.cfg.DataDir,
		RaftAddress: n.cfg.RaftAddress,
		Members:     n.cfg.Members,
		Existing:    n.cfg.InitialClusterState != durability.ClusterStateNew,
		TokenHash:   durability.TokenHash(n.cfg.InitialClusterToken),
	}
}

// AddMember adds node id, reachable at m, to every partition as a voter
// (cluster.Members.Add).
func (n *Node) AddMember(ctx context.Context, id uint64, m admin.Member) error {
	return n.members.Add(ctx, id, m)
}

// RemoveMember removes node id from every partition for good
// (cluster.Members.Remove).
func (n *Node) RemoveMember(ctx context.Context, id uint64) error {
	return n.members.Remove(ctx, id)
}

// Members returns the cluster's members as this node knows them (its
// address book: Raft addresses and endpoints), this node included.
func (n *Node) Members() map[uint64]admin.Member { return n.book.Members() }

func (c clusterNode) CanChangeMembers() error {
	n := c.n
	switch {
	case n.closing.Load():
		return ErrClosed
	case n.leaderLease() == 0:
		// Leadership was set up without a lease (no one else could be
		// elected); a second voter would make that unsafe.
		return errors.New("kahuna: a node started as a single node cannot take members: found a cluster (Members with every node) instead")
	case n.cfg.RaftAddress == "":
		return errors.New("kahuna: this node has no Raft address other nodes can reach")
	}
	return nil
}

func (c clusterNode) Transfer(p int, to uint64) error { return c.n.transfer(p, to) }

// ConfigChangeHook calls the test hook, if any (SetConfigChangeHook).
func (c clusterNode) ConfigChangeHook(p int, phase string) {
	if f := c.n.ccHook.Load(); f != nil {
		(*f)(p, phase)
	}
}
