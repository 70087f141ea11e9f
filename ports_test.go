package kahuna_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/internal/testport"
)

// newMember is a cluster member on loopback ports reserved for t (package
// testport) and bound now: its node's first Open takes the listeners
// (withListeners), so the ports are held from the moment every member's
// address is known. A restart binds the same addresses again, which the
// reservation keeps free.
func newMember(t testing.TB) kahuna.Member {
	t.Helper()
	raft, api := testport.Listen(t), testport.Listen(t)
	for _, l := range []net.Listener{raft, api} {
		addr := l.Addr().String()
		bound.Store(addr, l)
		t.Cleanup(func() {
			if l, ok := bound.LoadAndDelete(addr); ok {
				l.(net.Listener).Close() // its node never started
			}
		})
	}
	return kahuna.Member{RaftAddress: raft.Addr().String(), Endpoint: "http://" + api.Addr().String()}
}

// unstartedMember is a member whose node never starts: reserved ports
// nothing listens on, so its peers' dials are refused as they would be by
// a stopped node.
func unstartedMember(t testing.TB) kahuna.Member {
	t.Helper()
	return kahuna.Member{RaftAddress: testport.Addr(t), Endpoint: "http://" + testport.Addr(t)}
}

// bound holds the listeners newMember bound, by address, until a node
// takes them (addresses are reserved, so no two tests share one).
var bound sync.Map

// withListeners hands cfg the listeners newMember bound at its node's Raft
// and API addresses, on the node's first start.
func withListeners(cfg kahuna.Config) kahuna.Config {
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

// A node serves on the listeners it is handed (Raft's address is bound by
// the listener itself, so binding it again would fail) and closes them
// with Close; Open refuses listeners its addresses contradict, closing
// them as well.
func TestOpenOnGivenListeners(t *testing.T) {
	api, raft := testport.Listen(t), testport.Listen(t)
	n, err := kahuna.Open(kahuna.Config{Listener: api, RaftListener: raft, RaftAddress: raft.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	if got := n.ListenAddress(); got != api.Addr().String() {
		t.Errorf("ListenAddress() = %q, want the listener's %q", got, api.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := kahuna.Dial(ctx, []string{"http://" + api.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c.TryLock(ctx, "given", []byte("o"), time.Minute, kahuna.Persistent); err != nil || r.Status != kahuna.Locked {
		t.Fatalf("TryLock over the given listener: %v, %v", r.Status, err)
	}
	c.Close()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	closed(t, "after Close", api, raft)

	for name, tc := range map[string]struct {
		cfg  func(l net.Listener) kahuna.Config
		want string
	}{
		"Listener and ListenAddress": {func(l net.Listener) kahuna.Config {
			return kahuna.Config{Listener: l, ListenAddress: l.Addr().String()}
		}, "give one"},
		"RaftListener, no RaftAddress": {func(l net.Listener) kahuna.Config {
			return kahuna.Config{RaftListener: l}
		}, "needs a RaftAddress"},
		"RaftListener at another port": {func(l net.Listener) kahuna.Config {
			return kahuna.Config{RaftListener: l, RaftAddress: "127.0.0.1:1"}
		}, "not at RaftAddress"},
	} {
		l := testport.Listen(t)
		if n, err := kahuna.Open(tc.cfg(l)); err == nil || !strings.Contains(err.Error(), tc.want) {
			if n != nil {
				n.Close()
			}
			t.Errorf("%s: Open = %v, want an error with %q", name, err, tc.want)
		}
		closed(t, name, l)
	}
}

// closed fails the test unless every listener in ls is closed.
func closed(t *testing.T, when string, ls ...net.Listener) {
	t.Helper()
	for _, l := range ls {
		if !testport.Closed(l) {
			t.Errorf("%s: listener %s left open", when, l.Addr())
		}
	}
}
