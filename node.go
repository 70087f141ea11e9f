package kahuna

import (
	"context"
	"iter"
	"time"

	"github.com/kahunago/kahuna/admin"
	"github.com/kahunago/kahuna/internal/node"
	"github.com/kahunago/kahuna/lease"
)

// Node is an embedded lock node: a member of a cluster, or a single node.
// It implements Locker and WaitLocker, and Watcher.
type Node struct {
	n *node.Node
}

var (
	_ WaitLocker = (*Node)(nil)
	_ Watcher    = (*Node)(nil)
	_ lease.Doer = (*Node)(nil)
)

// Open's and the Node's errors besides those of the data dir (match them
// with errors.Is).
var (
	// ErrClosed is returned by calls on a closed Node, and by calls still
	// in flight when Close gave up waiting for them.
	ErrClosed = node.ErrClosed
	// ErrNoSpace is returned by Open when the data dir's file system has
	// less free space than Config.DiskReserve, or the store is over
	// Config.StoreQuota: starting would only fill the disk.
	ErrNoSpace = node.ErrNoSpace
	// ErrMemberRemoved: the ID was removed from the cluster; Raft never
	// lets a removed ID back. Add the node under a new ID.
	ErrMemberRemoved = node.ErrMemberRemoved
	// ErrDataDirInUse is returned by Open when another node (another
	// process, or another Node in this one) has Config.DataDir open; the
	// error names the process.
	ErrDataDirInUse = node.ErrDataDirInUse
	// ErrNotMember: RemoveMember of an ID that is not a member and never
	// was one; nothing is removed, and the ID stays free to add.
	ErrNotMember = admin.ErrNotMember
	// ErrRaftTimingMismatch: Open found members refusing each other's Raft
	// connections over different Config.RaftRTT values.
	ErrRaftTimingMismatch = node.ErrRaftTimingMismatch
)

// Open starts a node and returns once it serves every partition. It
// validates cfg and fills in the defaults first.
func Open(cfg Config) (*Node, error) {
	n, err := node.Open(node.Config(cfg))
	if err != nil {
		return nil, err
	}
	return &Node{n: n}, nil
}

// TryLock grants resource to owner for ttl if it is free or its lease has
// lapsed (see Locker). On a node that does not lead the resource's
// partition the call is forwarded to the leader.
func (n *Node) TryLock(ctx context.Context, resource string, owner []byte, ttl time.Duration, d Durability) (Result, error) {
	return n.n.TryLock(ctx, resource, owner, ttl, d)
}

// Extend implements Locker.
func (n *Node) Extend(ctx context.Context, resource string, owner []byte, ttl time.Duration, d Durability) (Result, error) {
	return n.n.Extend(ctx, resource, owner, ttl, d)
}

// Lock implements WaitLocker: a TryLock that, while another owner holds
// the lock, waits for up to wait (WaitForever: until ctx ends) in the
// resource's FIFO queue, kept by the lock actor of the partition's leader,
// and is granted the lock (a new token, as any grant) in the same step
// that frees it: the holder's Unlock, or its lease's end. The queue is
// that leader's memory only: when the partition moves, or the node stops
// serving it or closes, its waiters are answered MustRetry (or ErrClosed)
// and may retry. If ctx ends first, the call leaves the queue and returns
// once the lock actor has let it go: with the grant if the lock was granted
// to it first, else ctx.Err(). A wait of 0 is TryLock; a negative wait
// other than WaitForever, or one over MaxWait, is InvalidInput and changes
// nothing.
func (n *Node) Lock(ctx context.Context, resource string, owner []byte, ttl, wait time.Duration, d Durability) (Result, error) {
	return n.n.Lock(ctx, resource, owner, ttl, wait, d)
}

// Unlock implements Locker.
func (n *Node) Unlock(ctx context.Context, resource string, owner []byte, d Durability) (Result, error) {
	return n.n.Unlock(ctx, resource, owner, d)
}

// Get implements Locker. A persistent lock is read by the partition
// leader after its read barrier (and, in a cluster, a read index), so the
// answer reflects every committed write.
func (n *Node) Get(ctx context.Context, resource string, d Durability) (LockInfo, Result, error) {
	return n.n.Get(ctx, resource, d)
}

