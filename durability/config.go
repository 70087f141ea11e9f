package durability

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kahunago/kahuna/raftnet"
	"github.com/lni/dragonboat/v4/config"
	chantransport "github.com/lni/dragonboat/v4/plugin/chan"
	"github.com/lni/dragonboat/v4/raftio"
	"github.com/lni/dragonboat/v4/raftpb"
	"github.com/lni/vfs"
)

// RaftConfig configures OpenRaft. The zero value is a single in-memory node
// with 8 partitions.
type RaftConfig struct {
	// Dir holds the data: Raft log and metadata in Dir/raft, the state
	// machines' badger DB in Dir/state. "" keeps everything in memory, which
	// only a single node may do: a cluster member in memory would forget its
	// votes and log on every restart.
	Dir string
	// WALDir, if set, holds the Raft log's WAL (a low-latency device).
	WALDir string
	// ReplicaID is this node's Raft replica ID in every partition. Default 1.
	ReplicaID uint64
	// RaftAddress is this node's advertised host:port for the TCP transport.
	// "" selects dragonboat's in-process channel transport: the node's
	// address is then Members[ReplicaID], or, for a single node, a synthetic
	// one derived from Dir. The address is recorded in the Raft data, so a
	// Dir must always be reopened with the same address.
	RaftAddress string
	// Listener, if set, is the TCP transport's listener, already bound at
	// RaftAddress's port: the transport serves on it instead of binding
	// RaftAddress, so whoever chose the port had no window in which
	// another process could take it (tests that must know every member's
	// address before any starts). OpenRaft takes it over: it is closed
	// with the node, or before OpenRaft returns an error. It needs a
	// RaftAddress and kahuna's TCP transport (no Transport).
	Listener net.Listener
	// Members maps every initial replica ID (this one included) to its Raft
	// address. Empty means a single node {ReplicaID: RaftAddress}. Restarts
	// must pass the same map (with the default ClusterToken it is part of
	// the deployment ID recorded in Dir, which catches a changed map).
	Members map[uint64]string
	// InitialClusterState says what happens to a partition for which Dir
	// holds no Raft state yet. Where it does, the replica restarts from that
	// state (dragonboat's restart form: no members, no join), whatever the
	// value. Where it does not:
	//   - ClusterStateNew founds the partition with Members: the first start
	//     of every founding member of a new cluster;
	//   - ClusterStateExisting refuses to start (ErrNoRaftState): this
	//     replica ID belongs to a running cluster, so a missing state means
	//     a lost disk, and a replica that comes back from an empty disk
	//     under its old ID has forgotten its votes and acknowledged entries
	//     (dragonboat cannot tell);
	//   - "" is ClusterStateNew for a single node and ClusterStateExisting
	//     for a cluster member, so a member founds only when told to.
	InitialClusterState ClusterState
	// ClusterToken keeps clusters apart: the dragonboat deployment ID, which
	// every Raft message carries (a node drops messages of another ID), is a
	// hash of the token and the Members map, so two clusters differ unless
	// both their tokens and their member lists are equal. "" is fine for
	// clusters with distinct addresses; set one where two clusters could
	// reuse the same addresses (two environments, ports reused on one
	// box). A single node with no token keeps the constant ID of data dirs
	// created before tokens existed. Dragonboat records the ID in Dir: a
	// restart with another token or member list is refused
	// (ErrOtherCluster). Data dirs of cluster members created before tokens
	// existed hold that same constant; with no token they keep opening with
	// it, their partitions restarting with Members, which dragonboat checks
	// against the members they were founded with.
	ClusterToken string
	// Partitions is the number of partitions; partition p is Raft shard p+1.
	// Default 8. Fixed for the life of the data.
	Partitions int
	// RTT is the Raft tick; election is 10 ticks, heartbeat 1. Default 10ms.
	RTT time.Duration
	// ProposalTimeout bounds one proposal before its outcome is declared
	// unknown. Default 5s.
	ProposalTimeout time.Duration
	// Logger receives dragonboat's and badger's logs. nil discards them.
	// dragonboat's logger is process-wide: the last non-nil Logger wins.
	Logger *slog.Logger
	// LibraryLogLevel is the least level of dragonboat's, pebble's and
	// badger's own lines passed to Logger (nil: DefaultLibraryLogLevel,
	// warnings and errors). Process-wide, like Logger.
	LibraryLogLevel slog.Leveler
	// OnPeer is called on a dragonboat goroutine when this node's Raft
	// connection to member id is established (up) or fails (down); it
	// may repeat a state. It must not block. nil: not called.
	OnPeer func(id uint64, up bool)
	// OnLeaderChange is called on a dragonboat goroutine whenever this node
	// learns of a new leader (or of none) for a partition. It must not block.
	OnLeaderChange func(LeaderEvent)
	// Transport, if set, replaces the Raft transport chosen by RaftAddress
	// (raftnet's TCP, or in-process channels). For tests: the fault tests wrap the
	// channel transport to cut, delay and drop messages between nodes.
	Transport TransportFactory
	// OnPeerTiming is raftnet.Factory.OnTiming: told, on a transport
	// goroutine, the outcome of every Raft handshake in which a peer
	// stated its timing, and whether the connection was refused for a
	// timing other than this node's (RTT and ElectionTicks). nil: not
	// called. It must not block.
	OnPeerTiming func(addr string, t raftnet.Timing, refused bool)
	// UnsafeAnyTiming lets Raft connections in whatever the peer's timing:
	// only for the negative controls of the tests.
	UnsafeAnyTiming bool
	// WrapTransport, if set, wraps the TCP transport (raftnet) this node
	// would use. For tests: the fault tests cut links between members that
	// run kahuna's own transport, handshake included.
	WrapTransport func(TransportFactory) TransportFactory
	// MutualTLS makes the TCP transport mutual TLS (dragonboat's
	// NodeHostConfig.MutualTLS): every Raft connection presents CertFile
	// and KeyFile and must present a certificate CAFile signed, and the
	// peer's certificate must name the host part of its Raft address (an
	// IP SAN for an IP). Any certificate from CAFile is taken for a peer,
	// so use a CA for this cluster's links only. It needs
	// a RaftAddress: the in-process transport has no TLS. Server
	// certificates are read once at start; client ones on every dial.
	MutualTLS                 bool
	CAFile, CertFile, KeyFile string

	// UnsafeNoFence switches the state machine's fence off (records apply
	// with the advance-only guard alone, and records decided in a lost term
	// are still proposed). Only for the fault tests' negative controls.
	UnsafeNoFence bool
	// UnsafeAppliedFirst stores the applied index in Update, ahead of the
	// pending writes it covers (pending.go), so a crash loses applied
	// records. Only for the crash tests' negative controls.
	UnsafeAppliedFirst bool
	// UnsafeNoSweepFloor removes free records without raising the
	// partition's token floor, so a name swept away starts its tokens
	// below its removed record's again. Only for the fault tests'
	// negative controls.
	UnsafeNoSweepFloor bool
	// UnsafeGroupApart applies a group's records one by one, as a batch's:
	// a group whose one record the fence refuses applies the others. Only
	// for the negative control of the all-or-nothing grant of several
	// names.
	UnsafeGroupApart bool

	// inFlight and batchRecords override the group-commit constants in
	// benchmarks.
	inFlight     int
	batchRecords int
	// Tests of write-behind (pending.go): holdPending keeps the flusher
	// from writing (Sync, snapshots and a full generation still do), and
	// crash makes Close lose what is pending as a crash would.
	holdPending bool
	crash       bool
	// preTokenDeployment makes the data dir the way kahuna did before
	// cluster tokens (constant deployment ID, members on every start), to
	// test that such dirs keep opening.
	preTokenDeployment bool
	// dragonboatTransport keeps dragonboat's own TCP transport, as kahuna
	// had before raftnet, to test clusters upgraded one member at a time.
	dragonboatTransport bool
	// snapshotEntries and compactionOverhead, if not 0, override the
	// constants, so a test can make a lagging replica need a snapshot.
	snapshotEntries, compactionOverhead uint64
}

