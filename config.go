package kahuna

import (
	"log/slog"
	"net"
	"time"

	"github.com/kahunago/kahuna/admin"
	"github.com/kahunago/kahuna/durability"
	"github.com/kahunago/kahuna/internal/node"
	"github.com/kahunago/kahuna/transport"
)

// Defaults of Config. A zero field takes its default.
const (
	// DefaultPartitions is a cluster's partition count (Members given).
	DefaultPartitions = node.DefaultPartitions
	// DefaultSingleNodePartitions is a single node's (no Members). Every
	// partition is a Raft shard, and a single node gains nothing from
	// several: they share its one Raft log and its fsyncs, while each
	// costs its own Raft entries, so one shard packs more records per
	// entry. A single node never takes members, so it never needs
	// partitions to spread leaders.
	DefaultSingleNodePartitions  = node.DefaultSingleNodePartitions
	DefaultLockActors            = node.DefaultLockActors
	DefaultCacheEntryTTL         = node.DefaultCacheEntryTTL
	DefaultCacheEntriesToRemove  = node.DefaultCacheEntriesToRemove
	DefaultStartTimeout          = node.DefaultStartTimeout
	DefaultLeaderBalanceCooldown = node.DefaultLeaderBalanceCooldown
	DefaultMaxCachedEntries      = node.DefaultMaxCachedEntries
	DefaultMaxQueuedPerLock      = node.DefaultMaxQueuedPerLock
	DefaultMaxPendingPerActor    = node.DefaultMaxPendingPerActor
	DefaultReleasedRetention     = node.DefaultReleasedRetention
	DefaultDiskReserve           = node.DefaultDiskReserve
)

