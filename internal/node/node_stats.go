package node

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/kahunago/kahuna/admin"
	"github.com/kahunago/kahuna/durability"
	"github.com/kahunago/kahuna/lease"
)

// requestTrace follows one request through (*Node).do.
type requestTrace struct {
	start     time.Time // zero: nobody observes, nothing to record
	partition int       // the request's, looked up once
	forwarded bool
	to        uint64 // the leader forward is about to send the request to
}

// startRequest begins the trace of a request to partition p, if anyone is
// to hear of it.
func (n *Node) startRequest(ctx context.Context, p int, forwarded bool) requestTrace {
	if n.cfg.Observe == nil && !n.cfg.Logger.Enabled(ctx, slog.LevelDebug) {
		return requestTrace{}
	}
	return requestTrace{start: time.Now(), partition: p, forwarded: forwarded}
}

// maxLoggedResource bounds the resource name in a log line.
const maxLoggedResource = 128

// endRequest reports the answer r (or the failure err) to req to
// Config.Observe and, at debug, to the Logger.
func (n *Node) endRequest(ctx context.Context, t *requestTrace, req lease.Request, r lease.Result, err error) {
	if t.start.IsZero() {
		return
	}
	n.endRequestAt(ctx, t, req, r, err, time.Now())
}

// endRequestAt is endRequest for a request answered at end.
func (n *Node) endRequestAt(ctx context.Context, t *requestTrace, req lease.Request, r lease.Result, err error, end time.Time) {
	if t.start.IsZero() {
		return
	}
	ev := admin.RequestEvent{
		Op: req.Op, Resource: req.Resource, Durability: req.Durability,
		Partition: t.partition,
		Status:    r.Status, Err: err, Latency: end.Sub(t.start),
		Forwarded: t.forwarded, ForwardedTo: t.to,
	}
	if ev.ForwardedTo == n.cfg.NodeID {
		ev.ForwardedTo = 0 // leader here, not serving yet: not sent
	}
	if err != nil {
		ev.Status = lease.Errored
		if errors.Is(err, lease.ErrNotApplied) {
			ev.Status = lease.MustRetry
		}
	}
	if n.cfg.Observe != nil {
		n.cfg.Observe(ev)
	}
	if !n.cfg.Logger.Enabled(ctx, slog.LevelDebug) {
		return
	}
	resource := ev.Resource
	if len(resource) > maxLoggedResource {
		resource = resource[:maxLoggedResource] + "…"
	}
	attrs := make([]slog.Attr, 0, 9)
	attrs = append(attrs,
		slog.String("op", ev.Op.String()), slog.String("resource", resource),
		slog.String("durability", ev.Durability.String()), slog.Int("partition", ev.Partition),
		slog.String("status", ev.Status.String()), slog.Duration("latency", ev.Latency))
	if ev.ForwardedTo != 0 {
		attrs = append(attrs, slog.Uint64("forwarded_to", ev.ForwardedTo))
	}
	if ev.Forwarded {
		attrs = append(attrs, slog.Bool("forwarded_in", true))
	}
	if err != nil {
		attrs = append(attrs, slog.Any("err", err))
	}
	n.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "request", attrs...)
}

// PartitionStats is what a node knows of one partition.
type PartitionStats struct {
	Partition int
	Leader    uint64 // the leader as this node last heard (0: none known)
	Term      uint64 // the term of that leader
	Serving   bool   // this node answers for the partition now
	// LeaderChanges counts the new leaders this node heard of since Open.
	LeaderChanges uint64
}

// partitionLog keeps the latest leader of each partition, for
// PartitionStats and the log.
type partitionLog struct {
	mu    sync.Mutex
	parts []PartitionStats
	since []time.Time // when each partition's leader or term last changed (leader balancing)
}

// observeLeader is the node's durability.RaftConfig.OnLeaderChange: it
// records and logs the event, then passes it to the partition leadership.
// It runs on dragonboat's event goroutine and must not block.
func (n *Node) observeLeader(ev durability.LeaderEvent) {
	if ev.Partition >= 0 && ev.Partition < n.cfg.Partitions {
		pl := &n.partLog
		pl.mu.Lock()
		if pl.parts == nil {
			pl.parts = make([]PartitionStats, n.cfg.Partitions)
			pl.since = make([]time.Time, n.cfg.Partitions)
		}
		ps := &pl.parts[ev.Partition]
		changed := ev.LeaderID != 0 && ev.LeaderID != ps.Leader
		if changed {
			ps.LeaderChanges++
		}
		if ev.LeaderID != ps.Leader || ev.Term != ps.Term {
			pl.since[ev.Partition] = time.Now()
		}
		ps.Leader, ps.Term = ev.LeaderID, ev.Term
		pl.mu.Unlock()
		switch {
		case changed && ev.IsSelf: // partition.Leadership logs "serving partition" once fenced
			n.cfg.Logger.Debug("partition leader is this node", "partition", ev.Partition, "term", ev.Term)
		case changed:
			n.cfg.Logger.Info("partition leader", "partition", ev.Partition, "leader", ev.LeaderID, "term", ev.Term)
		case ev.LeaderID == 0:
			n.cfg.Logger.Debug("partition has no leader (electing)", "partition", ev.Partition, "term", ev.Term)
		}
	}
	n.leadership.Observe(ev)
}

// leaderSince is when this node last heard partition p's leader or term
// change (zero: never).
func (n *Node) leaderSince(p int) time.Time {
	n.partLog.mu.Lock()
	defer n.partLog.mu.Unlock()
	if n.partLog.since == nil {
		return time.Time{}
	}
	return n.partLog.since[p]
}

// PartitionStats reports every partition as this node sees it. It is
// cheap: meant for metrics scrapes and admin pages.
func (n *Node) PartitionStats() []PartitionStats {
	out := make([]PartitionStats, n.cfg.Partitions)
	n.partLog.mu.Lock()
	copy(out, n.partLog.parts)
	n.partLog.mu.Unlock()
	for p := range out {
		out[p].Partition = p
		_, out[p].Serving = n.leadership.Serving(p)
	}
	return out
}

// PeerStats is this node's view of one other member.
type PeerStats struct {
	ID uint64
	// Known is false until the first Raft connection to the peer succeeded
	// or failed; Reachable reports the latest of those.
	Known, Reachable bool
}

// PeerStats reports the other members, in ID order.
func (n *Node) PeerStats() []PeerStats {
	out := n.peers.stats()
	slices.SortFunc(out, func(a, b PeerStats) int { return cmp.Compare(a.ID, b.ID) })
	return out
}
