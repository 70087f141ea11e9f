package node

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kahunago/kahuna/actors"
	"github.com/kahunago/kahuna/admin"
	"github.com/kahunago/kahuna/durability"
	"github.com/kahunago/kahuna/internal/cluster"
	"github.com/kahunago/kahuna/lease"
	"github.com/kahunago/kahuna/partition"
	"github.com/kahunago/kahuna/space"
	"github.com/kahunago/kahuna/sweep"
	"github.com/kahunago/kahuna/transport"
)

// ErrClosed is returned by calls on a closed Node, and by calls still in
// flight when Close gave up waiting for them.
var ErrClosed = errors.New("kahuna: node closed")

// ErrNoSpace is returned by Open when the data dir's file system has less
// free space than Config.DiskReserve, or the store is over
// Config.StoreQuota: starting would only fill the disk.
var ErrNoSpace = errors.New("kahuna: no space")

// errClosedNotApplied is ErrClosed for a call that never entered the node.
var errClosedNotApplied = fmt.Errorf("%w (%w)", ErrClosed, lease.ErrNotApplied)

const (
	// closeDrainTimeout bounds how long Close waits for calls in flight.
	closeDrainTimeout = 5 * time.Second
	// spreadTimeout bounds how long Open waits for leaders to move.
	spreadTimeout = 3 * time.Second
)

// Node is a running lock node (kahuna.Node wraps one). It implements
// lease.WaitLocker, lease.Doer and transport.Watcher.
type Node struct {
	cfg        settings
	backend    *durability.Raft
	leadership *partition.Leadership
	ring       *actors.Ring
	peers      *peers
	server     *transport.Server // nil unless Config.ListenAddress or Listener
	listenAddr string
	members    *cluster.Members // membership changes and joining (cluster.go)
	book       *cluster.Book    // members and their endpoints: members.Book
	timing     *raftTiming

	// ccHook, if set, is called by the leader proposing a membership
	// change (tests only: SetConfigChangeHook).
	ccHook atomic.Pointer[func(p int, phase string)]

	unlockDir func()      // releases the data dir's lock (layout.go)
	ready     atomic.Bool // WaitReady has returned nil

	inflight atomic.Int64
	closing  atomic.Bool
	crash    atomic.Bool // Close hands nothing over, as a crash would (Crash, tests only)
	// life ends when Close starts, so waiting calls stop waiting at once
	// instead of holding Close up.
	life      context.Context
	endLife   context.CancelFunc
	drained   chan struct{}
	drainOnce sync.Once
	closeOnce sync.Once
	closeErr  error

	// paused, when set, holds calls at the door (Pause, tests only).
	paused atomic.Pointer[chan struct{}]

	partLog partitionLog // node_stats.go

	balancer  *cluster.Balancer // leader balancing (cluster.go); nil before Open starts it
	admin     *admin.Client     // admin requests to other members (peer_auth.go)
	space     *space.Guard      // nil: no data dir, nothing to guard
	sweeper   *sweep.Sweeper    // nil: records are kept forever
	sweepDone chan struct{}
	spaceDone chan struct{}
}

var _ lease.WaitLocker = (*Node)(nil)

