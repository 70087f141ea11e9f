package kahuna_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/internal/testport"
)

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
