package kahuna_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/faults"
)

// faultCluster is three nodes in this process whose links go through a
// faults.Network: Raft over dragonboat's channel transport wrapped by the
// network, forwarding over one TCP proxy per directed pair of nodes. Nodes
// can be killed (Close) and restarted (Open on the same data dir).
type faultCluster struct {
	t          *testing.T
	ids        []uint64
	net        *faults.Network
	partitions int
	cfgs       map[uint64]kahuna.Config

	proxiesTo map[uint64][]*faults.Proxy // the forwarding links into each node

	mu    sync.Mutex
	nodes map[uint64]*kahuna.Node
}

var faultClusterSeq atomic.Uint64

func startFaultCluster(t *testing.T, seed uint64, partitions int) *faultCluster {
	t.Helper()
	c := &faultCluster{
		t: t, ids: []uint64{1, 2, 3}, net: faults.NewNetwork(seed), partitions: partitions,
		cfgs: map[uint64]kahuna.Config{}, nodes: map[uint64]*kahuna.Node{}, proxiesTo: map[uint64][]*faults.Proxy{},
	}
	// Raft addresses only name the nodes on the channel transport; they are
	// unique in the process, as its listener table is global. Each node's
	// API listens on a port of its own choosing; its peers reach it through
	// their proxies, pointed at it once it listens.
	seq := faultClusterSeq.Add(1)
	raft := map[uint64]string{}
	for _, id := range c.ids {
		raft[id] = fmt.Sprintf("faults-%d-%d:%d", seq, id, 2073)
		c.net.AddNode(id, raft[id])
	}
	for _, id := range c.ids {
		members := map[uint64]kahuna.Member{}
		for _, peer := range c.ids {
			m := kahuna.Member{RaftAddress: raft[peer], Endpoint: "http://127.0.0.1:1"} // own endpoint: unused
			if peer != id {
				p, err := c.net.Proxy(id, peer, "")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { p.Close() })
				c.proxiesTo[peer] = append(c.proxiesTo[peer], p)
				m.Endpoint = "http://" + p.Addr()
			}
			members[peer] = m
		}
		c.cfgs[id] = kahuna.WithRaftTransport(kahuna.Config{
			NodeID:        id,
			DataDir:       t.TempDir(),
			Members:       members,
			ListenAddress: "127.0.0.1:0",
			Partitions:    partitions,
			LockActors:    2,
			// Founds the cluster on the first start; every restart finds
			// its data (no test empties a node's dir).
			InitialClusterState: kahuna.ClusterStateNew,
		}, c.net.Factory(nil))
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(c.ids))
	for _, id := range c.ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.start(id); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Cleanup(c.close)
	return c
}

// close stops every node (in parallel).
func (c *faultCluster) close() {
	c.net.Heal()
	c.mu.Lock()
	nodes := c.nodes
	c.nodes = map[uint64]*kahuna.Node{}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); n.Close() }()
	}
	wg.Wait()
}

func (c *faultCluster) start(id uint64) error {
	n, err := kahuna.Open(c.cfgs[id])
	if err != nil {
		return fmt.Errorf("open node %d: %w", id, err)
	}
	for _, p := range c.proxiesTo[id] {
		p.SetTarget(n.ListenAddress())
	}
	c.mu.Lock()
	c.nodes[id] = n
	c.mu.Unlock()
	return nil
}

// node returns node id, or nil while it is down.
func (c *faultCluster) node(id uint64) *kahuna.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id]
}

// up lists the running nodes.
func (c *faultCluster) up() []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []uint64
	for _, id := range c.ids {
		if c.nodes[id] != nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// kill closes node id (calls in flight on it end with ErrClosed).
func (c *faultCluster) kill(id uint64) {
	c.mu.Lock()
	n := c.nodes[id]
	delete(c.nodes, id)
	c.mu.Unlock()
	if n != nil {
		if err := n.Close(); err != nil {
			c.t.Logf("close node %d: %v", id, err)
		}
	}
}

// leaderOf is partition p's leader as the first running node sees it.
func (c *faultCluster) leaderOf(p int) uint64 {
	for _, id := range c.up() {
		if n := c.node(id); n != nil {
			if l, _ := n.Leader(p); l != 0 {
				return l
			}
		}
	}
	return 0
}

// resourcesOnPartitions returns one resource name per partition.
func (c *faultCluster) resourcesOnPartitions(prefix string) []string {
	n := c.node(c.up()[0])
	byP := map[int]string{}
	for i := 0; len(byP) < c.partitions; i++ {
		r := fmt.Sprintf("%s-%d", prefix, i) // no "/": the whole name is hashed
		if _, ok := byP[n.Partition(r)]; !ok {
			byP[n.Partition(r)] = r
		}
	}
	out := make([]string, 0, len(byP))
	for p := 0; p < c.partitions; p++ {
		out = append(out, byP[p])
	}
	return out
}