// Config configures a Node. The zero value is a single node with
// everything in memory.
type Config struct {
	// DataDir holds the Raft log and the lock store. "" keeps everything in
	// memory: nothing survives Close. A cluster member (more than one
	// Members) must have one: in memory it would forget its votes and log
	// on every restart.
	DataDir string
	// WALDir optionally puts the Raft log's WAL on a separate device.
	WALDir string
	// NodeID is this node's ID in Members (default 1).
	NodeID uint64
	// RaftAddress is the host:port this node's Raft listens on and
	// advertises (default Members[NodeID].RaftAddress). "" on a single node
	// runs Raft on dragonboat's in-process transport (no port). It is
	// recorded in DataDir: reopen with the same.
	RaftAddress string
	// ListenAddress, if set, makes Open serve the wire API (REST and gRPC on
	// one port, see package transport) there; "" serves nothing.
	ListenAddress string
	// Listener and RaftListener, if set, are already bound: Open serves the
	// wire API on Listener instead of binding ListenAddress (leave that
	// ""), and Raft on RaftListener instead of binding RaftAddress, which
	// must name its port. For callers that must know the addresses before
	// the node starts (every member's, in Members) and so keep them bound
	// meanwhile: tests, socket activation. Open takes them over: Close
	// closes them, as does a failed Open.
	Listener, RaftListener net.Listener
	// Members lists every member of the cluster, this node included, by
	// NodeID. Empty means a single node. Every member replicates every
	// partition; a node forwards a request to the Endpoint of the
	// partition's leader. All founding members must be given the same
	// Members. A node joining a running cluster (added with
	// Node.AddMember, started with ClusterStateExisting) lists the current
	// members, itself included. Once a node has run, its DataDir records
	// the membership (membership.json): later changes are made with
	// AddMember and RemoveMember, and Members on a restart may stay as
	// it was.
	Members map[uint64]Member
	// InitialClusterState says whether this node may found the cluster
	// (etcd's --initial-cluster-state). It matters only for a DataDir that
	// holds no Raft state yet: a node with state restarts from it, whatever
	// the value.
	//   - ClusterStateNew: found a new cluster with Members. Give it to
	//     every member on its first start, and only then: left set, it
	//     would found again on a lost disk.
	//   - ClusterStateExisting: this node is a member of a running cluster,
	//     so no Raft state means its disk was lost, and Open refuses
	//     (ErrNoRaftState). A member back from an empty disk under its old
	//     ID has forgotten its votes and acknowledged entries, which can
	//     lose committed locks, and Raft cannot tell; such a node must be
	//     removed and added back under a new NodeID.
	//   - "" (default): ClusterStateNew for a single node, so a lone node
	//     starts with no settings on a fresh or an existing DataDir (it has
	//     no peers to disagree with); ClusterStateExisting for a cluster
	//     member. etcd defaults to "new", which relies on the operator
	//     dropping the flag after the first start; here a member founds
	//     only when told to, so no default, forgotten flag or mistyped
	//     DataDir can make it found again over a running cluster. The price
	//     is one setting on a new cluster's first start.
	InitialClusterState ClusterState
	// InitialClusterToken keeps clusters from talking to each other (etcd's
	// --initial-cluster-token). Raft's deployment ID, which every Raft
	// message carries and a node checks, is a hash of the token and of
	// Members' IDs and Raft addresses, so by default two clusters with
	// different member lists never mix; a token also separates clusters
	// that reuse the same addresses (two environments, a test cluster
	// rebuilt at the addresses of an old one). It is recorded in DataDir
	// with Members: a restart with another token or member list is refused
	// (ErrOtherCluster). A single node without a token keeps the
	// deployment ID of earlier versions, so its data dirs keep opening.
	// Cluster data dirs created before tokens existed keep opening too,
	// with that old ID, as long as no token is given.
	InitialClusterToken string
	// Partitions is the number of Raft shards locks are spread over. It
	// is fixed when DataDir is first used; 0 takes the count DataDir was
	// created with, else DefaultSingleNodePartitions for a single node and
	// DefaultPartitions for a cluster.
	Partitions int
	// LockActors is the number of lock actors (default 8, measured best on
	// a 2-core machine; raise it on bigger ones). Any value ≥ 1 is honoured.
	LockActors int
	// EphemeralFencingOnly chooses availability over exclusion for
	// ephemeral locks at a leader change. By default a partition's new
	// leader (or a node restarted on its data dir) waits out every
	// ephemeral lease its predecessor may have granted before it serves
	// the partition: up to the longest ephemeral TTL granted there (a
	// partition never locked ephemerally waits nothing). With
	// EphemeralFencingOnly it serves at once: the predecessor's ephemeral
	// locks are lost, another owner may be granted one while its old
	// holder still believes it holds it, and only fencing tokens (which
	// still rise) protect the resource. See docs/safety.md.
	EphemeralFencingOnly bool
	// CacheEntryTTL is how long a cached entry must sit unused before it
	// may be evicted (default 30 min).
	CacheEntryTTL time.Duration
	// CacheEntriesToRemove caps the evictions of one collection pass
	// (default 100).
	CacheEntriesToRemove int
	// Memory bounds of the lock actors (docs/operations.md, Memory). Each request
	// refused by one is answered MustRetry, with nothing applied
	// (backpressure: clients retry within their MustRetry budget), and
	// counted in Stats.Refused.
	//
	// MaxCachedEntries caps the entries the lock actors cache, over all of
	// them (default 1,000,000; each actor holds at most its share, rounded
	// up). Names never locked take no entry (a Get, Unlock or Extend of one
	// leaves nothing behind). When an actor is full, a request that needs a
	// new entry (a grant, a wait or a watch of an uncached name) first has
	// lapsed entries evicted (up to CacheEntriesToRemove, without waiting
	// for CacheEntryTTL); if every entry is in use it is refused.
	MaxCachedEntries int
	// MaxQueuedPerLock caps the requests queued behind one lock's
	// persistent write in flight (default 1024): more are refused.
	MaxQueuedPerLock int
	// MaxPendingPerActor caps the requests waiting in one lock actor's
	// mailbox (default 65536): more are refused before they are queued.
	MaxPendingPerActor int
	// StartTimeout bounds how long Open waits for every partition to be
	// served (default 30 s).
	StartTimeout time.Duration
	// RaftRTT is Raft's tick (default 10 ms): a leader heartbeats every
	// tick and a follower that hears nothing for 10 ticks starts an
	// election. Raise it where nodes can be starved of CPU for longer than
	// ten ticks (several nodes sharing a small machine), or leadership will
	// move under load. Whole milliseconds. Every member must use the same
	// value: members refuse Raft connections with a member of another, and
	// a member whose data dir last ran under another waits out the old
	// leader leases before it starts Raft (to change it on a running
	// cluster, see docs/raft-timing.md).
	RaftRTT time.Duration
	// LeaderBalanceCooldown paces leader balancing: each node
	// hands a partition it leads to a live, caught-up voter that leads at
	// least two fewer partitions, so a member that joins or returns gets
	// its share back. A partition is moved only once its leader has been
	// unchanged for the cooldown, and at most once per cooldown (default
	// 10 s). Negative turns balancing off (the start-up spread in Open
	// still runs).
	LeaderBalanceCooldown time.Duration
	// ReleasedRetention is how long a persistent lock's record is kept
	// once the lock is free (unlocked, or its lease ended) and unchanged
	// (default 10 min; negative keeps records forever). The partition's
	// leader then removes it (package sweep), so the store of a workload
	// of unique names levels off; the partition's token floor keeps the
	// name's next token above every token it had. After removal a late
	// Unlock by the lapsed holder answers LockDoesNotExist, and the name's
	// revisions start again from 1.
	ReleasedRetention time.Duration
	// DiskReserve is the free space to keep on the file systems of DataDir
	// and WALDir: "5%" of the file system, or a size ("256MiB", the
	// default; "0" keeps none). Below it the node refuses new persistent
	// grants (MustRetry, with the reason; Extend, Unlock and ephemeral
	// locks go on) until the free space is 5% above it again, and Open
	// refuses to start (ErrNoSpace). StoreQuota ("" or "0": none, else a
	// size) caps the bytes DataDir and WALDir hold, the same way. Ignored
	// without a DataDir.
	DiskReserve string
	StoreQuota  string
	// AuthTokens, when set, makes the wire API served at ListenAddress
	// refuse lock and admin calls without one of its bearer tokens (see
	// transport.ServerOptions.Tokens; /healthz stays open). nil serves
	// every caller. cmd/kahuna fills it from --auth-token-file and reloads
	// it on SIGHUP.
	AuthTokens *transport.Tokens
	// PeerTokens is the cluster secret, the same on every member: this
	// node presents PeerTokens.Primary() on every forwarding stream it
	// opens, and its ListenAddress server accepts only PeerTokens on the
	// node-to-node stream. nil: AuthTokens doubles as the secret (its
	// first token is presented, any of its tokens accepted); both nil:
	// forwarding carries no token.
	PeerTokens *transport.Tokens
	// PeerCertFile, PeerKeyFile and PeerCAFile (PEM files; all three or
	// none) make the links between members mutual TLS: Raft (dragonboat's
	// MutualTLS, which needs a RaftAddress) and forwarding, dialled with
	// this certificate and verifying the member's against the CA, so every
	// PeerEndpoint must then be https://. Any certificate the CA signed is
	// taken for a member: use a CA for this cluster's links only. Each
	// member's certificate needs SANs for the hosts of its RaftAddress and
	// PeerEndpoint (IP SANs for IP addresses). Read at Open; rotating them
	// needs a restart.
	PeerCertFile, PeerKeyFile, PeerCAFile string
	// Logger receives the node's logs (nil = discard). Each request is
	// logged at debug (admin.RequestEvent), peers and partition leaders that
	// change at info.
	Logger *slog.Logger
	// RaftLogLevel is the least level of the Raft libraries' own lines
	// (dragonboat, pebble, badger) passed on to Logger, which filters them
	// again; nil means warnings and errors only. It is process-wide, as
	// dragonboat's logger is: the node opened last decides.
	RaftLogLevel slog.Leveler
	// Observe, when set, is called once per lock request the node answers
	// (its callers' and those its peers forward to it), on the request's
	// goroutine: for metrics. It must be fast and must not block.
	Observe func(admin.RequestEvent)
	// Clock returns the current time (default time.Now). Leases are measured
	// on its monotonic reading; tests inject a clock they can move.
	Clock func() time.Time

	// TestingKnobs reach into the node for this module's own tests (fault
	// injection, hooks, negative controls); nil everywhere else.
	TestingKnobs *node.TestingKnobs
}

// Open's errors about a data dir that does not fit the node (match them
// with errors.Is).
var (
	// ErrNoRaftState: DataDir holds no Raft state and InitialClusterState
	// does not found the cluster (a lost disk, or a first start without
	// ClusterStateNew).
	ErrNoRaftState = durability.ErrNoRaftState
	// ErrOtherCluster: DataDir was created for another cluster (another
	// InitialClusterToken or member list, or a single node's data given to
	// a cluster member, or the reverse).
	ErrOtherCluster = durability.ErrOtherCluster
)

// ClusterState is Config.InitialClusterState.
type ClusterState = durability.ClusterState

// The values of Config.InitialClusterState besides "" (the default).
const (
	ClusterStateNew      = durability.ClusterStateNew
	ClusterStateExisting = durability.ClusterStateExisting
)

// Member is one node of a cluster: RaftAddress, the host:port of its Raft
// listener; Endpoint, its API URL (e.g. "http://10.0.0.2:2070") for
// forwarding and the admin API; and PeerEndpoint, if set, where other
// members forward lock calls (see admin.Member).
type Member = admin.Member
