// Package testcluster runs a kahuna cluster inside a test: members on
// loopback, data dirs in the test's temp dir, Raft links optionally
// through a faults.Network, forwarding optionally through its proxies,
// nodes stopped, crashed and restarted on the same data dir. The root
// package's tests, its benchmarks and the fault suite (tests/faults) all
// start their clusters here.
package testcluster

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/faults"
	"github.com/kahunago/kahuna/internal/testknobs"
)

// Options shape a cluster. The zero value is three members on loopback
// TCP (Raft and the API), each calling the others directly.
type Options struct {
	// Nodes is how many members found the cluster, IDs 1 to Nodes
	// (default 3).
	Nodes int
	// Partitions is each node's Config.Partitions.
	Partitions int
	// Network, if set, carries the Raft links: kahuna's TCP transport
	// wrapped by it, or with Channel dragonboat's channel transport
	// (in-process, no sockets) through it.
	Network *faults.Network
	Channel bool
	// Proxies sends each node's forwarded calls to a peer through a
	// Network proxy of that directed pair (a cut link stalls them);
	// needs Network. Without it nodes call each other's API directly.
	Proxies bool
	// Mod, if set, changes each node's config before each start.
	Mod func(id uint64, cfg *kahuna.Config)
	// OnServe, if set, starts every reign of every node: it must call
	// serve once (partition.Options.OnServe).
	OnServe func(id uint64, p int, term uint64, serve func())
	// Wait bounds Transfer and WaitServing (default 30 s).
	Wait time.Duration
	// TransferRetry is how long Transfer waits for the target to serve
	// before it asks again (default 1 s; a slow tick needs longer).
	TransferRetry time.Duration
}

// Cluster is the running cluster. Its methods may be called from any
// goroutine, except those that fail the test (Start, Spread, Transfer,
// WaitServing), which belong to the test's.
type Cluster struct {
	tb   testing.TB
	opts Options
	ids  []uint64 // founding members

	mu        sync.Mutex
	members   map[uint64]kahuna.Member            // as the others know each node
	peers     map[uint64]map[uint64]kahuna.Member // with Proxies: the members as each node calls them
	proxiesTo map[uint64][]*faults.Proxy          // with Proxies: the forwarding links into each node
	dirs      map[uint64]string
	nodes     map[uint64]*kahuna.Node
	began     chan struct{} // closed and replaced when a reign begins
}

var channelSeq atomic.Uint64

// New lays out a cluster (members, data dirs, links) without starting a
// node; Start starts them. Every node still running is closed when the
// test ends.
func New(tb testing.TB, opts Options) *Cluster {
	tb.Helper()
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	if opts.Wait == 0 {
		opts.Wait = 30 * time.Second
	}
	if opts.TransferRetry == 0 {
		opts.TransferRetry = time.Second
	}
	c := &Cluster{
		tb: tb, opts: opts, members: map[uint64]kahuna.Member{}, dirs: map[uint64]string{},
		nodes: map[uint64]*kahuna.Node{}, began: make(chan struct{}),
	}
	seq := channelSeq.Add(1)
	for id := uint64(1); id <= uint64(opts.Nodes); id++ {
		c.ids = append(c.ids, id)
		switch {
		case opts.Channel:
			// The address only names the node on the channel transport;
			// unique in the process, as its listener table is global.
			c.members[id] = kahuna.Member{RaftAddress: fmt.Sprintf("faults-%d-%d:%d", seq, id, 2073), Endpoint: "http://127.0.0.1:1"}
		default:
			c.members[id] = NewMember(tb)
		}
		c.dirs[id] = tb.TempDir()
		if opts.Network != nil {
			opts.Network.AddNode(id, c.members[id].RaftAddress)
		}
	}
	if opts.Proxies {
		// Each node's API listens on a port of its own choosing; its peers
		// reach it through their proxies, pointed at it once it listens.
		c.peers, c.proxiesTo = map[uint64]map[uint64]kahuna.Member{}, map[uint64][]*faults.Proxy{}
		for _, id := range c.ids {
			c.peers[id] = map[uint64]kahuna.Member{}
			for _, peer := range c.ids {
				m := c.members[peer] // own endpoint: unused
				if peer != id {
					p, err := opts.Network.Proxy(id, peer, "")
					if err != nil {
						tb.Fatal(err)
					}
					tb.Cleanup(func() { p.Close() })
					c.proxiesTo[peer] = append(c.proxiesTo[peer], p)
					m.Endpoint = "http://" + p.Addr()
				}
				c.peers[id][peer] = m
			}
		}
	}
	tb.Cleanup(c.Close)
	return c
}

// Start lays out a cluster with New and starts every member at once (each
// Open waits for a quorum).
func Start(tb testing.TB, opts Options) *Cluster {
	tb.Helper()
	c := New(tb, opts)
	errs := c.StartNodes(c.ids, nil)
	for _, id := range c.ids {
		if errs[id] != nil {
			tb.Fatal(errs[id])
		}
	}
	return c
}

