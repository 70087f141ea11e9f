package node

import (
	"maps"
	"net/http"
	"strconv"

	"github.com/kahunago/kahuna/lease"
	"github.com/kahunago/kahuna/transport"
)

// ServerOptions are what a caller adds to a node's wire server.
type ServerOptions struct {
	// Extra handlers are served next to the admin API (cmd/kahuna's
	// /metrics).
	Extra map[string]http.Handler
	// Unauthenticated lists the Extra paths served without a token.
	Unauthenticated []string
	// Observe is called once per lock request the server answers
	// (transport.ServerOptions.Observe).
	Observe func(op lease.Op, st lease.Status)
}

// NewServer builds the wire server of n, the one every caller serves a
// node with (Open for Config.ListenAddress, cmd/kahuna on its ports, the
// benchmark's in-process gRPC target): REST and Kahuna's gRPC, the native
// service, the node-to-node forwarding stream served by Local (so a
// request hops at most once), the admin API, and the node's tokens and
// cluster secret. The caller serves it on its listeners and shuts it down.
func (n *Node) NewServer(o ServerOptions) *transport.Server {
	extra := n.adminRoutes()
	maps.Copy(extra, o.Extra)
	return transport.NewServer(n, transport.ServerOptions{
		NodeName:        strconv.FormatUint(n.cfg.NodeID, 10),
		Forwarded:       n.Local(),
		Logger:          n.cfg.Logger,
		Observe:         o.Observe,
		Extra:           extra,
		Tokens:          n.cfg.AuthTokens,
		PeerTokens:      n.cfg.PeerTokens,
		Unauthenticated: o.Unauthenticated,
		Ready:           n.Ready,
	})
}