// ClusterState is RaftConfig.InitialClusterState (etcd's spelling).
type ClusterState string

const (
	// ClusterStateNew founds a new cluster where there is no Raft state.
	ClusterStateNew ClusterState = "new"
	// ClusterStateExisting joins an existing cluster: no Raft state is an
	// error.
	ClusterStateExisting ClusterState = "existing"
)

var (
	// ErrNoRaftState is OpenRaft refusing a replica whose data dir holds no
	// Raft state when InitialClusterState does not found it.
	ErrNoRaftState = errors.New("durability: no Raft state")
	// ErrOtherCluster is OpenRaft refusing a data dir created for another
	// deployment: another ClusterToken or member list, or a single node's
	// data given to a cluster member (or the reverse).
	ErrOtherCluster = errors.New("durability: data dir belongs to another cluster")
)

const (
	// singleDeploymentID is the deployment ID of a single node without a
	// ClusterToken, and of every data dir created before tokens existed.
	singleDeploymentID = 0x6b6168756e61 // "kahuna"

	// dragonboatFlagFile is where dragonboat records, among others, the
	// deployment ID of a NodeHostDir: an 8-byte checksum, then a
	// raftpb.RaftDataStatus.
	dragonboatFlagFile = "dragonboat.ds"

	defaultPartitions = 8
	// DefaultRTT is the default Raft tick.
	DefaultRTT             = 10 * time.Millisecond
	defaultProposalTimeout = 5 * time.Second

	electionRTT        = ElectionTicks
	heartbeatRTT       = 1
	snapshotEntries    = 10000
	compactionOverhead = 5000

	// One LogDB shard and one exec shard group-commit every partition into
	// a single fsync (4-10x faster on one disk, measured on this project's
	// machine with dragonboat's own benchmark). Both are
	// dragonboat hard settings, recorded on first start: never change them.
	logDBShards = 1
	execShards  = 1

	// readIndexAttempts bounds one read-index attempt, in election timeouts.
	readIndexAttempts = 10

	// chanPort is the port of synthetic in-process addresses.
	chanPort = 2073
)

