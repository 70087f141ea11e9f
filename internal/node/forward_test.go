package node

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna/admin"
	"github.com/kahunago/kahuna/durability"
	"github.com/kahunago/kahuna/faults"
	"github.com/kahunago/kahuna/internal/testport"
	"github.com/kahunago/kahuna/lease"
	"github.com/kahunago/kahuna/partition"
	"github.com/kahunago/kahuna/transport"
)

// These tests pin what a forwarding hop answers: MustRetry
// only when the request certainly never reached the leader, Errored when
// the hop broke after the request may have left.

// leaderLocker is the leader's side of the hop: serve answers every
// request (it may block).
type leaderLocker struct {
	serve func(ctx context.Context, resource string) (lease.Result, error)
}

func (l leaderLocker) TryLock(ctx context.Context, resource string, _ []byte, _ time.Duration, _ lease.Durability) (lease.Result, error) {
	return l.serve(ctx, resource)
}

func (l leaderLocker) Extend(ctx context.Context, resource string, _ []byte, _ time.Duration, _ lease.Durability) (lease.Result, error) {
	return l.serve(ctx, resource)
}

func (l leaderLocker) Unlock(ctx context.Context, resource string, _ []byte, _ lease.Durability) (lease.Result, error) {
	return l.serve(ctx, resource)
}

func (l leaderLocker) Get(ctx context.Context, resource string, _ lease.Durability) (lease.LockInfo, lease.Result, error) {
	r, err := l.serve(ctx, resource)
	return lease.LockInfo{}, r, err
}

// startLeader serves l on the forwarding stream of a loopback listener
// and returns the server and its host:port.
func startLeader(t *testing.T, l lease.Locker) (*transport.Server, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := transport.NewServer(l, transport.ServerOptions{Forwarded: l, Logger: slog.New(slog.DiscardHandler)})
	served := make(chan error, 1)
	go func() { served <- srv.ServeGRPC(lis) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; err != nil && !errors.Is(err, transport.ErrServerClosed) {
			t.Errorf("ServeGRPC: %v", err)
		}
	})
	return srv, lis.Addr().String()
}

// forwarder is node 1 of two, which sees node 2 (at endpoint) lead its
// only partition: every request it gets is forwarded.
func forwarder(t *testing.T, endpoint string) *Node {
	t.Helper()
	n := &Node{
		cfg:        settings{Config: Config{Logger: slog.New(slog.DiscardHandler)}},
		leadership: partition.NewLeadership(1, partition.Options{}),
		peers:      newPeers(map[uint64]admin.Member{1: {}, 2: {Endpoint: endpoint}}, 1),
	}
	n.leadership.Observe(durability.LeaderEvent{Partition: 0, LeaderID: 2, Term: 1})
	t.Cleanup(n.peers.close)
	return n
}

func forwardCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

var fwdOps = []lease.Op{lease.TryLock, lease.Extend, lease.Unlock, lease.Get}

// fwdRequest is a checked request of op; forward sends it as partition 0's.
func fwdRequest(t *testing.T, op lease.Op, resource string) lease.Checked {
	c, why := lease.Request{Op: op, Resource: resource, Owner: []byte("A"), TTL: time.Second, Durability: lease.Persistent}.Check()
	if why != "" {
		t.Fatal(why)
	}
	return c
}

// TestForwardPassesAnswersThrough: the leader's answers, MustRetry and
// Errored included, come back as they are.
func TestForwardPassesAnswersThrough(t *testing.T) {
	statuses := map[string]lease.Status{"locked": lease.Locked, "busy": lease.Busy, "retry": lease.MustRetry, "errored": lease.Errored}
	_, addr := startLeader(t, leaderLocker{serve: func(_ context.Context, resource string) (lease.Result, error) {
		return lease.Result{Status: statuses[resource], FencingToken: 7}, nil
	}})
	n := forwarder(t, "http://"+addr)
	for res, want := range statuses {
		for _, op := range fwdOps {
			_, r, err := n.forward(forwardCtx(t), fwdRequest(t, op, res), 0, false)
			if err != nil || r.Status != want {
				t.Errorf("forward %v %s = %+v, %v, want %v", op, res, r, err, want)
			}
		}
	}
}

