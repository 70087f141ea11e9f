package node

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/kahunago/kahuna/admin"
)

// Leader balance.
//
// When a member joins or returns, the survivors lead every partition;
// nothing moves leaders back on its own. So every node runs a balancer,
// and each one moves only partitions it leads itself:
//
//   - Rule (balanceMove, a pure function): count the partitions each live
//     member leads, as this node sees the leaders. A partition this node
//     leads may go to one of its voters that is live and leads at least two
//     fewer partitions than this node; the target leading fewest wins (then
//     the partition's start-up place, p % voters, then the lowest ID). Moves
//     stop when no member leads two more than another: every member then
//     leads its fair share, ⌊P/N⌋ or ⌈P/N⌉ of P partitions over N members.
//   - Not busy: a partition moves only if its leader (or term) has not
//     changed for Config.LeaderBalanceCooldown as this node heard it, and
//     this node has not moved it within the cooldown. A new leader hears of
//     its own election, so a partition moved by anyone stays put for the
//     cooldown wherever it lands.
//   - One move at a time per node, per round (every cooldown/10, 100 ms to
//     1 s): it waits for the move to happen (or not) before the next.
//   - The target must be healthy: reachable over Raft, and its admin status
//     (GET admin.StatusPath, the view kahunactl status shows) says it runs
//     every partition and knows a leader for each, follows this node as
//     the partition's leader in this term, and has applied the partition's
//     log to within balanceMaxLag entries of this node. dragonboat exposes
//     no follower progress, so the status is the check; Raft also waits for
//     the target to have the whole log before it hands over.
//   - Safety, as for every transfer (docs/design.md): only the leader moves
//     a partition, and it drops its lease first (partition.Leadership.
//     RelinquishSteady, which also refuses while a membership change of the
//     partition is pending, under the lock Suspend takes), then checks it
//     still leads in that term before asking Raft.

const (
	// balanceMaxLag is how many entries of a partition's log a target may
	// have left to apply and still be taken for caught up.
	balanceMaxLag = 256
	// balanceStatusTimeout bounds the health check of a target.
	balanceStatusTimeout = 2 * time.Second
	// balanceTries bounds the targets tried in one round.
	balanceTries = 3
)

// balanceView is what the balancing rule needs to know: this node's view
// of the cluster at one instant.
type balanceView struct {
	self    uint64
	leaders []uint64        // partition → its leader as this node sees it (0: none known)
	voters  [][]uint64      // partition → its voters, sorted
	live    map[uint64]bool // the members this node can reach, itself included
	movable []bool          // partition → this node leads and serves it, and it is not busy
}

// balanceMove is the balancing rule (see the top of the file): the
// partition to hand over and the member to hand it to, if any, leaving
// out the members in skip (found unhealthy this round).
func balanceMove(v balanceView, skip map[uint64]bool) (p int, to uint64, ok bool) {
	leads := map[uint64]int{}
	for _, id := range v.leaders {
		if id != 0 {
			leads[id]++
		}
	}
	mine := leads[v.self]
	found := false
	var best balanceChoice
	for q, movable := range v.movable {
		if !movable || v.leaders[q] != v.self || len(v.voters[q]) == 0 {
			continue
		}
		home := v.voters[q][q%len(v.voters[q])]
		for _, t := range v.voters[q] {
			if t == v.self || !v.live[t] || skip[t] || mine-leads[t] < 2 {
				continue
			}
			c := balanceChoice{leads: leads[t], away: t != home, to: t, p: q}
			if !found || c.before(best) {
				best, found = c, true
			}
		}
	}
	return best.p, best.to, found
}

// balanceChoice is one possible move, ordered by before.
type balanceChoice struct {
	leads int    // partitions the target leads
	away  bool   // the target is not the partition's start-up place
	to    uint64 // the target
	p     int
}

// before orders moves: the target leading fewest, then a partition going
// back to its start-up place, then the lowest target ID and partition.
func (c balanceChoice) before(o balanceChoice) bool {
	if c.leads != o.leads {
		return c.leads < o.leads
	}
	if c.away != o.away {
		return !c.away
	}
	if c.to != o.to {
		return c.to < o.to
	}
	return c.p < o.p
}

// balanceEvery is the pause between balancing rounds for a cooldown.
func balanceEvery(cooldown time.Duration) time.Duration {
	return min(max(cooldown/10, 100*time.Millisecond), time.Second)
}

// startBalancer runs leader balancing until the node closes, unless
// Config.LeaderBalanceCooldown turned it off.
func (n *Node) startBalancer() {
	if n.cfg.LeaderBalanceCooldown < 0 {
		return
	}
	n.balanceDone = make(chan struct{})
	go func() {
		defer close(n.balanceDone)
		moved := make([]time.Time, n.cfg.Partitions) // when this node last moved each partition
		tick := time.NewTicker(balanceEvery(n.cfg.LeaderBalanceCooldown))
		defer tick.Stop()
		for {
			select {
			case <-n.life.Done():
				return
			case <-tick.C:
			}
			n.balanceRound(n.life, moved)
		}
	}()
}