// ElectionTicks is the Raft election timeout in ticks (with CheckQuorum on
// every replica): it bounds the leader lease.
const ElectionTicks = 10

// memCounter makes in-memory synthetic addresses unique in the process.
var memCounter atomic.Uint64

// resolved is a RaftConfig with defaults applied and addresses settled.
type resolved struct {
	RaftConfig
	selfAddr string
	members  map[uint64]string
	inProc   bool
	rootFS   config.IFS // nil: the OS file system
	raftDir  string
	single   bool // the only member
	founding bool // partitions without Raft state are founded with members
	// deploymentID is the dragonboat deployment ID; preToken is set when
	// it is the constant of a cluster member's data dir created before
	// tokens (settleDeployment).
	deploymentID uint64
	preToken     bool
}

func (c RaftConfig) resolve() (*resolved, error) {
	if c.ReplicaID == 0 {
		c.ReplicaID = 1
	}
	if c.Partitions == 0 {
		c.Partitions = defaultPartitions
	}
	if c.Partitions < 0 {
		return nil, fmt.Errorf("durability: invalid partition count %d", c.Partitions)
	}
	if c.RTT == 0 {
		c.RTT = DefaultRTT
	}
	if c.RTT < time.Millisecond || c.RTT%time.Millisecond != 0 {
		// dragonboat ticks in whole milliseconds (RTTMillisecond): a
		// fraction would be dropped from the tick but stated in the timing.
		return nil, fmt.Errorf("durability: RTT %v is not whole milliseconds of at least 1ms", c.RTT)
	}
	if c.ProposalTimeout == 0 {
		c.ProposalTimeout = defaultProposalTimeout
	}
	if c.ProposalTimeout < c.RTT {
		return nil, fmt.Errorf("durability: proposal timeout %v below RTT %v", c.ProposalTimeout, c.RTT)
	}
	if c.inFlight <= 0 {
		c.inFlight = maxInFlight
	}
	if c.batchRecords <= 0 {
		c.batchRecords = maxBatchRecords
	}
	c.batchRecords = min(c.batchRecords, formatMaxRecords)
	r := &resolved{RaftConfig: c, inProc: c.RaftAddress == ""}
	if c.MutualTLS && (c.CAFile == "" || c.CertFile == "" || c.KeyFile == "") {
		return nil, errors.New("durability: MutualTLS needs CAFile, CertFile and KeyFile")
	}
	if c.MutualTLS && (r.inProc || c.Transport != nil) {
		return nil, errors.New("durability: MutualTLS needs the TCP transport (a RaftAddress and no Transport)")
	}
	if c.Listener != nil {
		if err := r.checkListener(); err != nil {
			return nil, err
		}
	}
	if c.Dir == "" {
		r.rootFS = vfs.NewMem()
		r.raftDir = "/kahuna/raft"
	} else {
		abs, err := filepath.Abs(c.Dir)
		if err != nil {
			return nil, fmt.Errorf("durability: data dir %s: %w", c.Dir, err)
		}
		r.Dir = abs
		r.raftDir = filepath.Join(abs, "raft")
	}
	if err := r.settleMembers(); err != nil {
		return nil, err
	}
	r.single = len(r.members) == 1
	switch c.InitialClusterState {
	case "":
		r.founding = r.single
	case ClusterStateNew:
		r.founding = true
	case ClusterStateExisting:
		if c.Dir == "" {
			return nil, errors.New("durability: InitialClusterState existing needs a data dir (in memory there is never any Raft state to restart from)")
		}
	default:
		return nil, fmt.Errorf("durability: InitialClusterState %q is neither %q nor %q", c.InitialClusterState, ClusterStateNew, ClusterStateExisting)
	}
	if !r.single && c.Dir == "" {
		return nil, fmt.Errorf("durability: cluster member %d (of %d) needs a data dir: in memory it would forget its votes and log on every restart and come back as a replica that never was", r.ReplicaID, len(r.members))
	}
	r.deploymentID = deploymentIDFor(c.ClusterToken, r.members)
	if c.preTokenDeployment {
		r.deploymentID, r.preToken = singleDeploymentID, !r.single
	}
	return r, nil
}