// Watch streams the changes of the lock on resource, as they happen,
// beginning with its current state (an event with Current set): acquired,
// extended, released, expired (noticed when the lease ends, without any
// request), each with the lock's revision. It runs until ctx ends or the
// loop stops; it yields an error, and ends, only for what watching again
// cannot mend (an invalid name, too many watchers, the node closed).
// Watchers are the partition leader's memory: when the partition moves,
// Watch subscribes again where it is served now, from the last revision
// it yielded (events in between may be folded into the new current
// state).
//
//	for ev, err := range node.Watch(ctx, "jobs/export") {
//		if err != nil {
//			return err
//		}
//		fmt.Println(ev.Kind, string(ev.Owner), ev.FencingToken)
//	}
func (n *Node) Watch(ctx context.Context, resource string, opts ...WatchOption) iter.Seq2[WatchEvent, error] {
	return Watch(ctx, n.n, resource, opts...)
}

// WatchLock is the raw watch that Watch is built on (Watcher): one
// subscription, ending with a *WatchError MustRetry when the lock's
// partition moves. On a node that does not lead the partition it relays
// the leader's watch.
func (n *Node) WatchLock(ctx context.Context, resource string, from uint64, send func(WatchEvent) error) error {
	return n.n.WatchLock(ctx, resource, from, send)
}

// Do implements lease.Doer: it runs a checked request whole, a
// semaphore's permits and limit and a read lock's Shared included, which
// the Locker methods cannot carry.
func (n *Node) Do(ctx context.Context, req lease.Checked) (LockInfo, Result, error) {
	return n.n.Do(ctx, req)
}

// Local is the Locker this node offers its peers on the node-to-node
// forwarding stream: it serves the partitions this node leads and answers
// MustRetry for the others, never forwarding a second time.
func (n *Node) Local() Locker { return n.n.Local() }

// Close stops the node: new calls get ErrClosed, calls in flight are
// answered (or, after a few seconds, get ErrClosed), then the actors, Raft
// and the store shut down. A member hands the ephemeral leases of the
// partitions it leads to their next leaders first. Close is idempotent.
func (n *Node) Close() error { return n.n.Close() }

// ListenAddress is the address the wire API listens on ("" if none): the
// actual one when Config.ListenAddress asked for port 0, Config.Listener's
// if given.
func (n *Node) ListenAddress() string { return n.n.ListenAddress() }

// Partition returns the partition of resource.
func (n *Node) Partition(resource string) int { return n.n.Partition(resource) }

// Leader reports the leader of partition p as this node sees it (0 if
// none is known) and whether this node serves p now.
func (n *Node) Leader(p int) (nodeID uint64, serving bool) { return n.n.Leader(p) }

// TransferLeadership hands partition p, which this node must lead, to node
// to, e.g. before maintenance. It returns once requested; Leader reports
// when it is done. Only the leader may start a transfer, because it drops
// its leader lease first: on another node it returns an error naming the
// leader (the admin API passes the request on to it).
func (n *Node) TransferLeadership(p int, to uint64) error { return n.n.TransferLeadership(p, to) }

// AddMember adds node id, reachable at m, to every partition as a voter.
// Then start the new node with InitialClusterState ClusterStateExisting
// and Members listing the cluster, itself included: it joins and catches
// up from the others. Adding an ID that is already a member with the same
// Raft address does nothing; a removed ID is refused (ErrMemberRemoved).
// Until the new node runs, it counts in every quorum without answering:
// start it promptly, and add one node at a time. A call that stopped half
// way is finished by calling it again.
func (n *Node) AddMember(ctx context.Context, id uint64, m Member) error {
	return n.n.AddMember(ctx, id, m)
}

// RemoveMember removes node id from every partition; its ID can never
// come back. A call that stopped half way is finished by calling it
// again; removing a removed ID does nothing, and an ID that never was a
// member is refused with ErrNotMember (a typo must not ban an ID).
func (n *Node) RemoveMember(ctx context.Context, id uint64) error {
	return n.n.RemoveMember(ctx, id)
}

// Members is the cluster's members as this node knows them, by ID.
func (n *Node) Members() map[uint64]Member { return n.n.Members() }

// Stats is a point-in-time view of a node's work.
type Stats struct {
	CachedEntries int    // entries cached by the lock actors
	Waiters       int    // waiting Lock calls queued in the lock actors
	Evictions     uint64 // idle entries evicted since Open (and lapsed ones, to make room at MaxCachedEntries)
	Refused       uint64 // requests answered MustRetry at a memory bound (Config.MaxCachedEntries, MaxQueuedPerLock, MaxPendingPerActor)
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
func (n *Node) Stats() Stats { return Stats(n.n.Stats()) }

// HeldLocks counts the live leases this node serves, by durability. It
// visits every lock actor: meant for metrics scrapes.
func (n *Node) HeldLocks(ctx context.Context) (ephemeral, persistent int, err error) {
	return n.n.HeldLocks(ctx)
}
