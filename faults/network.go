// Package faults injects network faults between the nodes of an in-process
// cluster: a wrapper of dragonboat's Raft transport (messages between Raft
// replicas) and TCP proxies for the node-to-node forwarding links, both
// governed by one table of directed links. It is for tests.
//
// A link is cut (a blackhole: Raft messages are dropped, forwarded bytes
// stall until it heals, as TCP would retransmit them), lossy (Raft message
// batches dropped with a probability) or slow (each batch or chunk delayed).
// Symmetric, one-way and minority partitions, and the network side of a
// paused node (every link to and from it cut, see Isolate), are
// combinations of links.
//
// Apart from the links, a node's replication of one Raft shard can be
// stalled (StallReplication): its Replicate messages for that shard are
// dropped and everything else (heartbeats, votes, read-index traffic)
// passes. A stalled leader stays leader, and keeps answering read indexes,
// while nothing it proposes commits: its proposals stay in flight.
package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lni/dragonboat/v4/config"
	chantransport "github.com/lni/dragonboat/v4/plugin/chan"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// Link is the state of a directed link between two nodes.
type Link struct {
	Cut   bool          // nothing gets through
	Drop  float64       // probability that a Raft message batch is dropped
	Delay time.Duration // each Raft batch / forwarded chunk waits up to Delay
}

func (l Link) String() string {
	var parts []string
	if l.Cut {
		parts = append(parts, "cut")
	}
	if l.Drop > 0 {
		parts = append(parts, fmt.Sprintf("drop %.0f%%", l.Drop*100))
	}
	if l.Delay > 0 {
		parts = append(parts, fmt.Sprintf("delay ≤%v", l.Delay))
	}
	if len(parts) == 0 {
		return "ok"
	}
	return strings.Join(parts, ", ")
}

type edge struct{ from, to uint64 }

// replication is one node's replication of one shard.
type replication struct{ node, shard uint64 }

// Network is the table of links between nodes, by node ID. The zero link
// (healthy) is the default. Safe for concurrent use.
type Network struct {
	mu      sync.Mutex
	links   map[edge]Link
	addrs   map[string]uint64 // Raft address → node ID
	rng     *rand.Rand
	changed chan struct{} // closed and replaced on every change
	proxies map[*Proxy]struct{}
	stalls  map[replication]struct{}
	onHeld  func(node, shard uint64, e pb.Entry)
	// cutOnTimeoutNow: nodes whose inbound links are cut when they next
	// send a TimeoutNow (see CutInboundOnTimeoutNow), with their peers.
	cutOnTimeoutNow map[uint64][]uint64

	Dropped atomic.Int64 // Raft batches and chunks dropped
	Delayed atomic.Int64 // Raft batches and forwarded chunks delayed
	Stalled atomic.Int64 // forwarded chunks held back by a cut
	// Held counts the Replicate messages dropped by stalled replications.
	Held atomic.Int64
}

// NewNetwork returns a healthy network; seed drives the drops and delays.
func NewNetwork(seed uint64) *Network {
	return &Network{
		links:   map[edge]Link{},
		addrs:   map[string]uint64{},
		rng:     rand.New(rand.NewPCG(seed, 0x6661756c7473)),
		changed: make(chan struct{}),
		proxies: map[*Proxy]struct{}{},
		stalls:  map[replication]struct{}{},

		cutOnTimeoutNow: map[uint64][]uint64{},
	}
}

// AddNode names the node at a Raft address.
func (n *Network) AddNode(id uint64, raftAddress string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.addrs[raftAddress] = id
}

// Set sets the link from → to.
func (n *Network) Set(from, to uint64, l Link) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if l == (Link{}) {
		delete(n.links, edge{from, to})
	} else {
		n.links[edge{from, to}] = l
	}
	n.notifyLocked()
}

// SetAll sets every link between distinct nodes of ids.
func (n *Network) SetAll(ids []uint64, l Link) {
	for _, a := range ids {
		for _, b := range ids {
			if a != b {
				n.Set(a, b, l)
			}
		}
	}
}