// stopBalancer waits for the balancer to stop (Close ended n.life).
func (n *Node) stopBalancer() {
	if n.balanceDone != nil {
		<-n.balanceDone
	}
}

// balanceView gathers this node's view of the cluster for balanceMove,
// with this node's Raft status of each partition.
func (n *Node) balanceView(moved []time.Time) (balanceView, []admin.PartitionStatus) {
	now := time.Now()
	cooldown := n.cfg.LeaderBalanceCooldown
	v := balanceView{
		self:    n.cfg.NodeID,
		leaders: make([]uint64, n.cfg.Partitions),
		voters:  make([][]uint64, n.cfg.Partitions),
		live:    map[uint64]bool{n.cfg.NodeID: true},
		movable: make([]bool, n.cfg.Partitions),
	}
	for _, ps := range n.peers.stats() {
		v.live[ps.ID] = ps.Reachable
	}
	status := n.Status().Partitions
	for _, s := range status {
		p := s.Partition
		leader, self := n.leadership.LeaderOf(p)
		v.leaders[p] = leader
		v.voters[p] = s.Voters
		since := n.leaderSince(p)
		v.movable[p] = self && s.Serving && s.Running && !since.IsZero() &&
			now.Sub(since) >= cooldown && now.Sub(moved[p]) >= cooldown
	}
	return v, status
}

// balanceRound makes at most one balancing move: see the top of the file.
func (n *Node) balanceRound(ctx context.Context, moved []time.Time) {
	if !n.clustered() || n.closing.Load() || n.paused.Load() != nil {
		return
	}
	v, status := n.balanceView(moved)
	skip := map[uint64]bool{}
	for range balanceTries {
		p, to, ok := balanceMove(v, skip)
		if !ok {
			return
		}
		if err := n.balanceTarget(ctx, p, to, status[p]); err != nil {
			n.cfg.Logger.Debug("leader balancing: target not ready", "partition", p, "to", to, "err", err)
			skip[to] = true
			continue
		}
		n.balanceHandOver(ctx, v, p, to, moved)
		return
	}
}

// balanceTarget checks that member to can take partition p now, given
// this node's status of p: see the top of the file.
func (n *Node) balanceTarget(ctx context.Context, p int, to uint64, mine admin.PartitionStatus) error {
	m, ok := n.book.get(to)
	if !ok || m.Endpoint == "" {
		return fmt.Errorf("no endpoint known for node %d", to)
	}
	ctx, cancel := context.WithTimeout(ctx, balanceStatusTimeout)
	defer cancel()
	st, err := n.admin.Status(ctx, m.Endpoint)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(st.Partitions, func(s admin.PartitionStatus) bool { return s.Partition == p })
	switch {
	case !st.Healthy:
		return fmt.Errorf("node %d is not healthy (a partition not running, or without a known leader)", to)
	case st.NoSpace != "":
		return fmt.Errorf("node %d refuses persistent locks: %s", to, st.NoSpace)
	case i < 0 || !st.Partitions[i].Running:
		return fmt.Errorf("node %d does not run partition %d", to, p)
	case st.Partitions[i].Leader != n.cfg.NodeID || st.Partitions[i].Term != mine.Term:
		return fmt.Errorf("node %d sees partition %d led by %d in term %d, not by this node in term %d", to, p, st.Partitions[i].Leader, st.Partitions[i].Term, mine.Term)
	case st.Partitions[i].Applied+balanceMaxLag < mine.Applied:
		return fmt.Errorf("node %d has applied partition %d to index %d, this node to %d", to, p, st.Partitions[i].Applied, mine.Applied)
	}
	return nil
}

// balanceHandOver moves partition p to member to, as the leader: lease
// dropped first, while no membership change of p is pending, then checked
// to lead in that term still (a transfer asked of a follower is passed on
// to the leader, which would start it with its lease live).
func (n *Node) balanceHandOver(ctx context.Context, v balanceView, p int, to uint64, moved []time.Time) {
	term, ok := n.leadership.RelinquishSteady(p)
	if !ok || !n.backend.Leads(p, term) {
		return // no longer steady here: another round decides again
	}
	moved[p] = time.Now()
	n.balanceMoves.Add(1)
	leads := map[uint64]int{}
	for _, id := range v.leaders {
		leads[id]++
	}
	n.cfg.Logger.Info("leader balancing: handing partition over", "partition", p, "term", term, "to", to,
		"leads_here", leads[n.cfg.NodeID], "leads_there", leads[to])
	n.handOver(p, term, handOverTimeout)
	if err := n.backend.TransferLeadership(p, to); err != nil {
		n.cfg.Logger.Warn("leader balancing: transfer not requested", "partition", p, "to", to, "err", err)
		return
	}
	wctx, cancel := context.WithTimeout(ctx, spreadTimeout)
	defer cancel()
	if err := n.leadership.WaitNotSelf(wctx, p); err != nil {
		if ctx.Err() == nil {
			n.cfg.Logger.Info("leader balancing: partition stayed on this node", "partition", p, "to", to)
		}
		return
	}
	leader, _ := n.leadership.LeaderOf(p)
	n.cfg.Logger.Info("leader balancing: partition handed over", "partition", p, "leader", leader)
}