// Open starts a node and returns once it serves every partition.
func Open(cfg Config) (*Node, error) {
	n, err := Start(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.StartTimeout)
	defer cancel()
	if err := n.WaitReady(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

// Start is Open up to the wait for the cluster: the node runs, serves
// its API on Config.Listener or ListenAddress (lock calls answer
// MustRetry, /healthz 503 with what it waits for, the admin status
// what it sees), and joins Raft; WaitReady then waits until every
// partition is served. cmd/kahuna serves its own ports in between, so an
// operator can ask a starting member what it waits for.
func Start(cfg Config) (*Node, error) {
	n, err := open(cfg)
	if err != nil {
		// Taken over, so closed here: the node's Close closes a listener
		// it started serving on, but a failure may come before.
		for _, l := range []net.Listener{cfg.Listener, cfg.RaftListener} {
			if l != nil {
				_ = l.Close()
			}
		}
	}
	return n, err
}

func open(c Config) (*Node, error) {
	// The node keeps its own copy: a caller may change its map later
	// (a test adding a member did, racing the balancer's reads).
	c.Members = maps.Clone(c.Members)
	if c.Partitions == 0 {
		// The data dir's count, so a dir created under another default
		// keeps opening.
		p, err := recordedPartitions(c.DataDir)
		if err != nil {
			return nil, err
		}
		c.Partitions = p
	}
	cfg, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	if unsafeKnobs != nil {
		if err := unsafeKnobs(&cfg.knobs, cfg.Logger); err != nil {
			return nil, err
		}
	}
	unlockDir, err := lockDataDir(cfg.DataDir) // layout.go
	if err != nil {
		return nil, err
	}
	opened := false
	defer func() {
		if !opened {
			unlockDir()
		}
	}()
	if err := checkLayout(cfg.Config); err != nil {
		return nil, err
	}
	dial, err := cfg.peerDialOptions() // peer_auth.go
	if err != nil {
		return nil, fmt.Errorf("kahuna: open: %w", err)
	}
	adminHTTP, err := cfg.adminClient() // peer_auth.go
	if err != nil {
		return nil, fmt.Errorf("kahuna: open: %w", err)
	}
	n := &Node{cfg: cfg, unlockDir: unlockDir, drained: make(chan struct{}), peers: newPeers(cfg.Members, cfg.NodeID, dial...),
		admin: admin.NewClient(admin.WithHTTPClient(adminHTTP), admin.WithPeerSecret(cfg.peerSecret()), admin.WithTimeout(adminTimeout))}
	n.peers.logger = cfg.Logger
	n.life, n.endLife = context.WithCancel(context.Background())
	if err := n.checkSpace(); err != nil {
		return nil, err
	}
	if err := n.openMembers(); err != nil {
		return nil, err
	}
	raftCfg := durability.RaftConfig{RTT: cfg.RaftRTT}
	n.timing = newRaftTiming(raftCfg.Timing())
	if err := n.settleTiming(raftCfg.Timing()); err != nil { // timing.go
		return nil, err
	}
	raftMembers := map[uint64]string{}
	for id, m := range cfg.Members {
		raftMembers[id] = m.RaftAddress
	}
	n.leadership = partition.NewLeadership(cfg.Partitions, partition.Options{
		Lease:                n.leaderLease(),
		TakeoverWait:         n.takeoverWait(),
		EphemeralFencingOnly: cfg.EphemeralFencingOnly || cfg.knobs.UnsafeTokensFromZero,
		UnsafeNoLease:        cfg.knobs.UnsafeNoLeaseCheck,
		OnServe:              cfg.knobs.OnServe,
		Logger:               cfg.Logger,
	})
	n.backend, err = durability.OpenRaft(durability.RaftConfig{
		Dir:                 cfg.DataDir,
		WALDir:              cfg.WALDir,
		RaftAddress:         cfg.RaftAddress,
		Listener:            cfg.RaftListener,
		ReplicaID:           cfg.NodeID,
		Members:             raftMembers,
		Partitions:          cfg.Partitions,
		RTT:                 cfg.RaftRTT,
		Logger:              cfg.Logger,
		LibraryLogLevel:     cfg.RaftLogLevel,
		OnLeaderChange:      n.observeLeader, // node_stats.go
		OnPeer:              n.peers.observe,
		OnPeerTiming:        n.timing.observe, // timing.go
		UnsafeAnyTiming:     cfg.knobs.UnsafeAnyRaftTiming,
		Transport:           cfg.knobs.RaftTransport,
		WrapTransport:       cfg.knobs.RaftTransportWrap,
		ProposalTimeout:     cfg.knobs.ProposalTimeout,
		UnsafeNoFence:       cfg.knobs.UnsafeNoFence,
		UnsafeAppliedFirst:  cfg.knobs.UnsafeAppliedFirst,
		UnsafeNoSweepFloor:  cfg.knobs.UnsafeNoSweepFloor,
		UnsafeGroupApart:    cfg.knobs.UnsafeGroupApart,
		InitialClusterState: cfg.InitialClusterState,
		ClusterToken:        cfg.InitialClusterToken,
		MutualTLS:           cfg.peerTLS(),
		CAFile:              cfg.PeerCAFile,
		CertFile:            cfg.PeerCertFile,
		KeyFile:             cfg.PeerKeyFile,
	})
	if err != nil {
		return nil, fmt.Errorf("kahuna: open: %w", err)
	}
	var tokens actors.TokenWindows = n.leadership
	if cfg.knobs.UnsafeTokensFromZero {
		tokens = nil
	}
	n.ring, err = actors.NewRing(actors.Config{
		Actors:                 cfg.LockActors,
		CacheEntryTTL:          cfg.CacheEntryTTL,
		CacheEntriesToRemove:   cfg.CacheEntriesToRemove,
		MaxEntries:             (cfg.MaxCachedEntries + cfg.LockActors - 1) / cfg.LockActors,
		MaxQueued:              cfg.MaxQueuedPerLock,
		MaxPending:             cfg.MaxPendingPerActor,
		Backend:                n.backend,
		Serving:                n.leadership.Serving,
		Tokens:                 tokens,
		UnsafeNoEvictionFloor:  cfg.knobs.UnsafeNoEvictFloor,
		UnsafeTokenRepeat:      cfg.knobs.UnsafeTokenRepeat,
		UnsafePermitOvercommit: cfg.knobs.UnsafePermitOvercommit,
		UnsafeProclaimAnyValue: cfg.knobs.UnsafeProclaimAnyValue,
		UnsafeGroupPartial:     cfg.knobs.UnsafeGroupPartial,
		UnsafeNoRenewalFloor:   cfg.knobs.UnsafeNoRenewalFloor,
		UnsafeUnsureNotGranted: cfg.knobs.UnsafeUnsureNotGranted,
		UnsafeDropHandedOver:   cfg.knobs.UnsafeDropHandedOver,
		Now:                    cfg.Clock,
		Logger:                 cfg.Logger,
	})
	if err != nil {
		_ = n.backend.Close()
		return nil, fmt.Errorf("kahuna: open: %w", err)
	}
	n.leadership.Start(n.backend, n.ring)
	n.members.Leadership, n.members.Raft = n.leadership, n.backend
	if cfg.ListenAddress != "" || cfg.Listener != nil {
		if err := n.serve(); err != nil {
			_ = n.Close()
			return nil, fmt.Errorf("kahuna: open: %w", err)
		}
	}
	opened = true // Close unlocks the dir from here on
	return n, nil
}

// WaitReady waits until every partition is served (or ctx ends: the
// node is then closed, and the error says what it waited for), then
// starts the node's background work and marks it ready.
func (n *Node) WaitReady(ctx context.Context) error {
	cfg := n.cfg
	started := time.Now()
	stopSaying := n.sayWhileWaiting(ctx)
	err := n.leadership.WaitReady(ctx)
	stopSaying()
	if err != nil {
		waited := time.Since(started).Round(time.Millisecond)
		waiting := n.waitingFor()
		_ = n.Close()
		if why := n.timing.refusals(n.book.Members()); why != "" {
			return fmt.Errorf("kahuna: open: partitions without a serving leader after %v (%w): %w: %s", waited, err, ErrRaftTimingMismatch, why)
		}
		return fmt.Errorf("kahuna: open: partitions without a serving leader after %v (%s): %w", waited, waiting, err)
	}
	n.members.FinishBook(n.join(), n.backend.DeploymentID())
	if n.clustered() {
		n.spreadLeaders()
	}
	n.startBalancer()
	n.startSweeper()
	n.startSpaceGuard()
	n.ready.Store(true)
	cfg.Logger.Info("kahuna node ready", "node", cfg.NodeID, "data_dir", cfg.DataDir, "partitions", cfg.Partitions, "lock_actors", cfg.LockActors, "listen", n.listenAddr)
	return nil
}

// Ready reports whether the node has finished starting (WaitReady), and
// if not, what it waits for.
func (n *Node) Ready() (bool, string) {
	if n.ready.Load() {
		return true, ""
	}
	return false, n.waitingFor()
}

// waitEvery is how often a starting node says what it still waits for.
const waitEvery = 5 * time.Second

// sayWhileWaiting logs, every waitEvery (or a third of a shorter
// StartTimeout) until stop is called or ctx ends,
// what the starting node still waits for (waitingFor): a member started
// before the others would otherwise be silent until its start times out.
func (n *Node) sayWhileWaiting(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// A third of a short start timeout, so there is something said
		// before it gives up.
		tick := time.NewTicker(min(waitEvery, max(n.cfg.StartTimeout/3, time.Millisecond)))
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				n.cfg.Logger.Info("starting: waiting for the cluster", "waiting_for", n.waitingFor(), "gives_up_in", time.Until(deadlineOf(ctx)).Round(time.Second))
			}
		}
	}()
	return func() { cancel(); <-done }
}

