package kahuna

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kahunago/kahuna/actors"
	"github.com/kahunago/kahuna/durability"
	"github.com/kahunago/kahuna/lease"
	"github.com/kahunago/kahuna/partition"
)

// ErrClosed is returned by calls on a closed Node, and by calls still in
// flight when Close gave up waiting for them.
var ErrClosed = errors.New("kahuna: node closed")

// closeDrainTimeout bounds how long Close waits for calls in flight.
const closeDrainTimeout = 5 * time.Second

// Node is an embedded lock node. It implements Locker.
type Node struct {
	cfg        Config
	backend    *durability.Raft
	leadership *partition.Leadership
	ring       *actors.Ring

	inflight  atomic.Int64
	closing   atomic.Bool
	drained   chan struct{}
	drainOnce sync.Once
	closeOnce sync.Once
	closeErr  error
}

var _ Locker = (*Node)(nil)

// Open starts a node and returns once it serves every partition.
func Open(cfg Config) (*Node, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := checkLayout(cfg); err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, drained: make(chan struct{})}
	n.leadership = partition.NewLeadership(cfg.Partitions, cfg.Logger)
	n.backend, err = durability.OpenRaft(durability.RaftConfig{
		Dir:            cfg.DataDir,
		WALDir:         cfg.WALDir,
		RaftAddress:    cfg.RaftAddress,
		Partitions:     cfg.Partitions,
		Logger:         cfg.Logger,
		OnLeaderChange: n.leadership.Observe,
	})
	if err != nil {
		return nil, fmt.Errorf("kahuna: open: %w", err)
	}
	n.ring, err = actors.NewRing(actors.Config{
		Actors:               cfg.LockActors,
		CacheEntryTTL:        cfg.CacheEntryTTL,
		CacheEntriesToRemove: cfg.CacheEntriesToRemove,
		Backend:              n.backend,
		Serving:              n.leadership.Serving,
		Now:                  cfg.Clock,
		Logger:               cfg.Logger,
	})
	if err != nil {
		_ = n.backend.Close()
		return nil, fmt.Errorf("kahuna: open: %w", err)
	}
	n.leadership.Start(n.backend, n.ring)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.StartTimeout)
	defer cancel()
	if err := n.leadership.WaitAll(ctx); err != nil {
		_ = n.Close()
		return nil, fmt.Errorf("kahuna: open: partitions not served within %v: %w", cfg.StartTimeout, err)
	}
	cfg.Logger.Info("kahuna node ready", "data_dir", cfg.DataDir, "partitions", cfg.Partitions, "lock_actors", cfg.LockActors)
	return n, nil
}

// TryLock implements Locker.
func (n *Node) TryLock(ctx context.Context, resource string, owner []byte, ttl time.Duration, d Durability) (Result, error) {
	resp, err := n.do(ctx, actors.Request{Op: lease.TryLock, Resource: resource, Owner: owner, TTL: ttl, Durability: d})
	return Result{Status: resp.Status, FencingToken: resp.Token}, err
}

// Extend implements Locker.
func (n *Node) Extend(ctx context.Context, resource string, owner []byte, ttl time.Duration, d Durability) (Result, error) {
	resp, err := n.do(ctx, actors.Request{Op: lease.Extend, Resource: resource, Owner: owner, TTL: ttl, Durability: d})
	return Result{Status: resp.Status, FencingToken: resp.Token}, err
}

// Unlock implements Locker.
func (n *Node) Unlock(ctx context.Context, resource string, owner []byte, d Durability) (Result, error) {
	resp, err := n.do(ctx, actors.Request{Op: lease.Unlock, Resource: resource, Owner: owner, Durability: d})
	return Result{Status: resp.Status}, err
}

// Get implements Locker. A persistent lock is read from the partition
// leader after its read barrier, so the answer reflects every committed
// write.
func (n *Node) Get(ctx context.Context, resource string, d Durability) (LockInfo, Result, error) {
	resp, err := n.do(ctx, actors.Request{Op: lease.Get, Resource: resource, Durability: d})
	if err != nil || resp.Status != Got {
		return LockInfo{}, Result{Status: resp.Status}, err
	}
	info := LockInfo{
		Owner:        append([]byte(nil), resp.Owner...),
		Expires:      time.UnixMilli(resp.Expires.UnixMilli()),
		FencingToken: resp.Token,
	}
	return info, Result{Status: Got, FencingToken: resp.Token}, nil
}

func (n *Node) do(ctx context.Context, req actors.Request) (actors.Response, error) {
	if !lease.Valid(req.Op, req.Resource, req.Owner, req.TTL, req.Durability) {
		return actors.Response{Status: InvalidInput}, nil
	}
	if !n.enter() {
		return actors.Response{}, ErrClosed
	}
	defer n.exit()
	req.Partition = partition.Of(req.Resource, n.cfg.Partitions)
	if !n.leadership.Serving(req.Partition) {
		return actors.Response{Status: MustRetry}, nil
	}
	resp, err := n.ring.Do(ctx, req)
	if errors.Is(err, actors.ErrClosed) {
		return resp, ErrClosed
	}
	return resp, err
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
		n.leadership.Close()
		if n.ring != nil {
			n.ring.Close()
		}
		if err := n.backend.Close(); err != nil {
			n.closeErr = fmt.Errorf("kahuna: close: %w", err)
		}
	})
	return n.closeErr
}

// Stats is a point-in-time view of a node's work.
type Stats struct {
	CachedEntries int    // entries cached by the lock actors
	Evictions     uint64 // idle entries evicted since Open
	RaftProposals uint64 // Raft entries proposed (each carries a group of writes)
	RaftRecords   uint64 // persistent writes committed and applied
	RaftFailures  uint64 // persistent writes proposed but not applied
}

// Stats reports the node's counters. It is cheap: atomics only.
func (n *Node) Stats() Stats {
	s, b := n.ring.Stats(), n.backend.Stats()
	return Stats{CachedEntries: s.Entries, Evictions: s.Evictions, RaftProposals: b.Proposals, RaftRecords: b.Records, RaftFailures: b.Failures}
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