// deploymentIDFor is the dragonboat deployment ID of a cluster: a hash of
// the token and of the sorted id=address pairs; the constant
// singleDeploymentID for a single node without a token. It is never 0 or 1
// (dragonboat treats them as the same ID) and never the constant for a
// cluster.
func deploymentIDFor(token string, members map[uint64]string) uint64 {
	if len(members) == 1 && token == "" {
		return singleDeploymentID
	}
	ids := make([]uint64, 0, len(members))
	for id := range members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	h := sha256.New()
	fmt.Fprintf(h, "kahuna deployment\x00%d:%s\x00", len(token), token)
	for _, id := range ids {
		fmt.Fprintf(h, "%d=%s\n", id, cleanAddr(members[id]))
	}
	d := binary.BigEndian.Uint64(h.Sum(nil))
	if d <= 1 || d == singleDeploymentID {
		d += 2
	}
	return d
}

// recordedDeploymentID reads the deployment ID dragonboat recorded in
// raftDir; ok is false if there is none yet.
func recordedDeploymentID(raftDir string) (id uint64, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(raftDir, dragonboatFlagFile))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("durability: read the Raft data status in %s: %w", raftDir, err)
	}
	var s raftpb.RaftDataStatus
	if len(b) < 8 || s.Unmarshal(b[8:]) != nil {
		return 0, false, nil // dragonboat reports a damaged file itself
	}
	return s.DeploymentId, s.DeploymentId != 0, nil
}

// settleDeployment compares the deployment ID recorded in the data dir
// with the configured one, before dragonboat does (ErrDeploymentIDChanged,
// which names no cause). A cluster member's data dir created before cluster
// tokens holds the single-node constant: with no ClusterToken it keeps
// opening with that ID, and its partitions restart with Members, which
// dragonboat checks against the members the data was founded with (as
// kahuna did before tokens), so a single node's data dir cannot pass for a
// cluster member's. Every other difference is refused.
func (r *resolved) settleDeployment(log *slog.Logger) error {
	if r.rootFS != nil {
		return nil // in memory: nothing recorded
	}
	recorded, ok, err := recordedDeploymentID(r.raftDir)
	if err != nil || !ok || recorded == r.deploymentID {
		return err
	}
	if recorded == singleDeploymentID && !r.single && r.ClusterToken == "" {
		log.Warn("data dir created before cluster tokens: it keeps its deployment ID, shared by every such kahuna data dir; to isolate this cluster with a token, found a new one",
			"dir", r.Dir, "deployment_id", recorded)
		r.deploymentID, r.preToken = recorded, true
		return nil
	}
	what := fmt.Sprintf("cluster token %q and members %v", r.ClusterToken, r.members)
	switch {
	case r.single && r.ClusterToken == "":
		what = "no cluster token as a single node"
	case recorded == singleDeploymentID && r.single:
		what = fmt.Sprintf("cluster token %q; the data was created without one", r.ClusterToken)
	case recorded == singleDeploymentID:
		what = fmt.Sprintf("cluster token %q; the data was created without one (a single node's, or a member's from before tokens)", r.ClusterToken)
	}
	return fmt.Errorf("%w: %s was created with Raft deployment ID %d, but this node is configured with %s (deployment ID %d): start it with the members and cluster token its data was created with",
		ErrOtherCluster, r.Dir, recorded, what, r.deploymentID)
}