// Isolate cuts node id off from others, in both directions (a symmetric
// partition; with inbound false only id's outbound links are cut, with
// outbound false only its inbound ones: one-way partitions).
func (n *Network) Isolate(id uint64, others []uint64, outbound, inbound bool) {
	for _, o := range others {
		if o == id {
			continue
		}
		if outbound {
			n.Set(id, o, Link{Cut: true})
		}
		if inbound {
			n.Set(o, id, Link{Cut: true})
		}
	}
}

// Heal makes every link healthy, resumes every stalled replication and
// disarms every CutInboundOnTimeoutNow.
func (n *Network) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.links)
	clear(n.stalls)
	clear(n.cutOnTimeoutNow)
	n.notifyLocked()
}

// CutInboundOnTimeoutNow cuts node's inbound links from others at the
// instant it sends its next TimeoutNow (a leader handing over), before
// that message leaves: the leader's transfer goes ahead (it heard its
// target catch up), and it hears nothing of the election that follows,
// so it goes on believing it leads until its lease runs out. Heal
// disarms it.
func (n *Network) CutInboundOnTimeoutNow(node uint64, others []uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cutOnTimeoutNow[node] = slices.Clone(others)
}

// cutIfTimeoutNow applies an armed CutInboundOnTimeoutNow of node from if
// b carries a TimeoutNow.
func (n *Network) cutIfTimeoutNow(from uint64, b pb.MessageBatch) {
	n.mu.Lock()
	defer n.mu.Unlock()
	others, armed := n.cutOnTimeoutNow[from]
	if !armed || !slices.ContainsFunc(b.Requests, func(m pb.Message) bool { return m.Type == pb.TimeoutNow }) {
		return
	}
	delete(n.cutOnTimeoutNow, from)
	for _, o := range others {
		if o != from {
			n.links[edge{o, from}] = Link{Cut: true}
		}
	}
	n.notifyLocked()
}

// StallReplication drops node's Replicate messages for Raft shard shard,
// to every peer, until ResumeReplication or Heal; its other messages pass.
// If node leads the shard it stays leader (its heartbeats keep CheckQuorum
// satisfied and confirm read indexes) and nothing it appends commits, so
// what it proposes stays in flight until the proposal times out.
func (n *Network) StallReplication(node, shard uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stalls[replication{node, shard}] = struct{}{}
}

// ResumeReplication ends StallReplication(node, shard). Dropped messages
// are not resent by the network; Raft retransmits what its followers lack.
func (n *Network) ResumeReplication(node, shard uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.stalls, replication{node, shard})
}

// OnHeld sets a function called with every entry of a Replicate message
// dropped by a stalled replication (nil: none), from the sending goroutine:
// a test watching what a stalled leader proposes. It must not call back
// into n.
func (n *Network) OnHeld(f func(node, shard uint64, e pb.Entry)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.onHeld = f
}

// holdStalled removes from b the Replicate messages of stalled
// replications of node from, and reports whether anything is left to send.
func (n *Network) holdStalled(from uint64, b *pb.MessageBatch) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.stalls) == 0 {
		return true
	}
	kept := b.Requests[:0:0]
	held := false
	for _, m := range b.Requests {
		if _, stalled := n.stalls[replication{from, m.ShardID}]; !stalled || m.Type != pb.Replicate {
			kept = append(kept, m)
			continue
		}
		held = true
		n.Held.Add(1)
		if n.onHeld != nil {
			for _, e := range m.Entries {
				n.onHeld(from, m.ShardID, e)
			}
		}
	}
	if !held {
		return true
	}
	b.Requests = kept
	return len(kept) > 0
}

func (n *Network) notifyLocked() {
	close(n.changed)
	n.changed = make(chan struct{})
}

// Link returns the link from → to.
func (n *Network) Link(from, to uint64) Link {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.links[edge{from, to}]
}

// String lists the unhealthy links.
func (n *Network) String() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var parts []string
	for e, l := range n.links {
		parts = append(parts, fmt.Sprintf("%d→%d %s", e.from, e.to, l))
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return "healthy"
	}
	return strings.Join(parts, "; ")
}