// StartNodes starts the given nodes at once, each with mod (if not nil)
// changing its config last, and returns the errors of those that failed.
func (c *Cluster) StartNodes(ids []uint64, mod func(id uint64, cfg *kahuna.Config)) map[uint64]error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := map[uint64]error{}
	for _, id := range ids {
		wg.Go(func() {
			var err error
			if mod != nil {
				err = c.StartNode(id, func(cfg *kahuna.Config) { mod(id, cfg) })
			} else {
				err = c.StartNode(id)
			}
			if err != nil {
				mu.Lock()
				errs[id] = err
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errs
}

// Config is node id's config as its next start uses it, before mods:
// founding the cluster (ClusterStateNew) on an empty data dir, two lock
// actors, then Options.Mod.
func (c *Cluster) Config(id uint64) kahuna.Config {
	c.mu.Lock()
	cfg := kahuna.Config{
		NodeID:              id,
		DataDir:             c.dirs[id],
		Members:             maps.Clone(c.members),
		ListenAddress:       apiAddress(c.members[id]),
		Partitions:          c.opts.Partitions,
		LockActors:          2,
		InitialClusterState: kahuna.ClusterStateNew,
	}
	if c.opts.Proxies {
		cfg.Members, cfg.ListenAddress = maps.Clone(c.peers[id]), "127.0.0.1:0"
	}
	c.mu.Unlock()
	switch {
	case c.opts.Network != nil && c.opts.Channel:
		cfg = testknobs.WithRaftTransport(cfg, c.opts.Network.Factory(nil))
	case c.opts.Network != nil:
		cfg = testknobs.WithRaftTransportWrap(cfg, c.opts.Network.Factory)
	}
	cfg = testknobs.WithServeHook(cfg, func(p int, term uint64, serve func()) { c.serve(id, p, term, serve) })
	if c.opts.Mod != nil {
		c.opts.Mod(id, &cfg)
	}
	return cfg
}

// StartNode opens node id on its data dir (a restart, if it ran before),
// with mods changing its config after Config's.
func (c *Cluster) StartNode(id uint64, mods ...func(*kahuna.Config)) error {
	cfg := c.Config(id)
	for _, mod := range mods {
		mod(&cfg)
	}
	n, err := kahuna.Open(WithListeners(cfg))
	if err != nil {
		return fmt.Errorf("node %d: %w", id, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.proxiesTo[id] {
		p.SetTarget(n.ListenAddress())
	}
	c.nodes[id] = n
	return nil
}

// serve starts a reign of node id, through Options.OnServe if set, and
// then tells the waiters of Began.
func (c *Cluster) serve(id uint64, p int, term uint64, serve func()) {
	if c.opts.OnServe != nil {
		c.opts.OnServe(id, p, term, serve)
	} else {
		serve()
	}
	c.mu.Lock()
	close(c.began)
	c.began = make(chan struct{})
	c.mu.Unlock()
}

// Began is closed when the next reign of any node has begun.
func (c *Cluster) Began() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.began
}

// AddMember lays out member id (new addresses, an empty data dir) to be
// added to the cluster and started with StartNode; it returns the member.
func (c *Cluster) AddMember(id uint64) kahuna.Member {
	m := NewMember(c.tb)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.members[id], c.dirs[id] = m, c.tb.TempDir()
	return m
}

// Member is member id as the others know it.
func (c *Cluster) Member(id uint64) kahuna.Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members[id]
}

// Members is every member as the others know it.
func (c *Cluster) Members() map[uint64]kahuna.Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.members)
}

// NewDir gives node id an empty data dir, as a replaced disk would, and
// returns it.
func (c *Cluster) NewDir(id uint64) string {
	dir := c.tb.TempDir()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dirs[id] = dir
	return dir
}

// IDs lists the founding members.
func (c *Cluster) IDs() []uint64 { return slices.Clone(c.ids) }

// Others lists the founding members but id.
func (c *Cluster) Others(id uint64) []uint64 {
	return slices.DeleteFunc(c.IDs(), func(x uint64) bool { return x == id })
}

// Node returns node id, or nil while it is down.
func (c *Cluster) Node(id uint64) *kahuna.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id]
}

// Up lists the running nodes, in ID order.
func (c *Cluster) Up() []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.nodes))
}

// take removes node id from the running ones and returns it (nil if it
// was down).
func (c *Cluster) take(id uint64) *kahuna.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[id]
	delete(c.nodes, id)
	return n
}

// Stop closes node id cleanly (calls in flight on it end with
// ErrClosed); nothing if it is down.
func (c *Cluster) Stop(id uint64) error {
	if n := c.take(id); n != nil {
		return n.Close()
	}
	return nil
}