// initialMembers is what StartOnDiskReplica gets for partition p with or
// without Raft state (hasState: nh.HasNodeInfo). A partition that is
// neither restarted nor founded is refused here: dragonboat would panic
// with ErrShardNotBootstrapped (nodehost.go:1555-1561).
func (r *resolved) initialMembers(p int, hasState bool) (map[uint64]string, error) {
	switch {
	case hasState && r.preToken:
		return r.members, nil // checked against the founding members, as before tokens
	case hasState:
		return nil, nil // dragonboat's restart form
	case r.founding:
		return r.members, nil
	}
	return nil, r.noRaftState(p)
}

// noRaftState refuses partition p, which has no Raft state to restart
// from and is not to be founded.
func (r *resolved) noRaftState(p int) error {
	if r.single {
		return fmt.Errorf("%w: data dir %s holds none for partition %d and InitialClusterState is %q, which never creates it: start with %q (kahuna --initial-cluster-state new) to create it",
			ErrNoRaftState, r.Dir, p, ClusterStateExisting, ClusterStateNew)
	}
	return fmt.Errorf("%w: data dir %s holds none for member %d (partition %d). "+
		"If this node's disk was lost or replaced, it must not rejoin under ID %d (it has forgotten its votes and log): remove member %d from the cluster and add it back under a new ID. "+
		"If this is the first start of a new cluster, found it by starting every member with InitialClusterState %q (kahuna --initial-cluster-state new)",
		ErrNoRaftState, r.Dir, r.ReplicaID, p, r.ReplicaID, r.ReplicaID, ClusterStateNew)
}

func (r *resolved) settleMembers() error {
	self, listed := r.Members[r.ReplicaID]
	switch {
	case len(r.Members) > 0 && !listed:
		return fmt.Errorf("durability: replica %d missing from members %v", r.ReplicaID, r.Members)
	case !r.inProc && listed && cleanAddr(self) != cleanAddr(r.RaftAddress):
		return fmt.Errorf("durability: members list %q for replica %d, but RaftAddress is %q",
			self, r.ReplicaID, r.RaftAddress)
	case !r.inProc:
		r.selfAddr = r.RaftAddress
	case listed:
		r.selfAddr = self
	default:
		r.selfAddr = syntheticAddr(r.Dir)
	}
	r.members = make(map[uint64]string, len(r.Members)+1)
	for id, addr := range r.Members {
		if id == 0 || addr == "" {
			return fmt.Errorf("durability: invalid member %d=%q", id, addr)
		}
		r.members[id] = addr
	}
	r.members[r.ReplicaID] = r.selfAddr
	return nil
}

// syntheticAddr names a single in-process node. It must be stable for a data
// dir, since dragonboat records the address there, and unique in the
// process, since the channel transport keys a global map by it.
func syntheticAddr(absDir string) string {
	if absDir == "" {
		return fmt.Sprintf("inproc-mem-%d:%d", memCounter.Add(1), chanPort)
	}
	h := fnv.New64a()
	h.Write([]byte(absDir))
	return fmt.Sprintf("inproc-%016x:%d", h.Sum64(), chanPort)
}

func cleanAddr(a string) string { return strings.ToLower(strings.TrimSpace(a)) }

// TransportFactory creates a dragonboat Raft transport (RaftConfig.Transport).
type TransportFactory = config.TransportFactory