// decide says what to do with one message on from → to: drop it, or wait
// delay before sending it.
func (n *Network) decide(from, to uint64) (drop bool, delay time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	l := n.links[edge{from, to}]
	if l.Cut || (l.Drop > 0 && n.rng.Float64() < l.Drop) {
		return true, 0
	}
	if l.Delay > 0 {
		delay = time.Duration(n.rng.Int64N(int64(l.Delay) + 1))
	}
	return false, delay
}

// waitOpen blocks while from → to is cut, or until stop is closed; it
// reports whether the link is open.
func (n *Network) waitOpen(from, to uint64, stop <-chan struct{}) bool {
	stalled := false
	for {
		n.mu.Lock()
		cut := n.links[edge{from, to}].Cut
		changed := n.changed
		n.mu.Unlock()
		if !cut {
			return true
		}
		if !stalled {
			stalled = true
			n.Stalled.Add(1)
		}
		select {
		case <-changed:
		case <-stop:
			return false
		}
	}
}

func (n *Network) nodeOf(addr string) uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.addrs[addr]
}

// ErrCut is returned when a Raft snapshot chunk meets a cut link.
var ErrCut = errors.New("faults: link cut")

// Factory returns a Raft transport factory that injects the network's
// faults into inner (nil: dragonboat's in-process channel transport). Every
// node of the cluster must be registered with AddNode.
func (n *Network) Factory(inner config.TransportFactory) config.TransportFactory {
	if inner == nil {
		inner = &chantransport.ChanTransportFactory{}
	}
	return &factory{net: n, inner: inner}
}

type factory struct {
	net   *Network
	inner config.TransportFactory
}

func (f *factory) Create(nhc config.NodeHostConfig, h raftio.MessageHandler, ch raftio.ChunkHandler) raftio.ITransport {
	return &transport{ITransport: f.inner.Create(nhc, h, ch), net: f.net, self: nhc.RaftAddress}
}

// Validate accepts any address: the inner transports of tests have none
// to check (the channel transport's Validate panics).
func (f *factory) Validate(string) bool { return true }

type transport struct {
	raftio.ITransport
	net  *Network
	self string
}

func (t *transport) Name() string { return "faults(" + t.ITransport.Name() + ")" }

func (t *transport) GetConnection(ctx context.Context, target string) (raftio.IConnection, error) {
	c, err := t.ITransport.GetConnection(ctx, target)
	if err != nil {
		return nil, err
	}
	return &conn{IConnection: c, net: t.net, from: t.net.nodeOf(t.self), to: t.net.nodeOf(target)}, nil
}

func (t *transport) GetSnapshotConnection(ctx context.Context, target string) (raftio.ISnapshotConnection, error) {
	c, err := t.ITransport.GetSnapshotConnection(ctx, target)
	if err != nil {
		return nil, err
	}
	return &snapConn{ISnapshotConnection: c, net: t.net, from: t.net.nodeOf(t.self), to: t.net.nodeOf(target)}, nil
}

type conn struct {
	raftio.IConnection
	net      *Network
	from, to uint64
}

// SendMessageBatch drops or delays the batch as the link says, without
// the Replicate messages of a stalled replication. A dropped batch is
// reported sent: the network lost it.
func (c *conn) SendMessageBatch(b pb.MessageBatch) error {
	c.net.cutIfTimeoutNow(c.from, b)
	if !c.net.holdStalled(c.from, &b) {
		return nil
	}
	drop, delay := c.net.decide(c.from, c.to)
	if drop {
		c.net.Dropped.Add(1)
		return nil
	}
	if delay > 0 {
		c.net.Delayed.Add(1)
		time.Sleep(delay)
	}
	return c.IConnection.SendMessageBatch(b)
}

type snapConn struct {
	raftio.ISnapshotConnection
	net      *Network
	from, to uint64
}

func (c *snapConn) SendChunk(ch pb.Chunk) error {
	if drop, _ := c.net.decide(c.from, c.to); drop {
		c.net.Dropped.Add(1)
		return ErrCut
	}
	return c.ISnapshotConnection.SendChunk(ch)
}