func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// waitingFor says what keeps partitions from being served: how many have
// no leader this node knows of, and the members it cannot reach over Raft
// (ID and Raft address), e.g. "8 of 8 partitions without a leader; members
// not reachable: 2 at 10.0.0.2:2073, 3 at 10.0.0.3:2073".
func (n *Node) waitingFor() string {
	leaderless := 0
	for _, p := range n.PartitionStats() {
		if p.Leader == 0 {
			leaderless++
		}
	}
	parts := []string{fmt.Sprintf("%d of %d partitions without a leader", leaderless, n.cfg.Partitions)}
	var down []string
	for _, p := range n.PeerStats() {
		if !p.Reachable {
			m, _ := n.book.Get(p.ID)
			down = append(down, fmt.Sprintf("%d at %s", p.ID, m.RaftAddress))
		}
	}
	if len(down) > 0 {
		parts = append(parts, "members not reachable: "+strings.Join(down, ", "))
	}
	return strings.Join(parts, "; ")
}

// serve starts the wire API (NewServer) on Config.Listener or
// ListenAddress.
func (n *Node) serve() error {
	lis := n.cfg.Listener
	if lis == nil {
		var err error
		if lis, err = net.Listen("tcp", n.cfg.ListenAddress); err != nil {
			return fmt.Errorf("listen on %s: %w", n.cfg.ListenAddress, err)
		}
	}
	n.listenAddr = lis.Addr().String()
	n.server = n.NewServer(ServerOptions{})
	go func() {
		if err := n.server.ServeHTTP(lis); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			n.cfg.Logger.Error("API listener failed", "addr", n.listenAddr, "err", err)
		}
	}()
	return nil
}

