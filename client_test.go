package kahuna_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/transport"
)

// TestSemanticsOverTheWire runs the semantics table (docs/semantics.md) through kahuna.Dial,
// over gRPC and over REST, against a node on a random loopback port.
func TestSemanticsOverTheWire(t *testing.T) {
	clk := newClock()
	n := openNode(t, kahuna.Config{Clock: clk.Now, Partitions: 2, ListenAddress: "127.0.0.1:0"})
	endpoint := "http://" + n.ListenAddress()
	for _, proto := range []struct {
		name string
		opts []kahuna.ClientOption
	}{{"grpc", nil}, {"rest", []kahuna.ClientOption{kahuna.WithREST()}}} {
		t.Run(proto.name, func(t *testing.T) {
			c, err := kahuna.Dial(context.Background(), []string{endpoint}, proto.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for _, d := range durabilities {
				t.Run(d.String(), func(t *testing.T) {
					runScenarios(t, proto.name+"/"+d.String(), c, clk, d) // one name is one lock: each durability its own names
				})
			}
			// Bad input answers InvalidInput over the wire too.
			r, err := c.TryLock(context.Background(), strings.Repeat("x", 2000), []byte("o"), time.Second, kahuna.Persistent)
			if err != nil || r.Status != kahuna.InvalidInput {
				t.Fatalf("oversized resource: %v %v", r.Status, err)
			}
			// The handle works on the client unchanged.
			l, err := kahuna.Acquire(context.Background(), c, "wire/handle/"+proto.name)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Extend(context.Background(), time.Minute); err != nil {
				t.Fatal(err)
			}
			if err := l.Unlock(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestDialRejectsBadEndpoints(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, opts := range [][]kahuna.ClientOption{nil, {kahuna.WithREST()}} {
		if _, err := kahuna.Dial(ctx, []string{"ftp://x"}, opts...); err == nil {
			t.Fatal("ftp:// endpoint accepted")
		}
	}
}

func TestKeepAliveHoldsPastTheTTL(t *testing.T) {
	t.Parallel()
	n := openNode(t, kahuna.Config{})
	ctx := context.Background()
	l, err := kahuna.Acquire(ctx, n, "ka/held", kahuna.WithTTL(300*time.Millisecond), kahuna.WithDurability(kahuna.Persistent))
	if err != nil {
		t.Fatal(err)
	}
	kctx, stop := context.WithCancel(ctx)
	defer stop()
	l.KeepAlive(kctx, 50*time.Millisecond)
	// Time passing is the point here: three TTLs later it is still held.
	time.Sleep(900 * time.Millisecond)
	if r, _ := n.TryLock(ctx, "ka/held", []byte("other"), time.Second, kahuna.Persistent); r.Status != kahuna.Busy {
		t.Fatalf("kept-alive lock: %v, want Busy", r.Status)
	}
	select {
	case <-l.Lost():
		t.Fatal("reported lost while held")
	default:
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if l.Context().Err() == nil {
		t.Fatal("Context not cancelled by Unlock")
	}
	select {
	case <-l.Lost():
		t.Fatal("Unlock is not a loss")
	default:
	}
}

func TestKeepAliveReportsLoss(t *testing.T) {
	clk := newClock()
	n := openNode(t, kahuna.Config{Clock: clk.Now})
	ctx := context.Background()
	l, err := kahuna.Acquire(ctx, n, "ka/lost", kahuna.WithTTL(time.Second), kahuna.WithDurability(kahuna.Ephemeral))
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Second) // the lease lapses on the node's clock
	if r, _ := n.TryLock(ctx, "ka/lost", []byte("thief"), time.Hour, kahuna.Ephemeral); r.Status != kahuna.Locked {
		t.Fatalf("takeover: %v", r.Status)
	}
	l.KeepAlive(ctx, 10*time.Millisecond)
	select {
	case <-l.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("loss not reported")
	}
	// Lost closes first (whoever sees the Context done sees Lost closed),
	// then the Context ends.
	select {
	case <-l.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Context not cancelled after the loss")
	}
	if l.Context().Err() != context.Canceled || !errors.Is(context.Cause(l.Context()), kahuna.ErrLockLost) {
		t.Fatalf("Context on loss: err %v, cause %v", l.Context().Err(), context.Cause(l.Context()))
	}
	if err := l.Extend(ctx, time.Second); !errors.Is(err, kahuna.ErrLockLost) {
		t.Fatalf("extend after loss: %v", err)
	}
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// TestStreamsPerEndpoint: a client's calls to a node go over one
// connection by default, and over as many as WithStreamsPerEndpoint asks.
func TestStreamsPerEndpoint(t *testing.T) {
	t.Parallel()
	n := openNode(t, kahuna.Config{})
	for _, tc := range []struct {
		opts []kahuna.ClientOption
		want int64
	}{
		{nil, 1},
		{[]kahuna.ClientOption{kahuna.WithStreamsPerEndpoint(3)}, 3},
	} {
		t.Run(fmt.Sprintf("want=%d", tc.want), func(t *testing.T) {
			inner, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			lis := &countingListener{Listener: inner}
			srv := transport.NewServer(n, transport.ServerOptions{Logger: slog.New(slog.DiscardHandler)})
			go func() { _ = srv.ServeGRPC(lis) }()
			t.Cleanup(func() { _ = srv.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := kahuna.Dial(ctx, []string{"http://" + lis.Addr().String()}, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// Round robin: six calls use every stream at least once.
			for i := range 6 {
				name := fmt.Sprintf("streams/%d/%d", tc.want, i)
				if r, err := c.TryLock(ctx, name, []byte("o"), time.Minute, kahuna.Ephemeral); err != nil || r.Status != kahuna.Locked {
					t.Fatalf("TryLock %s = %v, %v", name, r, err)
				}
			}
			if got := lis.accepted.Load(); got != tc.want {
				t.Errorf("the node accepted %d connections, want %d", got, tc.want)
			}
		})
	}
}
