package testcluster

import (
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/internal/testport"
)

// NewMember is a cluster member on loopback ports reserved for tb (package
// testport) and bound now: its node's first Open takes the listeners
// (WithListeners), so the ports are held from the moment every member's
// address is known. A restart binds the same addresses again, which the
// reservation keeps free.
func NewMember(tb testing.TB) kahuna.Member {
	tb.Helper()
	raft, api := testport.Listen(tb), testport.Listen(tb)
	for _, l := range []net.Listener{raft, api} {
		addr := l.Addr().String()
		bound.Store(addr, l)
		tb.Cleanup(func() {
			if l, ok := bound.LoadAndDelete(addr); ok {
				l.(net.Listener).Close() // its node never started
			}
		})
	}
	return kahuna.Member{RaftAddress: raft.Addr().String(), Endpoint: "http://" + api.Addr().String()}
}

// UnstartedMember is a member whose node never starts: reserved ports
// nothing listens on, so its peers' dials are refused as they would be by
// a stopped node.
func UnstartedMember(tb testing.TB) kahuna.Member {
	tb.Helper()
	return kahuna.Member{RaftAddress: testport.Addr(tb), Endpoint: "http://" + testport.Addr(tb)}
}

// bound holds the listeners NewMember bound, by address, until a node
// takes them (addresses are reserved, so no two tests share one).
var bound sync.Map

// WithListeners hands cfg the listeners NewMember bound at its node's Raft
// and API addresses, on the node's first start.
func WithListeners(cfg kahuna.Config) kahuna.Config {
	raftAddr := cfg.RaftAddress
	if raftAddr == "" {
		id := cfg.NodeID
		if id == 0 {
			id = 1
		}
		raftAddr = cfg.Members[id].RaftAddress
	}
	if l, ok := bound.LoadAndDelete(raftAddr); ok {
		cfg.RaftListener = l.(net.Listener)
	}
	if l, ok := bound.LoadAndDelete(cfg.ListenAddress); ok {
		cfg.Listener, cfg.ListenAddress = l.(net.Listener), ""
	}
	return cfg
}

// apiAddress is the host:port of a member's endpoint.
func apiAddress(m kahuna.Member) string { return strings.TrimPrefix(m.Endpoint, "http://") }
