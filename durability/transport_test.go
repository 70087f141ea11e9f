package durability

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna/internal/testport"
	"github.com/kahunago/kahuna/raftnet"
	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// tcpMembers names three replicas on loopback ports reserved for t
// (package testport): free until a replica binds one, and again between a
// replica's stop and its restart.
func tcpMembers(t testing.TB) map[uint64]string {
	t.Helper()
	members := map[uint64]string{}
	for id := uint64(1); id <= 3; id++ {
		members[id] = testport.Addr(t)
	}
	return members
}

// bind binds a reserved address, for a replica to be handed.
func bind(t testing.TB, addr string) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("bind reserved %s: %v", addr, err)
	}
	return l
}

// openTCPCluster is openCluster over TCP on loopback (adjust as for
// openClusterOn). A replica on kahuna's transport is handed its listener
// bound; the others (dragonboat's transport, a Transport of the test's)
// bind their reserved address themselves.
func openTCPCluster(t *testing.T, base RaftConfig, adjust func(id uint64, cfg *RaftConfig)) *cluster {
	t.Helper()
	members := tcpMembers(t)
	c := openClusterOn(t, base, members, func(id uint64, cfg *RaftConfig) {
		cfg.RaftAddress = members[id]
		adjust(id, cfg)
		if cfg.Transport == nil && !cfg.dragonboatTransport {
			cfg.Listener = bind(t, members[id])
		}
	})
	for _, n := range c.nodes {
		if n.cfg.inProc {
			t.Fatalf("replica %d is on the in-process transport", n.ReplicaID())
		}
	}
	return c
}

// moveLeader makes replica to the leader of p (a transfer can be refused
// while the target catches up: it retries).
func (c *cluster) moveLeader(t *testing.T, p int, to uint64) {
	t.Helper()
	for attempt := 0; attempt < 20; attempt++ {
		leader := c.leaderNow(t, p)
		if leader.ReplicaID() == to {
			return
		}
		if err := leader.TransferLeadership(p, to); err != nil {
			t.Logf("transfer attempt %d: %v", attempt, err)
		}
		if _, ok := c.awaitLeader(t, p, to, 2*time.Second); ok {
			return
		}
	}
	t.Fatalf("leadership of partition %d did not move to %d", p, to)
}

// proposeSettled commits r through whichever replica leads p, again when
// an attempt certainly did not apply (leadership moved under load).
func (c *cluster) proposeSettled(t *testing.T, p int, r Record) {
	t.Helper()
	deadline := time.Now().Add(testWait)
	for {
		err := propose(t, c.leaderNow(t, p), p, r)
		if err == nil {
			return
		}
		if !errors.Is(err, ErrRetry) || time.Now().After(deadline) {
			t.Fatalf("propose %s: %v", r.Resource, err)
		}
	}
}

// readAll checks that every running replica has the records.
func (c *cluster) readAll(t *testing.T, p int, want ...Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	for _, n := range c.nodes {
		if n == nil {
			continue
		}
		if err := n.Barrier(ctx, p); err != nil {
			t.Fatalf("Barrier on replica %d: %v", n.ReplicaID(), err)
		}
		for _, r := range want {
			got, found, err := n.Load(p, r.Resource)
			if err != nil || !found || got.Token != r.Token || string(got.Owner) != string(r.Owner) {
				t.Fatalf("replica %d: Load(%s) = %+v, %v, %v", n.ReplicaID(), r.Resource, got, found, err)
			}
		}
	}
}

// A cluster upgraded one member at a time: replicas on raftnet and one on
// dragonboat's own TCP transport (kahuna before raftnet) commit through a
// leader of either kind, which needs messages both ways between the two.
func TestMixedTransports(t *testing.T) {
	c := openTCPCluster(t, RaftConfig{Partitions: 1}, func(id uint64, cfg *RaftConfig) {
		cfg.dragonboatTransport = id == 3
	})
	var written []Record
	for round, leader := range []uint64{3, 1, 2} {
		r := rec(fmt.Sprintf("mixed/%d", round), int64(round+1), 1)
		deadline := time.Now().Add(testWait)
		for {
			c.moveLeader(t, 0, leader)
			err := propose(t, c.nodes[leader-1], 0, r)
			if err == nil {
				break
			}
			// Leadership can move again under load before the proposal.
			if !errors.Is(err, ErrRetry) || time.Now().After(deadline) {
				t.Fatalf("propose through replica %d: %v", leader, err)
			}
		}
		written = append(written, r)
		c.readAll(t, 0, written...)
	}
}

// A replica that comes back behind the leader's compacted log is sent a
// snapshot, over raftnet and across the two transports.
func TestSnapshotToLaggingReplica(t *testing.T) {
	for name, onDragonboat := range map[string]func(id uint64) bool{
		"all on raftnet":                      func(uint64) bool { return false },
		"lagging replica on dragonboat's":     func(id uint64) bool { return id == 3 },
		"leader and follower on dragonboat's": func(id uint64) bool { return id != 3 },
	} {
		t.Run(name, func(t *testing.T) {
			var chunks atomic.Int64 // snapshot chunks raftnet sent or received
			base := RaftConfig{Partitions: 1, snapshotEntries: 20, compactionOverhead: 5}
			c := openTCPCluster(t, base, func(id uint64, cfg *RaftConfig) {
				if onDragonboat(id) {
					cfg.dragonboatTransport = true
				} else {
					cfg.Transport = chunkCounter{&chunks}
				}
			})
			c.moveLeader(t, 0, 1)
			c.stop(3)
			var written []Record
			for i := 0; i < 100; i++ {
				r := rec(fmt.Sprintf("snap/%d", i), int64(i+1), 1)
				c.proposeSettled(t, 0, r)
				written = append(written, r)
			}
			if err := c.start(3); err != nil {
				t.Fatal(err)
			}
			c.readAll(t, 0, written...)
			if chunks.Load() == 0 {
				t.Fatal("no snapshot chunk went over raftnet: the replica caught up from the log, so this tested nothing")
			}
		})
	}
}

// chunkCounter is raftnet counting the snapshot chunks it sends and
// receives.
type chunkCounter struct{ n *atomic.Int64 }

func (f chunkCounter) Create(nhc config.NodeHostConfig, onMessages raftio.MessageHandler, onChunk raftio.ChunkHandler) raftio.ITransport {
	counted := func(c pb.Chunk) bool { f.n.Add(1); return onChunk(c) }
	return countingTransport{raftnet.Factory{}.Create(nhc, onMessages, counted), f.n}
}

func (chunkCounter) Validate(addr string) bool { return raftnet.Factory{}.Validate(addr) }

type countingTransport struct {
	raftio.ITransport
	n *atomic.Int64
}

func (t countingTransport) GetSnapshotConnection(ctx context.Context, target string) (raftio.ISnapshotConnection, error) {
	c, err := t.ITransport.GetSnapshotConnection(ctx, target)
	if err != nil {
		return nil, err
	}
	return countingChunks{c, t.n}, nil
}

type countingChunks struct {
	raftio.ISnapshotConnection
	n *atomic.Int64
}

func (c countingChunks) SendChunk(chunk pb.Chunk) error {
	c.n.Add(1)
	return c.ISnapshotConnection.SendChunk(chunk)
}