// ListenAddress is the address the wire API listens on ("" if none): the
// actual one when Config.ListenAddress asked for port 0, Config.Listener's
// if given.
func (n *Node) ListenAddress() string { return n.listenAddr }

// Local is the Locker this node offers its peers on the node-to-node
// forwarding stream: it serves the partitions this node leads and answers
// MustRetry for the others, never forwarding a second time.
func (n *Node) Local() lease.Locker {
	return local{LockerFunc: n.localCall, n: n}
}

func (n *Node) clustered() bool { return len(n.cfg.Members) > 1 || len(n.book.Members()) > 1 }

// leaderLease is how long a confirmation of leadership lets this node
// answer from its cache (partition.LeaseFor). A single voter needs none:
// nobody else can be elected.
func (n *Node) leaderLease() time.Duration {
	if !n.clustered() {
		return 0
	}
	return partition.LeaseFor(n.raftRTT(), durability.ElectionTicks)
}

// takeoverWait is how long a new leader of a partition waits before it
// serves, so that no earlier leader's lease outlives its reign
// (partition.TakeoverWaitFor). A single voter has no earlier leader to
// wait out.
func (n *Node) takeoverWait() time.Duration {
	if !n.clustered() || n.cfg.knobs.UnsafeNoTakeoverWait || n.cfg.knobs.UnsafeNoLeaseCheck {
		// Without leases (the no-lease negative control) there is nothing
		// to wait out: the whole leadership proof is off.
		return 0
	}
	return partition.TakeoverWaitFor(n.raftRTT(), durability.ElectionTicks)
}

// raftRTT is the Raft tick in use.
func (n *Node) raftRTT() time.Duration {
	if n.cfg.RaftRTT == 0 {
		return durability.DefaultRTT
	}
	return n.cfg.RaftRTT
}

// spreadLeaders hands each partition this node leads to its preferred
// leader (members in ID order, round robin), so leaders are spread over
// the cluster after start instead of piling up on the first node up.
func (n *Node) spreadLeaders() {
	members := n.book.Members()
	ids := make([]uint64, 0, len(members))
	for id := range members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var moving []int
	for p := 0; p < n.cfg.Partitions; p++ {
		want := ids[p%len(ids)]
		if leader, self := n.leadership.LeaderOf(p); self && leader != want {
			if err := n.transfer(p, want); err != nil {
				n.cfg.Logger.Warn("spreading leaders", "partition", p, "to", want, "err", err)
				continue
			}
			moving = append(moving, p)
		}
	}
	// Return from Open in a steady state: wait (briefly) for the moves. A
	// move that does not happen (target lagging or down) leaves this node
	// leading, which is fine.
	ctx, cancel := context.WithTimeout(context.Background(), spreadTimeout)
	defer cancel()
	for _, p := range moving {
		if err := n.leadership.WaitNotSelf(ctx, p); err != nil {
			n.cfg.Logger.Info("partition stayed on this node", "partition", p)
		}
	}
}

// NotLeaderError is returned by TransferLeadership on a node that does not
// serve the partition: only its leader may hand it over.
type NotLeaderError = cluster.NotLeaderError