// Crash closes node id as a crash would leave the cluster: nothing handed
// over or recorded for the next leader; nothing if it is down.
func (c *Cluster) Crash(id uint64) error {
	if n := c.take(id); n != nil {
		return testknobs.Crash(n)
	}
	return nil
}

// Close heals the network and closes every node still running, at once
// (also when the test ends).
func (c *Cluster) Close() {
	if c.opts.Network != nil {
		c.opts.Network.Heal()
	}
	c.mu.Lock()
	nodes := c.nodes
	c.nodes = map[uint64]*kahuna.Node{}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() { n.Close() })
	}
	wg.Wait()
}

// Leader is partition p's leader as the first running node that knows one
// sees it (0: none known).
func (c *Cluster) Leader(p int) uint64 {
	for _, id := range c.Up() {
		if n := c.Node(id); n != nil {
			if l, _ := n.Leader(p); l != 0 {
				return l
			}
		}
	}
	return 0
}

// servingOther is a running node other than except that serves p as its
// leader, or 0.
func (c *Cluster) servingOther(p int, except uint64) uint64 {
	for _, id := range c.Up() {
		if n := c.Node(id); id != except && n != nil {
			if l, serving := n.Leader(p); l == id && serving {
				return id
			}
		}
	}
	return 0
}

// WaitServing waits until a node other than except serves partition p as
// its leader, and returns it. A reign begins with a signal (Began); a
// lapsed lease renewed does not, so it looks again now and then.
func (c *Cluster) WaitServing(p int, except uint64) uint64 {
	c.tb.Helper()
	deadline := time.After(c.opts.Wait)
	recheck := time.NewTicker(50 * time.Millisecond)
	defer recheck.Stop()
	for {
		began := c.Began()
		if id := c.servingOther(p, except); id != 0 {
			return id
		}
		select {
		case <-began:
		case <-recheck.C:
		case <-deadline:
			c.tb.Fatalf("no node but %d serves partition %d after %v", except, p, c.opts.Wait)
		}
	}
}

// Transfer moves partition p's leadership to node to and waits until it
// serves p there. Only the leader may start a transfer, and a transfer can
// be ignored (another in progress, target catching up), so it is
// re-requested of whoever leads until it happens.
func (c *Cluster) Transfer(p int, to uint64) {
	c.tb.Helper()
	deadline := time.Now().Add(c.opts.Wait)
	serves := func() bool { _, serving := c.Node(to).Leader(p); return serving }
	recheck := time.NewTicker(10 * time.Millisecond)
	defer recheck.Stop()
	for time.Now().Before(deadline) {
		if serves() {
			return
		}
		if leader, _ := c.Node(to).Leader(p); c.Node(leader) != nil {
			if err := c.Node(leader).TransferLeadership(p, to); err != nil {
				c.tb.Logf("transfer of partition %d from %d to %d: %v (retrying)", p, leader, to, err)
			}
		}
		retry := time.After(c.opts.TransferRetry)
	wait:
		for {
			began := c.Began()
			if serves() {
				return
			}
			select {
			case <-began:
			case <-recheck.C: // a lease renewed after a lapse begins no reign
			case <-retry:
				break wait
			}
		}
	}
	c.tb.Fatalf("partition %d not led by node %d after %v", p, to, c.opts.Wait)
}

// Spread makes node p%n+1 lead partition p, as Open spreads leaders on a
// best-effort basis (a loaded machine lets moves slip), and waits until
// every running node sees it, asking again where a move slipped: tests
// then begin from a steady state.
func (c *Cluster) Spread() {
	c.tb.Helper()
	want := func(p int) uint64 { return uint64(p%len(c.ids) + 1) }
	for p := range c.opts.Partitions {
		c.Transfer(p, want(p))
	}
	// The partitions not yet seen at their node by every running node.
	unspread := func() (ps []int) {
		for p := range c.opts.Partitions {
			for _, id := range c.Up() {
				if n := c.Node(id); n != nil {
					if l, _ := n.Leader(p); l != want(p) {
						ps = append(ps, p)
						break
					}
				}
			}
		}
		return ps
	}
	deadline := time.After(c.opts.Wait)
	ask := time.NewTicker(c.opts.TransferRetry)
	defer ask.Stop()
	recheck := time.NewTicker(10 * time.Millisecond) // a follower learning the leader gives no signal
	defer recheck.Stop()
	for {
		ps := unspread()
		if len(ps) == 0 {
			return
		}
		select {
		case <-ask.C:
			for _, p := range ps {
				if to := c.Node(want(p)); to != nil {
					if l, _ := to.Leader(p); l != want(p) && c.Node(l) != nil {
						_ = c.Node(l).TransferLeadership(p, want(p))
					}
				}
			}
		case <-recheck.C:
		case <-deadline:
			c.tb.Fatalf("partitions %v not seen led by node p%%%d+1 by every node after %v", ps, len(c.ids), c.opts.Wait)
		}
	}
}
