package node

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/kahunago/kahuna/admin"
	"github.com/kahunago/kahuna/lease"
	"github.com/kahunago/kahuna/transport"
)

// peers holds one forwarding client per other member, dialled on first use,
// and whether each member is reachable over Raft.
type peers struct {
	endpoints map[uint64]string
	logger    *slog.Logger
	dial      []transport.ClientOption // the peer secret and TLS (auth), after WithForwarding

	mu      sync.Mutex
	clients map[uint64]*transport.Client
	closed  bool
	up      map[uint64]bool // absent: not heard of yet
}

func newPeers(members map[uint64]admin.Member, self uint64, dial ...transport.ClientOption) *peers {
	ps := &peers{endpoints: map[uint64]string{}, clients: map[uint64]*transport.Client{}, up: map[uint64]bool{}, logger: slog.New(slog.DiscardHandler), dial: dial}
	for id, m := range members {
		if id != self {
			ps.endpoints[id] = forwardTo(m)
		}
	}
	return ps
}

// observe is durability.RaftConfig.OnPeer: this node's Raft connection to
// member id came up or failed. A change is logged at info; a first
// failure, as members start one after another, only at debug.
func (ps *peers) observe(id uint64, up bool) {
	ps.mu.Lock()
	was, known := ps.up[id]
	ps.up[id] = up
	closed := ps.closed
	ps.mu.Unlock()
	switch {
	case closed || known && was == up:
	case up:
		ps.logger.Info("peer up", "peer", id)
	case known:
		ps.logger.Info("peer down", "peer", id)
	default:
		ps.logger.Debug("peer not reachable yet", "peer", id)
	}
}

// stats reports every other member's reachability.
func (ps *peers) stats() []PeerStats {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := make([]PeerStats, 0, len(ps.endpoints))
	for id := range ps.endpoints {
		up, known := ps.up[id]
		out = append(out, PeerStats{ID: id, Known: known, Reachable: up})
	}
	return out
}

// reachable reports whether member id is reachable over Raft now.
func (ps *peers) reachable(id uint64) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.up[id]
}

// get returns the forwarding client of member id. It speaks the
// node-to-node stream and does not retry MustRetry: the hop is one try,
// the original caller decides whether to retry. Its call errors wrap
// lease.ErrNotApplied exactly when the request certainly never reached
// the member (see transport.Client); forward answers MustRetry for those
// and Errored for the rest. An error of get itself means no client, so
// nothing was sent.
func (ps *peers) get(ctx context.Context, id uint64) (lease.Locker, error) {
	ps.mu.Lock()
	if ps.closed {
		ps.mu.Unlock()
		return nil, ErrClosed
	}
	if c, ok := ps.clients[id]; ok {
		ps.mu.Unlock()
		return c, nil
	}
	endpoint, ok := ps.endpoints[id]
	ps.mu.Unlock()
	if !ok || endpoint == "" {
		return nil, fmt.Errorf("kahuna: no endpoint for member %d", id)
	}
	// Dial without the lock: a peer that does not answer must not hold up
	// forwarding to the others.
	c, err := transport.Dial(ctx, []string{endpoint}, append([]transport.ClientOption{transport.WithForwarding()}, ps.dial...)...)
	if err != nil {
		return nil, fmt.Errorf("kahuna: dial member %d at %s: %w", id, endpoint, err)
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.closed {
		_ = c.Close()
		return nil, ErrClosed
	}
	if other, ok := ps.clients[id]; ok { // dialled concurrently: keep one
		_ = c.Close()
		return other, nil
	}
	ps.clients[id] = c
	return c, nil
}

func (ps *peers) close() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.closed = true
	for _, c := range ps.clients {
		_ = c.Close()
	}
	clear(ps.clients)
}

// Learn sets the forwarding endpoint of member id (a member added, or
// one whose endpoint changed), dropping a client dialled to the old one.
func (ps *peers) Learn(id uint64, endpoint string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.endpoints[id] == endpoint {
		return
	}
	ps.endpoints[id] = endpoint
	if c, ok := ps.clients[id]; ok {
		_ = c.Close()
		delete(ps.clients, id)
	}
}

// Forget drops member id (removed from the cluster).
func (ps *peers) Forget(id uint64) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	delete(ps.endpoints, id)
	if c, ok := ps.clients[id]; ok {
		_ = c.Close()
		delete(ps.clients, id)
	}
}