// TransferLeadership hands partition p, which this node must lead, to node
// to, e.g. before maintenance. It returns once requested; Leader reports
// when it is done. Only the leader may start a transfer, because it drops
// its leader lease first (the target's campaign bypasses the stickiness
// the lease relies on): on another node it returns a *NotLeaderError
// naming the leader (the admin API passes the request on to it).
func (n *Node) TransferLeadership(p int, to uint64) error {
	if p < 0 || p >= n.cfg.Partitions {
		return fmt.Errorf("kahuna: no partition %d (this node has %d)", p, n.cfg.Partitions)
	}
	if _, ok := n.book.Get(to); !ok && !(len(n.cfg.Members) == 0 && to == n.cfg.NodeID) {
		return fmt.Errorf("kahuna: node %d is not a member", to)
	}
	if n.closing.Load() {
		return ErrClosed
	}
	if leader, _ := n.leadership.LeaderOf(p); leader == to {
		return nil // already there
	}
	return n.transfer(p, to)
}

// transfer drops this node's lease of p, hands its live ephemeral leases
// of p over, then asks Raft to move p to to.
func (n *Node) transfer(p int, to uint64) error {
	term, ok := n.leadership.Relinquish(p)
	if !ok {
		leader, self := n.leadership.LeaderOf(p)
		if self {
			leader = 0 // leading in Raft, not (yet) serving
		}
		return &NotLeaderError{Partition: p, Leader: leader}
	}
	if err := n.moveLeader(p, term, to); err != nil {
		return err
	}
	// Asked again in the background until it takes, as leader balancing
	// does (awaitMove), for the time a caller would give it.
	go func() {
		ctx, cancel := context.WithTimeout(n.life, spreadTimeout)
		defer cancel()
		_, _ = n.awaitMove(ctx, p, term, to)
	}()
	return nil
}

// moveLeader, once this node no longer decides for p in term (it
// relinquished it), hands its live ephemeral leases of p over, then asks
// Raft to move p to to.
func (n *Node) moveLeader(p int, term, to uint64) error {
	n.handOver(p, term, handOverTimeout)
	return n.backend.TransferLeadership(p, to)
}

// awaitMove waits, until ctx ends, for p to leave this node once a move
// of p in term to to was asked, and asks again every election timeout
// and two ticks while to is reachable over Raft (each request leaves p
// unserved for a while: not for a target that cannot take it). Raft
// drops a transfer whose target still has a committed entry to apply when
// it is told to campaign (dragonboat skips that campaign, in case the
// entry changes the membership; the hand-over's own entry often is one)
// and gives the transfer up after an election timeout, ignoring another
// request until then; by the next request the target has applied it.
// Each request drops the lease again first (its renewal may have resumed
// once the last request's grace ended), and is made only while this node
// still leads p in term and no membership change of p is pending (one may
// have begun once that grace ended). It returns how many times the move
// was asked.
func (n *Node) awaitMove(ctx context.Context, p int, term, to uint64) (tries int, err error) {
	retry := time.Duration(durability.ElectionTicks+2) * n.raftRTT()
	for tries = 1; ; tries++ {
		wctx, cancel := context.WithTimeout(ctx, retry)
		err := n.leadership.WaitNotSelf(wctx, p)
		cancel()
		if err == nil || ctx.Err() != nil {
			return tries, err
		}
		if !n.peers.reachable(to) {
			return tries, fmt.Errorf("kahuna: node %d is not reachable over Raft", to)
		}
		if !n.leadership.RelinquishAgain(p, term) || !n.backend.Leads(p, term) {
			return tries, fmt.Errorf("kahuna: partition %d is no longer led here in term %d, or a membership change of it is pending", p, term)
		}
		if err := n.moveLeader(p, term, to); err != nil {
			return tries, err
		}
	}
}

// handOverTimeout bounds the hand-over before a planned move: past it the
// move goes on, and the next leader waits the leases out instead.
const handOverTimeout = time.Second

