package node

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"

	"github.com/kahunago/kahuna/admin"
	"github.com/kahunago/kahuna/durability"
)

// AdminHandler serves this node's admin API (package admin: partitions,
// leadership transfers, members, status) for operators, kahunactl and the
// other members. NewServer mounts it.
func (n *Node) AdminHandler() http.Handler { return admin.NewHandler(adminNode{n}, n.admin) }

// adminRoutes maps every admin path pattern to the node's AdminHandler.
func (n *Node) adminRoutes() map[string]http.Handler { return admin.Routes(n.AdminHandler()) }

// Status reports this node's view of every partition (local, no network:
// it may be stale), as GET admin.StatusPath does.
func (n *Node) Status() admin.NodeStatus {
	st := admin.NodeStatus{Node: n.cfg.NodeID, Healthy: !n.closing.Load()}
	if ready, waiting := n.Ready(); !ready {
		st.Healthy, st.Starting = false, waiting
	}
	st.NoSpace, _ = n.noSpace()
	for _, s := range n.backend.Status() {
		_, serving := n.leadership.Serving(s.Partition)
		if leader, _ := n.leadership.LeaderOf(s.Partition); s.Leader == 0 && leader != 0 {
			s.Leader = leader // the leader this node forwards to (a step ahead of dragonboat's cached view)
		}
		st.Partitions = append(st.Partitions, admin.PartitionStatus{
			Partition: s.Partition, Leader: s.Leader, Term: s.Term, Applied: s.Applied,
			Serving: serving, Voters: s.Voters, Running: s.Running,
		})
		if !s.Running || s.Leader == 0 {
			st.Healthy = false
		}
	}
	return st
}

// adminNode is the node as its admin API sees it (admin.Node): Node's
// own methods of the same names take this package's types.
type adminNode struct{ n *Node }

func (a adminNode) Partitions() admin.PartitionsView {
	v := admin.PartitionsView{Node: a.n.cfg.NodeID, Partitions: make([]admin.PartitionInfo, a.n.cfg.Partitions)}
	for p := range v.Partitions {
		leader, serving := a.n.Leader(p)
		v.Partitions[p] = admin.PartitionInfo{Partition: p, Leader: leader, Serving: serving}
	}
	return v
}

func (a adminNode) Status() admin.NodeStatus { return a.n.Status() }

// Members is the members as this node knows them: its address book, and
// the voters Raft has here (a voter it has no endpoint for included).
func (a adminNode) Members() admin.MembersView {
	n := a.n
	b := n.book.Snapshot()
	v := admin.MembersView{Node: n.cfg.NodeID, DeploymentID: n.backend.DeploymentID(), TokenHash: durability.TokenHash(n.cfg.InitialClusterToken), Removed: b.Removed}
	voterIn := map[uint64][]int{}
	for _, s := range n.backend.Status() {
		for _, id := range s.Voters {
			voterIn[id] = append(voterIn[id], s.Partition)
		}
	}
	ids := slices.Collect(maps.Keys(b.Members))
	for id := range voterIn {
		if _, ok := b.Members[id]; !ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		e := b.Members[id]
		v.Members = append(v.Members, admin.MemberInfo{ID: id, RaftAddress: e.RaftAddress, Endpoint: e.Endpoint, Joined: e.Joined, Partitions: voterIn[id]})
	}
	return v
}

func (a adminNode) AddMember(ctx context.Context, id uint64, raftAddress, endpoint string) error {
	return a.n.AddMember(ctx, id, admin.Member{RaftAddress: raftAddress, Endpoint: endpoint})
}

func (a adminNode) RemoveMember(ctx context.Context, id uint64) error {
	return a.n.RemoveMember(ctx, id)
}

func (a adminNode) TransferLeadership(p int, to uint64) (uint64, error) {
	err := a.n.TransferLeadership(p, to)
	var nl *NotLeaderError
	if errors.As(err, &nl) {
		return nl.Leader, notLeader{err}
	}
	return 0, err
}

// notLeader is a *NotLeaderError as the admin API needs it: its message,
// matching admin.ErrNotLeader.
type notLeader struct{ err error }

func (e notLeader) Error() string   { return e.err.Error() }
func (e notLeader) Unwrap() []error { return []error{e.err, admin.ErrNotLeader} }

func (a adminNode) Endpoint(id uint64) string {
	m, _ := a.n.book.Get(id)
	return m.Endpoint
}

// PeerChange serves another member's request (cluster.Members.Serve).
func (a adminNode) PeerChange(ctx context.Context, req admin.MemberRequest) (admin.MemberChangeResult, error) {
	return a.n.members.Serve(ctx, req)
}

func (a adminNode) ListLocks(ctx context.Context, req admin.LocksRequest) (admin.LocksView, error) {
	return a.n.listLocks(ctx, req)
}
