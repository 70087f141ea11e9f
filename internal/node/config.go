package node

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/kahunago/kahuna/admin"
	"github.com/kahunago/kahuna/durability"
	"github.com/kahunago/kahuna/space"
	"github.com/kahunago/kahuna/transport"
)

// Defaults of Config. A zero field takes its default.
const (
	// DefaultPartitions is a cluster's partition count (Members given).
	DefaultPartitions = 8
	// DefaultSingleNodePartitions is a single node's (no Members). Every
	// partition is a Raft shard, and a single node gains nothing from
	// several: they share its one Raft log and its fsyncs, while each
	// costs its own Raft entries, so one shard packs more records per
	// entry (one node, 64 callers over gRPC, persistent: 1.33–1.39× the
	// ops/s of 8, 0.6–0.7× the CPU per op). A single node never takes
	// members, so it never needs partitions to spread leaders.
	DefaultSingleNodePartitions  = 1
	DefaultLockActors            = 8
	DefaultCacheEntryTTL         = 30 * time.Minute
	DefaultCacheEntriesToRemove  = 100
	DefaultStartTimeout          = 30 * time.Second
	DefaultLeaderBalanceCooldown = 10 * time.Second
	DefaultMaxCachedEntries      = 1_000_000
	DefaultMaxQueuedPerLock      = 1024
	DefaultMaxPendingPerActor    = 65536
	DefaultReleasedRetention     = 10 * time.Minute
	DefaultDiskReserve           = "256MiB"
)

// Config is kahuna.Config, whose fields it repeats in the same order and
// of the same types: the root package converts one into the other, so a
// field added to one and not the other does not compile. The fields are
// documented there.
type Config struct {
	DataDir                               string
	WALDir                                string
	NodeID                                uint64
	RaftAddress                           string
	ListenAddress                         string
	Listener, RaftListener                net.Listener
	Members                               map[uint64]admin.Member
	InitialClusterState                   durability.ClusterState
	InitialClusterToken                   string
	Partitions                            int
	LockActors                            int
	EphemeralFencingOnly                  bool
	CacheEntryTTL                         time.Duration
	CacheEntriesToRemove                  int
	MaxCachedEntries                      int
	MaxQueuedPerLock                      int
	MaxPendingPerActor                    int
	StartTimeout                          time.Duration
	RaftRTT                               time.Duration
	LeaderBalanceCooldown                 time.Duration
	ReleasedRetention                     time.Duration
	DiskReserve                           string
	StoreQuota                            string
	AuthTokens                            *transport.Tokens
	PeerTokens                            *transport.Tokens
	PeerCertFile, PeerKeyFile, PeerCAFile string
	Logger                                *slog.Logger
	RaftLogLevel                          slog.Leveler
	Observe                               func(admin.RequestEvent)
	Clock                                 func() time.Time
	TestingKnobs                          *TestingKnobs
}

// TestingKnobs reach into a node for this module's tests: fault
// injection, hooks, and negative controls that each switch one safety
// mechanism off so the fault suite can show it catches the broken
// variant. Nil outside tests (and in a kahuna_unsafe build, KAHUNA_UNSAFE
// sets the unsafe ones: unsafe_knobs.go).
type TestingKnobs struct {
	// RaftTransport replaces the Raft transport.
	RaftTransport durability.TransportFactory
	// RaftTransportWrap wraps the TCP Raft transport (raftnet).
	RaftTransportWrap func(durability.TransportFactory) durability.TransportFactory
	// ProposalTimeout bounds one Raft proposal (0: durability's default,
	// 5 s), so that proposals stuck behind a stalled leader give way
	// within a run.
	ProposalTimeout time.Duration
	// Statfs replaces the file systems' free and total bytes for the
	// space guard.
	Statfs func(dir string) (free, total uint64, err error)
	// SweepEvery paces the sweep of free records (0: sweep's default).
	SweepEvery time.Duration
	// OnServe starts every reign of this node (partition.Options.OnServe):
	// the fault tests record reigns with it.
	OnServe func(p int, term uint64, serve func())

	UnsafeNoFence          bool // state machines apply records without compare-and-set or epoch checks
	UnsafeNoLeaseCheck     bool // answer on the Raft leader flag alone, without the leader lease
	UnsafeTokensFromZero   bool // each reign's ephemeral tokens start from the stored ones, as before they were fenced
	UnsafeNoEvictFloor     bool // an evicted ephemeral entry's token is forgotten
	UnsafeTokenRepeat      bool // a grant to a new owner takes the last grant's token again instead of one more
	UnsafePermitOvercommit bool // a semaphore's live permits, a read/write lock's holders, are granted over
	UnsafeProclaimAnyValue bool // a proclaim is taken from any value of the holder's candidate ID: a late one undoes a later one
	UnsafeGroupPartial     bool // the grants of a lock of several names are proposed one by one, even when one name was not granted
	UnsafeNoRenewalFloor   bool // a persistent lease is loaded at its stored expiry alone, though renewals kept in memory promised it longer
	UnsafeNoSweepFloor     bool // a swept free record's token does not raise the partition's token floor
	UnsafeGroupApart       bool // a group's records (a grant of several names) are applied one by one, not all or nothing
	UnsafeUnsureNotGranted bool // a waiter whose grant may have applied is told Busy or MustRetry
	UnsafeDropHandedOver   bool // a new leader drops the ephemeral leases handed over to it
	UnsafeNoTakeoverWait   bool // a new leader serves at once, while an earlier leader's lease may live
	UnsafeAppliedFirst     bool // the applied index reaches badger ahead of the records: a crash loses some
	UnsafeAnyRaftTiming    bool // Raft connections are let in whatever the peer's tick (timing.go)
	UnsafeNoTimingWait     bool // a member restarted under another tick takes part in Raft at once (timing.go)
}