// handOver, once this node no longer decides for p in term (it
// relinquished or retired it), hands p's live ephemeral leases to the next
// leader through Raft: it keeps them, and waits for none of them
// (docs/safety.md). Without a hand-over (none to make, or it failed) the
// next leader waits out the longest ephemeral TTL the reign allowed, or
// with EphemeralFencingOnly loses them.
func (n *Node) handOver(p int, term uint64, timeout time.Duration) {
	if n.ring == nil || n.cfg.knobs.UnsafeTokensFromZero {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	bounded := n.leadership.BoundsEphemeral(p, term)
	if err := n.leadership.Seal(ctx, p, term); err != nil {
		n.cfg.Logger.Info("ephemeral leases not handed over", "partition", p, "err", err)
		return
	}
	leases, err := n.ring.EphemeralLeases(ctx, p)
	if err == nil && (len(leases) > 0 || bounded) {
		err = n.backend.HandOver(ctx, p, term, leases)
	}
	if err != nil {
		n.cfg.Logger.Info("ephemeral leases not handed over; the next leader waits them out", "partition", p, "err", err)
	}
}

// Leader reports the leader of partition p as this node sees it (0 if
// none is known) and whether this node serves p now.
func (n *Node) Leader(p int) (nodeID uint64, serving bool) {
	if p < 0 || p >= n.cfg.Partitions {
		return 0, false
	}
	id, _ := n.leadership.LeaderOf(p)
	_, serving = n.leadership.Serving(p)
	return id, serving
}

// Partition returns the partition of resource.
func (n *Node) Partition(resource string) int { return partition.Of(resource, n.cfg.Partitions) }

// Serves reports whether n decides requests on resource itself now: it
// serves the resource's partition (no lock taken, unlike Leader).
func (n *Node) Serves(resource string) bool {
	_, ok := n.leadership.Serving(n.Partition(resource))
	return ok
}

// Do implements lease.Doer: the wire server hands over a request it
// checked where it entered, which runs at once (do).
func (n *Node) Do(ctx context.Context, req lease.Checked) (lease.LockInfo, lease.Result, error) {
	return n.do(ctx, req, false)
}

// The Locker methods are the embedded edge: each checks its call
// (Request.Check) and runs it (do) itself, with no layer in between, as
// the embedded hot path.

// TryLock implements Locker.
func (n *Node) TryLock(ctx context.Context, resource string, owner []byte, ttl time.Duration, d lease.Durability) (lease.Result, error) {
	req := lease.Request{Op: lease.TryLock, Resource: resource, Owner: owner, TTL: ttl, Durability: d}
	c, why := req.Check()
	if why != "" {
		return n.refuse(ctx, req, why, false), nil
	}
	_, r, err := n.do(ctx, c, false)
	return r, err
}

// Extend implements Locker.
func (n *Node) Extend(ctx context.Context, resource string, owner []byte, ttl time.Duration, d lease.Durability) (lease.Result, error) {
	req := lease.Request{Op: lease.Extend, Resource: resource, Owner: owner, TTL: ttl, Durability: d}
	c, why := req.Check()
	if why != "" {
		return n.refuse(ctx, req, why, false), nil
	}
	_, r, err := n.do(ctx, c, false)
	return r, err
}

// Lock implements WaitLocker: a TryLock that, while another owner holds
// the lock, waits for up to wait in the resource's queue, kept by the
// lock actor of the partition's leader; a wait of 0 is TryLock. On a
// node that does not lead the partition, the wait is forwarded to the
// leader and waits in its queue (see waitRemote).
func (n *Node) Lock(ctx context.Context, resource string, owner []byte, ttl, wait time.Duration, d lease.Durability) (lease.Result, error) {
	req := lease.Request{Op: lease.TryLock, Resource: resource, Owner: owner, TTL: ttl, Durability: d, Wait: wait}
	c, why := req.Check()
	if why != "" {
		return n.refuse(ctx, req, why, false), nil
	}
	_, r, err := n.do(ctx, c, false)
	return r, err
}

// Unlock implements Locker.
func (n *Node) Unlock(ctx context.Context, resource string, owner []byte, d lease.Durability) (lease.Result, error) {
	req := lease.Request{Op: lease.Unlock, Resource: resource, Owner: owner, Durability: d}
	c, why := req.Check()
	if why != "" {
		return n.refuse(ctx, req, why, false), nil
	}
	_, r, err := n.do(ctx, c, false)
	return r, err
}

// Get implements Locker. A persistent lock is read by the partition
// leader after its read barrier (and, in a cluster, a read index), so the
// answer reflects every committed write.
func (n *Node) Get(ctx context.Context, resource string, d lease.Durability) (lease.LockInfo, lease.Result, error) {
	req := lease.Request{Op: lease.Get, Resource: resource, Durability: d}
	c, why := req.Check()
	if why != "" {
		return lease.LockInfo{}, n.refuse(ctx, req, why, false), nil
	}
	return n.do(ctx, c, false)
}

// waitUnpaused holds a call while the node is paused (tests only).
func (n *Node) waitUnpaused(ctx context.Context) error {
	gate := n.paused.Load()
	if gate == nil {
		return nil
	}
	select {
	case <-*gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (n *Node) enter() bool {
	n.inflight.Add(1)
	if n.closing.Load() {
		n.exit()
		return false
	}
	return true
}

func (n *Node) exit() {
	if n.inflight.Add(-1) == 0 && n.closing.Load() {
		n.drainOnce.Do(func() { close(n.drained) })
	}
}

// Close stops the node: new calls get ErrClosed, calls in flight are
// answered (or, after a few seconds, get ErrClosed), then the actors, Raft
// and the store shut down. Close is idempotent.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.closing.Store(true)
		n.endLife()
		if n.ring != nil {
			n.ring.StopWaiting()
		}
		if n.inflight.Load() == 0 {
			n.drainOnce.Do(func() { close(n.drained) })
		}
		timer := time.NewTimer(closeDrainTimeout)
		select {
		case <-n.drained:
		case <-timer.C:
			n.cfg.Logger.Warn("closing with calls still in flight", "calls", n.inflight.Load())
		}
		timer.Stop()
		n.balancer.Wait()
		if !n.crash.Load() {
			n.retire()
		}
		if n.sweepDone != nil {
			<-n.sweepDone
		}
		if n.spaceDone != nil {
			<-n.spaceDone
		}
		if n.server != nil {
			ctx, cancel := context.WithTimeout(context.Background(), closeDrainTimeout)
			_ = n.server.Shutdown(ctx)
			cancel()
		}
		n.peers.close()
		n.leadership.Close()
		if n.ring != nil {
			n.ring.Close()
		}
		if err := n.backend.Close(); err != nil {
			n.closeErr = fmt.Errorf("kahuna: close: %w", err)
		}
		if n.unlockDir != nil {
			n.unlockDir() // the store is closed: another node may open the dir
		}
	})
	return n.closeErr
}