// chanFactory is the channel transport with a Validate that does not panic
// (the plugin's panics at this version).
type chanFactory struct {
	chantransport.ChanTransportFactory
}

func (*chanFactory) Validate(string) bool { return true }

func (r *resolved) nodeHostConfig(events raftio.IRaftEventListener) config.NodeHostConfig {
	logdb := config.GetTinyMemLogDBConfig()
	logdb.Shards = logDBShards
	nhc := config.NodeHostConfig{
		NodeHostDir:       r.raftDir,
		WALDir:            r.WALDir,
		RTTMillisecond:    uint64(r.RTT / time.Millisecond),
		RaftAddress:       r.selfAddr,
		DeploymentID:      r.deploymentID,
		RaftEventListener: events, // nil: dragonboat skips the event queue
		MutualTLS:         r.MutualTLS,
		CAFile:            r.CAFile,
		CertFile:          r.CertFile,
		KeyFile:           r.KeyFile,
		Expert: config.ExpertConfig{
			LogDB: logdb,
			Engine: config.EngineConfig{
				ExecShards: execShards, CommitShards: 1, ApplyShards: 1,
				SnapshotShards: 2, CloseShards: 2,
			},
		},
	}
	if r.rootFS != nil {
		nhc.Expert.FS = r.rootFS
	}
	if r.inProc {
		nhc.Expert.TransportFactory = &chanFactory{}
	} else if !r.dragonboatTransport {
		var f TransportFactory = raftnet.Factory{
			Logger:          r.transportLogger(),
			Listener:        r.Listener,
			Timing:          r.Timing(),
			OnTiming:        r.OnPeerTiming,
			UnsafeAnyTiming: r.UnsafeAnyTiming,
		}
		if r.WrapTransport != nil {
			f = r.WrapTransport(f)
		}
		nhc.Expert.TransportFactory = f
	}
	if r.Transport != nil {
		nhc.Expert.TransportFactory = r.Transport
	}
	return nhc
}

// checkListener refuses a Listener the transport would not serve on, or
// one bound at another port than the RaftAddress peers are told.
func (r *resolved) checkListener() error {
	if r.inProc || r.Transport != nil || r.dragonboatTransport {
		return errors.New("durability: a Listener needs kahuna's TCP transport (a RaftAddress and no Transport)")
	}
	_, want, err := net.SplitHostPort(r.RaftAddress)
	if err != nil {
		return fmt.Errorf("durability: RaftAddress %q: %w", r.RaftAddress, err)
	}
	tcp, ok := r.Listener.Addr().(*net.TCPAddr)
	if !ok || strconv.Itoa(tcp.Port) != want {
		return fmt.Errorf("durability: Listener is bound at %s, not at RaftAddress %s's port", r.Listener.Addr(), r.RaftAddress)
	}
	return nil
}

// Timing is what this node's leader leases rest on, as the TCP transport
// states it to peers.
func (c RaftConfig) Timing() raftnet.Timing {
	rtt := c.RTT
	if rtt == 0 {
		rtt = DefaultRTT
	}
	return raftnet.Timing{RTT: rtt, ElectionTicks: ElectionTicks}
}

// transportLogger is Logger for raftnet, which needs one.
func (r *resolved) transportLogger() *slog.Logger {
	if r.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return r.Logger
}

func (r *resolved) shardConfig(p int) config.Config {
	snapshots, overhead := uint64(snapshotEntries), uint64(compactionOverhead)
	if r.snapshotEntries != 0 {
		snapshots, overhead = r.snapshotEntries, r.compactionOverhead
	}
	return config.Config{
		ShardID:            shardID(p),
		ReplicaID:          r.ReplicaID,
		ElectionRTT:        electionRTT,
		HeartbeatRTT:       heartbeatRTT,
		CheckQuorum:        true,
		PreVote:            true,
		SnapshotEntries:    snapshots,
		CompactionOverhead: overhead,
		WaitReady:          true,
	}
}

func shardID(p int) uint64 { return uint64(p) + 1 }

// ShardID is the Raft shard ID of partition p.
func ShardID(p int) uint64 { return shardID(p) }

var errPartition = errors.New("durability: partition out of range")