// TestForwardNeverSentIsMustRetry: a hop that certainly never delivered
// the request answers MustRetry.
func TestForwardNeverSentIsMustRetry(t *testing.T) {
	t.Run("leader unreachable", func(t *testing.T) {
		n := forwarder(t, "http://"+testport.Addr(t)) // reserved: nothing listens
		for _, op := range fwdOps {
			if _, r, err := n.forward(forwardCtx(t), fwdRequest(t, op, "r"), 0, false); err != nil || r.Status != lease.MustRetry || r.Reason == "" {
				t.Errorf("forward %v to a closed port = %+v, %v, want lease.MustRetry saying why", op, r, err)
			}
		}
		// A batch of names (a session's keep-alive) keeps the reason.
		n.cfg.Partitions = 1
		c, why := lease.Request{Op: lease.Extend, Resource: "s", Also: []string{"a", "b"}, Owner: []byte("A"), TTL: time.Second, Durability: lease.Persistent}.Check()
		if why != "" {
			t.Fatal(why)
		}
		if r, err := n.doBatch(forwardCtx(t), c, false); err != nil || r.Status != lease.MustRetry || r.Reason == "" {
			t.Errorf("a batch forwarded to a closed port = %+v, %v, want MustRetry saying why", r, err)
		}
	})
	t.Run("leader shut down", func(t *testing.T) {
		var served atomic.Int32
		srv, addr := startLeader(t, leaderLocker{serve: func(context.Context, string) (lease.Result, error) {
			served.Add(1)
			return lease.Result{Status: lease.Locked}, nil
		}})
		n := forwarder(t, "http://"+addr)
		if _, r, err := n.forward(forwardCtx(t), fwdRequest(t, lease.TryLock, "r"), 0, false); err != nil || r.Status != lease.Locked {
			t.Fatalf("forward = %+v, %v", r, err)
		}
		// The leader ends its streams cleanly and stops listening: the
		// client is dialled, but nothing more reaches the leader.
		if err := srv.Shutdown(forwardCtx(t)); err != nil {
			t.Fatal(err)
		}
		for _, op := range fwdOps {
			if _, r, err := n.forward(forwardCtx(t), fwdRequest(t, op, "r"), 0, false); err != nil || r.Status != lease.MustRetry {
				t.Errorf("forward %v to a leader that shut down = %+v, %v, want lease.MustRetry", op, r, err)
			}
		}
		if n := served.Load(); n != 1 {
			t.Fatalf("the leader served %d requests, want 1", n)
		}
	})
}

// TestForwardBrokenAfterSendIsErrored: a hop whose connection breaks while
// the leader holds the request answers Errored, not MustRetry: the leader
// goes on and applies it.
func TestForwardBrokenAfterSendIsErrored(t *testing.T) {
	for _, op := range fwdOps {
		t.Run(op.String(), func(t *testing.T) {
			arrived, release, applied := make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
			_, addr := startLeader(t, leaderLocker{serve: func(_ context.Context, resource string) (lease.Result, error) {
				if resource != "held" {
					return lease.Result{Status: lease.Locked}, nil
				}
				arrived <- struct{}{}
				<-release // the leader's work does not stop with the asker
				close(applied)
				return lease.Result{Status: lease.Locked}, nil
			}})
			proxy, err := faults.NewNetwork(1).Proxy(1, 2, addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { proxy.Close() })
			n := forwarder(t, "http://"+proxy.Addr())

			type answer struct {
				r   lease.Result
				err error
			}
			done := make(chan answer, 1)
			go func() {
				_, r, err := n.forward(forwardCtx(t), fwdRequest(t, op, "held"), 0, false)
				done <- answer{r, err}
			}()
			<-arrived // the request reached the leader
			proxy.Reset()
			a := <-done
			if a.err != nil || a.r.Status != lease.Errored {
				t.Fatalf("forward broken after send = %+v, %v, want lease.Errored", a.r, a.err)
			}
			close(release)
			<-applied
		})
	}
}

// TestForwardContextEnded: a caller that gives up gets its context's error.
func TestForwardContextEnded(t *testing.T) {
	arrived := make(chan struct{}, 1)
	_, addr := startLeader(t, leaderLocker{serve: func(ctx context.Context, _ string) (lease.Result, error) {
		arrived <- struct{}{}
		<-ctx.Done()
		return lease.Result{}, ctx.Err()
	}})
	n := forwarder(t, "http://"+addr)
	ctx, cancel := context.WithCancel(forwardCtx(t))
	done := make(chan error, 1)
	go func() {
		_, _, err := n.forward(ctx, fwdRequest(t, lease.TryLock, "r"), 0, false)
		done <- err
	}()
	<-arrived
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("forward with its context cancelled = %v, want context.Canceled", err)
	}
}
