package kahuna

import "github.com/kahunago/kahuna/durability"

// WithRaftTransport returns cfg with its Raft transport replaced by f: the
// fault tests wrap dragonboat's channel transport to cut, drop and delay
// Raft messages between the nodes of an in-process cluster.
func WithRaftTransport(cfg Config, f durability.TransportFactory) Config {
	cfg.raftTransport = f
	return cfg
}
