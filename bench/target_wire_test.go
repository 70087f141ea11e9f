package bench

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna/lease"
	"github.com/kahunago/kahuna/transport"
)

// serve runs the project's server over l on a loopback port (REST and h2c
// gRPC on one listener) and returns its URL.
func serve(t *testing.T, l lease.Locker) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := transport.NewServer(l, transport.ServerOptions{Logger: quiet})
	go func() { _ = srv.ServeHTTP(lis) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + lis.Addr().String()
}

// The REST client is the harness's own: check it speaks the server's JSON,
// every call and status, as the gRPC client does.
func TestWireTargetsAgainstTheServer(t *testing.T) {
	endpoint := serve(t, NewMutexLocker())
	for _, target := range []Target{RESTTarget(), GRPCTarget(), NativeTarget()} {
		t.Run(target.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			sys, err := target.Open(ctx, Settings{Endpoints: []string{endpoint}, Concurrency: 2, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer sys.Close()
			l, err := sys.Locker(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			res := "wire/" + target.Name
			a, b := []byte("owner-a"), []byte("owner-b")
			check := func(what string, r lease.Result, err error, want lease.Status) {
				t.Helper()
				if err != nil || r.Status != want {
					t.Fatalf("%s = %v, %v; want %v", what, r.Status, err, want)
				}
			}
			r, err := l.TryLock(ctx, res, a, time.Minute, lease.Ephemeral)
			check("TryLock a", r, err, lease.Locked)
			r, err = l.TryLock(ctx, res, b, time.Minute, lease.Ephemeral)
			check("TryLock b", r, err, lease.Busy)
			r, err = l.Extend(ctx, res, a, 2*time.Minute, lease.Ephemeral)
			check("Extend a", r, err, lease.Extended)
			r, err = l.Extend(ctx, res, b, time.Minute, lease.Ephemeral)
			check("Extend b", r, err, lease.InvalidOwner)
			info, r, err := l.Get(ctx, res, lease.Ephemeral)
			check("Get", r, err, lease.Got)
			if string(info.Owner) != "owner-a" || time.Until(info.Expires) < time.Minute {
				t.Errorf("Get = owner %q, expires in %v; want owner-a, ~2m", info.Owner, time.Until(info.Expires))
			}
			r, err = l.Unlock(ctx, res, b, lease.Ephemeral)
			check("Unlock b", r, err, lease.InvalidOwner)
			r, err = l.Unlock(ctx, res, a, lease.Ephemeral)
			check("Unlock a", r, err, lease.Unlocked)
			_, r, err = l.Get(ctx, res, lease.Ephemeral)
			check("Get after unlock", r, err, lease.LockDoesNotExist)
			r, err = l.TryLock(ctx, res, b, time.Minute, lease.Ephemeral)
			if check("TryLock b again", r, err, lease.Locked); r.FencingToken != 1 {
				t.Errorf("second grant's token = %d, want 1", r.FencingToken)
			}
			r, err = l.TryLock(ctx, "", a, time.Minute, lease.Ephemeral)
			check("TryLock of no resource", r, err, lease.InvalidInput)
		})
	}
}

// A short lock-workload run through each wire target: the full path.
func TestWireTargetsRun(t *testing.T) {
	c := testConfig(WorkloadLock)
	c.Endpoints = []string{serve(t, NewMutexLocker())}
	for _, target := range []Target{RESTTarget(), GRPCTarget(), NativeTarget()} {
		res := run(t, c, target)
		if res.Aggregate.Count == 0 || res.Aggregate.Errors != 0 || res.AllocsPerOp != nil {
			t.Errorf("%s: %+v %v, allocs %v", target.Name, res.Aggregate, res.Errors, res.AllocsPerOp)
		}
	}
}

// batchStreamCounter counts the connections that open with the framing's
// hello of a batch stream ("\x00KF1b"): the client's other connections
// (gRPC for its unary calls) do not count.
type batchStreamCounter struct {
	net.Listener
	streams atomic.Int64
}

func (l *batchStreamCounter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	return &helloConn{Conn: c, count: &l.streams}, nil
}

// batchHello opens a framed batch stream: the first bytes a client sends.
var batchHello = []byte("\x00KF1b")

// helloConn looks at the first bytes the server reads, over as many reads
// as they take (a loaded machine may hand over a hello in pieces).
type helloConn struct {
	net.Conn
	count *atomic.Int64
	first []byte // the first bytes read, up to a hello's length
	done  bool
}

func (c *helloConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if !c.done && n > 0 {
		c.first = append(c.first, b[:min(n, len(batchHello)-len(c.first))]...)
		if len(c.first) == len(batchHello) {
			c.done = true
			if bytes.Equal(c.first, batchHello) {
				c.count.Add(1)
			}
		}
	}
	return n, err
}

// waitingMutex is a Locker the server takes for a WaitLocker, so it serves
// the framing: without one it closes each framed stream at its hello, the
// client falls back to gRPC and stops framing for a while, and whether a
// later stream says hello at all depends on which opened first.
type waitingMutex struct{ lease.Locker }

// Lock never waits: the test's locks are all free.
func (w waitingMutex) Lock(ctx context.Context, resource string, owner []byte, ttl, _ time.Duration, d lease.Durability) (lease.Result, error) {
	return w.TryLock(ctx, resource, owner, ttl, d)
}

// Settings.Streams (--streams) reaches the client: a native target opened
// with 3 opens three batch streams to the node, one without it.
func TestStreamsReachTheClient(t *testing.T) {
	for _, c := range []struct{ streams, want int }{{0, 1}, {3, 3}} {
		inner, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis := &batchStreamCounter{Listener: inner}
		srv := transport.NewServer(waitingMutex{NewMutexLocker()}, transport.ServerOptions{Logger: quiet})
		go func() { _ = srv.ServeGRPC(lis) }()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		sys, err := NativeTarget().Open(ctx, Settings{Endpoints: []string{"http://" + lis.Addr().String()}, Streams: c.streams, Concurrency: 1, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		l, err := sys.Locker(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 6 { // round robin: every stream carries a call
			if r, err := l.TryLock(ctx, fmt.Sprintf("streams/%d/%d", c.streams, i), []byte("o"), time.Minute, lease.Ephemeral); err != nil || r.Status != lease.Locked {
				t.Fatalf("TryLock = %v, %v", r.Status, err)
			}
		}
		if got := lis.streams.Load(); got != int64(c.want) {
			t.Errorf("--streams %d: the node accepted %d batch streams, want %d", c.streams, got, c.want)
		}
		_ = sys.Close()
		_ = srv.Close()
		cancel()
	}
}
