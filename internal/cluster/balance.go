package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/kahunago/kahuna/admin"
	"github.com/kahunago/kahuna/partition"
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
//     changed for the cooldown (Config.LeaderBalanceCooldown) as this node heard it, and
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

// BalancerNode is what the balancer needs of the node it runs on,
// besides the parts it is handed (Parts).
type BalancerNode interface {
	// Steady says whether a move may start now: the node is a member of a
	// cluster of more than one, and not closing or paused.
	Steady() bool
	// Reachable is every other member's reachability over Raft.
	Reachable() map[uint64]bool
	// Status is this node's admin status: each partition's voters,
	// leader, term and applied index as its Raft sees them.
	Status() admin.NodeStatus
	// LeaderSince is when p's leader or term last changed as this node
	// heard it (zero: never).
	LeaderSince(p int) time.Time
	// Endpoint is member id's client URL ("" when unknown).
	Endpoint(id uint64) string
	// Leads says whether this node's Raft leads p in term.
	Leads(p int, term uint64) bool
	// MoveLeader hands p's live ephemeral leases of term over to the
	// next leader, then asks Raft to move p to member to.
	MoveLeader(p int, term, to uint64) error
	// AwaitMove waits, until ctx ends, for p to leave this node after
	// MoveLeader, asking Raft again while it has not moved (Raft may drop
	// a transfer), and returns how many times the move was asked.
	AwaitMove(ctx context.Context, p int, term, to uint64) (tries int, err error)
}

// Parts are the node's parts a Balancer works with.
type Parts struct {
	Self       uint64
	Partitions int
	// Cooldown is how long a partition stays put after its leader
	// changed, and between moves (Config.LeaderBalanceCooldown); < 0:
	// no balancing.
	Cooldown   time.Duration
	Leadership *partition.Leadership
	Admin      *admin.Client // the members' admin status, for the health check
	Logger     *slog.Logger
	// WaitMove bounds the wait for a partition handed over to leave.
	WaitMove time.Duration
	Node     BalancerNode
}

// Balancer is one node's leader balancing (see the top of the file).
type Balancer struct {
	Parts
	moves atomic.Uint64
	done  chan struct{} // closed when it stopped; nil if it never ran
}

// StartBalancer runs leader balancing until ctx ends, unless
// p.Cooldown < 0.
func StartBalancer(ctx context.Context, p Parts) *Balancer {
	b := &Balancer{Parts: p}
	if p.Cooldown < 0 {
		return b
	}
	b.done = make(chan struct{})
	go func() {
		defer close(b.done)
		moved := make([]time.Time, p.Partitions) // when this node last moved each partition
		tick := time.NewTicker(balanceEvery(p.Cooldown))
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			b.round(ctx, moved)
		}
	}()
	return b
}

// Wait waits for the balancer to stop (its context ended).
func (b *Balancer) Wait() {
	if b != nil && b.done != nil {
		<-b.done
	}
}

// Moves is how many partitions the balancer handed over.
func (b *Balancer) Moves() uint64 {
	if b == nil {
		return 0
	}
	return b.moves.Load()
}

// view gathers this node's view of the cluster for balanceMove, with
// this node's Raft status of each partition.
func (b *Balancer) view(moved []time.Time) (balanceView, []admin.PartitionStatus) {
	now := time.Now()
	v := balanceView{
		self:    b.Self,
		leaders: make([]uint64, b.Partitions),
		voters:  make([][]uint64, b.Partitions),
		live:    map[uint64]bool{b.Self: true},
		movable: make([]bool, b.Partitions),
	}
	for id, up := range b.Node.Reachable() {
		v.live[id] = up
	}
	status := b.Node.Status().Partitions
	for _, s := range status {
		p := s.Partition
		leader, self := b.Leadership.LeaderOf(p)
		v.leaders[p] = leader
		v.voters[p] = s.Voters
		since := b.Node.LeaderSince(p)
		v.movable[p] = self && s.Serving && s.Running && !since.IsZero() &&
			now.Sub(since) >= b.Cooldown && now.Sub(moved[p]) >= b.Cooldown
	}
	return v, status
}