// settings is a Config as the node runs it: validated, defaults filled
// in, the knobs copied (nil: none) and the sizes parsed.
type settings struct {
	Config
	knobs       TestingKnobs
	diskReserve space.Reserve
	storeQuota  uint64
}

// unsafeKnobs is set only in a binary built with -tags kahuna_unsafe
// (unsafe_knobs.go), for the process-level negative controls.
var unsafeKnobs func(*TestingKnobs, *slog.Logger) error

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

// forwardTo is the URL other members forward to.
func forwardTo(m admin.Member) string {
	if m.PeerEndpoint != "" {
		return m.PeerEndpoint
	}
	return m.Endpoint
}

// peerTLS is true when c secures the links between members.
func (c Config) peerTLS() bool { return c.PeerCertFile != "" }

func countSet(ss ...string) int {
	n := 0
	for _, s := range ss {
		if s != "" {
			n++
		}
	}
	return n
}

// withDefaults validates c and fills in the defaults.
func (c Config) withDefaults() (settings, error) {
	var errs []error
	if c.Partitions < 0 {
		errs = append(errs, fmt.Errorf("the partition count (Partitions) must be ≥ 1, got %d", c.Partitions))
	}
	if c.LockActors < 0 {
		errs = append(errs, fmt.Errorf("LockActors must be ≥ 1, got %d", c.LockActors))
	}
	if c.CacheEntryTTL < 0 {
		errs = append(errs, fmt.Errorf("CacheEntryTTL must not be negative, got %v", c.CacheEntryTTL))
	}
	if c.CacheEntriesToRemove < 0 {
		errs = append(errs, fmt.Errorf("CacheEntriesToRemove must not be negative, got %d", c.CacheEntriesToRemove))
	}
	if c.MaxCachedEntries < 0 || c.MaxQueuedPerLock < 0 || c.MaxPendingPerActor < 0 {
		errs = append(errs, fmt.Errorf("MaxCachedEntries, MaxQueuedPerLock and MaxPendingPerActor must not be negative, got %d, %d and %d", c.MaxCachedEntries, c.MaxQueuedPerLock, c.MaxPendingPerActor))
	}
	if c.StartTimeout < 0 {
		errs = append(errs, fmt.Errorf("StartTimeout must not be negative, got %v", c.StartTimeout))
	}
	if c.RaftRTT != 0 && (c.RaftRTT < time.Millisecond || c.RaftRTT > time.Second || c.RaftRTT%time.Millisecond != 0) {
		// dragonboat ticks in whole milliseconds: a fraction would be
		// dropped from the tick and kept in the lease computed from it.
		errs = append(errs, fmt.Errorf("RaftRTT must be whole milliseconds between 1ms and 1s, got %v", c.RaftRTT))
	}
	if c.WALDir != "" && c.DataDir == "" {
		errs = append(errs, errors.New("WALDir needs a DataDir"))
	}
	if c.NodeID == 0 {
		c.NodeID = 1
	}
	switch c.InitialClusterState {
	case "", durability.ClusterStateNew:
	case durability.ClusterStateExisting:
		if c.DataDir == "" {
			errs = append(errs, errors.New(`InitialClusterState "existing" needs a DataDir (in memory there is never any state to restart from)`))
		}
	default:
		errs = append(errs, fmt.Errorf("InitialClusterState must be %q or %q, got %q", durability.ClusterStateNew, durability.ClusterStateExisting, c.InitialClusterState))
	}
	if len(c.Members) > 1 && c.DataDir == "" {
		errs = append(errs, fmt.Errorf("a cluster member needs a DataDir: in memory, node %d would forget its Raft votes and log on every restart and come back as a member that never was", c.NodeID))
	}
	if c.Listener != nil && c.ListenAddress != "" {
		errs = append(errs, fmt.Errorf("ListenAddress %q and a Listener: give one", c.ListenAddress))
	}
	if n := countSet(c.PeerCertFile, c.PeerKeyFile, c.PeerCAFile); n != 0 && n != 3 {
		errs = append(errs, errors.New("PeerCertFile, PeerKeyFile and PeerCAFile go together"))
	}
	if len(c.Members) > 0 {
		self, ok := c.Members[c.NodeID]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("NodeID %d is not in Members", c.NodeID))
		case c.RaftAddress == "":
			c.RaftAddress = self.RaftAddress
		case c.RaftAddress != self.RaftAddress:
			errs = append(errs, fmt.Errorf("RaftAddress %q differs from Members[%d].RaftAddress %q", c.RaftAddress, c.NodeID, self.RaftAddress))
		}
		for id, m := range c.Members {
			if id == 0 {
				errs = append(errs, errors.New("member ID 0 is not allowed"))
			}
			if m.RaftAddress == "" && len(c.Members) > 1 {
				errs = append(errs, fmt.Errorf("member %d has no RaftAddress", id))
			}
			if len(c.Members) > 1 {
				if u, err := url.Parse(m.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					errs = append(errs, fmt.Errorf("member %d: Endpoint %q is not an http:// or https:// URL", id, m.Endpoint))
				}
				if m.PeerEndpoint != "" {
					if u, err := url.Parse(m.PeerEndpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
						errs = append(errs, fmt.Errorf("member %d: PeerEndpoint %q is not an http:// or https:// URL", id, m.PeerEndpoint))
					}
				}
				if c.peerTLS() && id != c.NodeID && !strings.HasPrefix(forwardTo(m), "https://") {
					errs = append(errs, fmt.Errorf("member %d: with peer TLS, forwarding to %q would be cleartext: give it an https:// PeerEndpoint (its peer port)", id, forwardTo(m)))
				}
			}
		}
	}
	if c.RaftListener != nil && c.RaftAddress == "" {
		errs = append(errs, errors.New("a RaftListener needs a RaftAddress (or Members) naming its port"))
	}
	if len(errs) > 0 {
		return settings{}, fmt.Errorf("kahuna: invalid config: %w", errors.Join(errs...))
	}
	if c.Partitions == 0 {
		c.Partitions = DefaultPartitions
		if len(c.Members) == 0 {
			c.Partitions = DefaultSingleNodePartitions
		}
	}
	if c.LockActors == 0 {
		c.LockActors = DefaultLockActors
	}
	if c.CacheEntryTTL == 0 {
		c.CacheEntryTTL = DefaultCacheEntryTTL
	}
	if c.CacheEntriesToRemove == 0 {
		c.CacheEntriesToRemove = DefaultCacheEntriesToRemove
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = DefaultStartTimeout
	}
	if c.LeaderBalanceCooldown == 0 {
		c.LeaderBalanceCooldown = DefaultLeaderBalanceCooldown
	}
	if c.DiskReserve == "" {
		c.DiskReserve = DefaultDiskReserve
	}
	if c.ReleasedRetention == 0 {
		c.ReleasedRetention = DefaultReleasedRetention
	}
	if c.MaxCachedEntries == 0 {
		c.MaxCachedEntries = DefaultMaxCachedEntries
	}
	if c.MaxQueuedPerLock == 0 {
		c.MaxQueuedPerLock = DefaultMaxQueuedPerLock
	}
	if c.MaxPendingPerActor == 0 {
		c.MaxPendingPerActor = DefaultMaxPendingPerActor
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	s := settings{Config: c}
	if c.TestingKnobs != nil {
		s.knobs = *c.TestingKnobs
	}
	var err error
	if s.diskReserve, err = space.ParseReserve(c.DiskReserve); err != nil {
		return settings{}, fmt.Errorf("kahuna: config: DiskReserve: %w", err)
	}
	if c.StoreQuota != "" {
		if s.storeQuota, err = space.ParseSize(c.StoreQuota); err != nil {
			return settings{}, fmt.Errorf("kahuna: config: StoreQuota: %w", err)
		}
	}
	return s, nil
}