// retire stops serving every partition this node leads. In a cluster it
// hands each one's live ephemeral leases to the next leader, which keeps
// them; a single node records how long they still run, so that, restarted,
// it waits only that long, not the longest ephemeral TTL of the reign
// (docs/safety.md). Best effort: on a failure the next leader waits the
// longer grace.
func (n *Node) retire() {
	if n.ring == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeDrainTimeout)
	defer cancel()
	for p := range n.cfg.Partitions {
		term, ok := n.leadership.Retire(p)
		switch {
		case !ok:
		case len(n.cfg.Members) > 1:
			n.handOver(p, term, closeDrainTimeout)
		case !n.cfg.EphemeralFencingOnly:
			n.recordLeasesLeft(ctx, p, term)
		}
	}
}

// recordLeasesLeft, once this node no longer decides for p in term (it
// retired it: the node is closing), records how long its live ephemeral leases
// of p still run, so that the next leader waits only that, not the longest
// ephemeral TTL of the reign. Best effort: on a failure the next leader
// waits the longer grace.
func (n *Node) recordLeasesLeft(ctx context.Context, p int, term uint64) {
	if n.cfg.EphemeralFencingOnly || n.cfg.knobs.UnsafeTokensFromZero {
		return
	}
	leases, err := n.ring.EphemeralLeases(ctx, p)
	var left time.Duration
	for _, l := range leases {
		left = max(left, l.Left)
	}
	if err == nil {
		err = n.leadership.LowerTTL(ctx, p, term, left)
	}
	if err == nil {
		err = n.backend.SetEphemeralGrace(ctx, p, term, left)
	}
	if err != nil {
		n.cfg.Logger.Warn("could not record the ephemeral leases left; the next leader waits out the reign's longest", "partition", p, "err", err)
	}
}

// Stats is a point-in-time view of a node's work. kahuna.Stats converts
// from it, so the two keep the same fields.
type Stats struct {
	CachedEntries int    // entries cached by the lock actors
	Waiters       int    // waiting Lock calls queued in the lock actors
	Evictions     uint64 // idle entries evicted since Open (and lapsed ones, to make room at MaxCachedEntries)
	Refused       uint64 // requests answered lease.MustRetry at a memory bound (Config.MaxCachedEntries, MaxQueuedPerLock, MaxPendingPerActor)
	RaftProposals uint64 // Raft entries proposed (each carries a group of writes)
	RaftRecords   uint64 // persistent writes committed and applied
	RaftFailures  uint64 // persistent writes proposed but not applied
	LeaderMoves   uint64 // partitions leader balancing handed to another member
	RecordsSwept  uint64 // free persistent records this node removed (Config.ReleasedRetention)
	// RaftWait and RaftCommit are summed over the RaftProposals: from an
	// entry's first write to its proposal (the partition had its most
	// entries in flight), and from the proposal to the outcome (append and
	// fsync, commit, apply). Divided by RaftProposals: a persistent
	// write's mean time in each.
	RaftWait, RaftCommit time.Duration
	// NoSpace says why persistent grants are refused now ("" when they are
	// not: Config.DiskReserve, StoreQuota); DiskFree and StoreBytes are the
	// space guard's last measurement (0 without a DataDir).
	NoSpace    string
	DiskFree   uint64
	StoreBytes uint64
}