// round makes at most one balancing move: see the top of the file.
func (b *Balancer) round(ctx context.Context, moved []time.Time) {
	if !b.Node.Steady() {
		return
	}
	v, status := b.view(moved)
	skip := map[uint64]bool{}
	for range balanceTries {
		p, to, ok := balanceMove(v, skip)
		if !ok {
			return
		}
		if err := b.target(ctx, p, to, status[p]); err != nil {
			b.Logger.Debug("leader balancing: target not ready", "partition", p, "to", to, "err", err)
			skip[to] = true
			continue
		}
		b.handOver(ctx, v, p, to, moved)
		return
	}
}

// target checks that member to can take partition p now, given this
// node's status of p: see the top of the file.
func (b *Balancer) target(ctx context.Context, p int, to uint64, mine admin.PartitionStatus) error {
	endpoint := b.Node.Endpoint(to)
	if endpoint == "" {
		return fmt.Errorf("no endpoint known for node %d", to)
	}
	ctx, cancel := context.WithTimeout(ctx, balanceStatusTimeout)
	defer cancel()
	st, err := b.Admin.Status(ctx, endpoint)
	if err != nil {
		return fmt.Errorf("status of node %d: %w", to, err)
	}
	i := slices.IndexFunc(st.Partitions, func(s admin.PartitionStatus) bool { return s.Partition == p })
	switch {
	case !st.Healthy:
		return fmt.Errorf("node %d is not healthy (a partition not running, or without a known leader)", to)
	case st.NoSpace != "":
		return fmt.Errorf("node %d refuses persistent locks: %s", to, st.NoSpace)
	case i < 0 || !st.Partitions[i].Running:
		return fmt.Errorf("node %d does not run partition %d", to, p)
	case st.Partitions[i].Leader != b.Self || st.Partitions[i].Term != mine.Term:
		return fmt.Errorf("node %d sees partition %d led by %d in term %d, not by this node in term %d", to, p, st.Partitions[i].Leader, st.Partitions[i].Term, mine.Term)
	case st.Partitions[i].Applied+balanceMaxLag < mine.Applied:
		return fmt.Errorf("node %d has applied partition %d to index %d, this node to %d", to, p, st.Partitions[i].Applied, mine.Applied)
	}
	return nil
}

// handOver moves partition p to member to, as the leader: lease dropped
// first, while no membership change of p is pending, then checked to
// lead in that term still (a transfer asked of a follower is passed on
// to the leader, which would start it with its lease live).
func (b *Balancer) handOver(ctx context.Context, v balanceView, p int, to uint64, moved []time.Time) {
	term, ok := b.Leadership.RelinquishSteady(p)
	if !ok || !b.Node.Leads(p, term) {
		return // no longer steady here: another round decides again
	}
	moved[p] = time.Now()
	b.moves.Add(1)
	leads := map[uint64]int{}
	for _, id := range v.leaders {
		leads[id]++
	}
	b.Logger.Info("leader balancing: handing partition over", "partition", p, "term", term, "to", to,
		"leads_here", leads[b.Self], "leads_there", leads[to])
	if err := b.Node.MoveLeader(p, term, to); err != nil {
		b.Logger.Warn("leader balancing: transfer not requested", "partition", p, "to", to, "err", err)
		return
	}
	wctx, cancel := context.WithTimeout(ctx, b.WaitMove)
	defer cancel()
	tries, err := b.Node.AwaitMove(wctx, p, term, to)
	switch {
	case err == nil:
		leader, _ := b.Leadership.LeaderOf(p)
		b.Logger.Info("leader balancing: partition handed over", "partition", p, "leader", leader, "tries", tries)
	case ctx.Err() != nil: // closing
	case wctx.Err() != nil:
		b.Logger.Info("leader balancing: partition stayed on this node", "partition", p, "to", to, "tries", tries)
	default:
		b.Logger.Info("leader balancing: move abandoned", "partition", p, "to", to, "tries", tries, "err", err)
	}
}
