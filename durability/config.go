package durability

import (
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lni/dragonboat/v4/config"
	chantransport "github.com/lni/dragonboat/v4/plugin/chan"
	"github.com/lni/dragonboat/v4/raftio"
	"github.com/lni/vfs"
)

// RaftConfig configures OpenRaft. The zero value is a single in-memory node
// with 8 partitions.
type RaftConfig struct {
	// Dir holds the data: Raft log and metadata in Dir/raft, the state
	// machines' badger DB in Dir/state. "" keeps everything in memory.
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
	// Members maps every initial replica ID (this one included) to its Raft
	// address. Empty means a single node {ReplicaID: RaftAddress}. Restarts
	// must pass the same map.
	Members map[uint64]string
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
	// OnLeaderChange is called on a dragonboat goroutine whenever this node
	// learns of a new leader (or of none) for a partition. It must not block.
	OnLeaderChange func(LeaderEvent)
	// Transport, if set, replaces the Raft transport chosen by RaftAddress
	// (TCP, or in-process channels). For tests: the fault tests wrap the
	// channel transport to cut, delay and drop messages between nodes.
	Transport TransportFactory

	// UnsafeNoFence switches the state machine's fence off (records apply
	// with the advance-only guard alone, and records decided in a lost term
	// are still proposed). Only for the fault tests' negative controls.
	UnsafeNoFence bool

	// inFlight and batchRecords override the group-commit constants in
	// benchmarks.
	inFlight     int
	batchRecords int
}

const (
	// deploymentID keeps unrelated clusters from talking to each other.
	deploymentID = 0x6b6168756e61 // "kahuna"

	defaultPartitions = 8
	// DefaultRTT is the default Raft tick.
	DefaultRTT             = 10 * time.Millisecond
	defaultProposalTimeout = 5 * time.Second

	electionRTT        = ElectionTicks
	heartbeatRTT       = 1
	snapshotEntries    = 10000
	compactionOverhead = 5000

	// One LogDB shard and one exec shard group-commit every partition into
	// a single fsync (4-10x faster on one disk, stack.md §2.6). Both are
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
	if c.RTT < time.Millisecond {
		return nil, fmt.Errorf("durability: RTT %v below 1ms", c.RTT)
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
	return r, nil
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
		DeploymentID:      deploymentID,
		RaftEventListener: events, // nil: dragonboat skips the event queue
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
	}
	if r.Transport != nil {
		nhc.Expert.TransportFactory = r.Transport
	}
	return nhc
}

func (r *resolved) shardConfig(p int) config.Config {
	return config.Config{
		ShardID:            shardID(p),
		ReplicaID:          r.ReplicaID,
		ElectionRTT:        electionRTT,
		HeartbeatRTT:       heartbeatRTT,
		CheckQuorum:        true,
		PreVote:            true,
		SnapshotEntries:    snapshotEntries,
		CompactionOverhead: compactionOverhead,
		WaitReady:          true,
	}
}

func shardID(p int) uint64 { return uint64(p) + 1 }

var errPartition = errors.New("durability: partition out of range")