// Stats reports the node's counters. It is cheap: atomics only.
func (n *Node) Stats() Stats {
	s, b := n.ring.Stats(), n.backend.Stats()
	st := Stats{CachedEntries: s.Entries, Waiters: s.Waiters, Evictions: s.Evictions, Refused: s.Refused, RaftProposals: b.Proposals, RaftRecords: b.Records, RaftFailures: b.Failures,
		RaftWait: b.Wait, RaftCommit: b.Commit,
		LeaderMoves: n.balancer.Moves()}
	if n.sweeper != nil {
		st.RecordsSwept = n.sweeper.Removed()
	}
	if n.space != nil {
		st.NoSpace, _ = n.space.Exceeded()
		u := n.space.Usage()
		st.DiskFree, st.StoreBytes = u.Free, u.Store
	}
	return st
}

// checkSpace sets up the space guard (Config.DiskReserve, StoreQuota) and
// refuses to open a node whose disk is already short of space.
func (n *Node) checkSpace() error {
	if n.cfg.DataDir == "" {
		return nil
	}
	dirs := []string{n.cfg.DataDir}
	if n.cfg.WALDir != "" {
		dirs = append(dirs, n.cfg.WALDir)
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("kahuna: open: %w", err)
		}
	}
	n.space = space.New(space.Config{Dirs: dirs, Reserve: n.cfg.diskReserve, Quota: n.cfg.storeQuota, Statfs: n.cfg.knobs.Statfs})
	_, why, err := n.space.Check()
	if err != nil {
		return fmt.Errorf("kahuna: open: %w", err)
	}
	if why != "" {
		return fmt.Errorf("%w: refusing to start: %s; free some space, or lower --disk-reserve / raise --store-quota", ErrNoSpace, why)
	}
	return nil
}

// startSpaceGuard re-measures the disk every second; persistent grants are
// refused while it is short of space (route.go).
func (n *Node) startSpaceGuard() {
	if n.space == nil {
		return
	}
	n.spaceDone = make(chan struct{})
	go func() {
		defer close(n.spaceDone)
		n.space.Run(n.life, time.Second, func(why string) {
			if why != "" {
				n.cfg.Logger.Warn("refusing new persistent locks until space returns", "reason", why)
			} else {
				n.cfg.Logger.Info("space is back: persistent locks are granted again", "free", space.FormatBytes(n.space.Usage().Free))
			}
		}, func(err error) { n.cfg.Logger.Warn("cannot measure disk space", "err", err) })
	}()
}

// noSpace says why a persistent grant must be refused now, if it must.
func (n *Node) noSpace() (string, bool) {
	if n.space == nil {
		return "", false
	}
	return n.space.Exceeded()
}

// startSweeper starts removing free persistent records older than
// Config.ReleasedRetention, in the partitions this node serves.
func (n *Node) startSweeper() {
	if n.cfg.ReleasedRetention < 0 {
		return
	}
	n.sweeper = sweep.New(sweep.Config{
		Partitions: n.cfg.Partitions,
		Retention:  n.cfg.ReleasedRetention,
		Every:      n.cfg.knobs.SweepEvery,
		Serving:    func(p int) bool { _, ok := n.leadership.Serving(p); return ok },
		Now:        n.cfg.Clock,
		Logger:     n.cfg.Logger,
	}, n.backend, n.ring)
	n.sweepDone = make(chan struct{})
	go func() {
		defer close(n.sweepDone)
		n.sweeper.Run(n.life)
	}()
}

// HeldLocks counts the live leases this node serves, by durability. It
// visits every lock actor: meant for metrics scrapes.
func (n *Node) HeldLocks(ctx context.Context) (ephemeral, persistent int, err error) {
	if !n.enter() {
		return 0, 0, ErrClosed
	}
	defer n.exit()
	e, p, err := n.ring.Held(ctx)
	if errors.Is(err, actors.ErrClosed) {
		err = ErrClosed
	}
	return e, p, err
}
