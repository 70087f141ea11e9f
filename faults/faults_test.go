package faults

import (
	"bufio"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

func TestLinks(t *testing.T) {
	n := NewNetwork(1)
	n.Isolate(1, []uint64{1, 2, 3}, true, false) // one-way: 1 cannot send
	if !n.Link(1, 2).Cut || !n.Link(1, 3).Cut || n.Link(2, 1).Cut {
		t.Fatalf("one-way isolation: %s", n)
	}
	if drop, _ := n.decide(1, 2); !drop {
		t.Fatal("cut link delivered")
	}
	if drop, _ := n.decide(2, 1); drop {
		t.Fatal("healthy link dropped")
	}
	n.SetAll([]uint64{1, 2}, Link{Drop: 1})
	if drop, _ := n.decide(2, 1); !drop {
		t.Fatal("drop 100% delivered")
	}
	n.Set(2, 1, Link{Delay: 10 * time.Millisecond})
	for i := 0; i < 20; i++ {
		if drop, d := n.decide(2, 1); drop || d > 10*time.Millisecond {
			t.Fatalf("delay link: drop=%v delay=%v", drop, d)
		}
	}
	if s := n.String(); !strings.Contains(s, "2→1 delay") {
		t.Fatalf("String: %s", s)
	}
	n.Heal()
	if n.String() != "healthy" {
		t.Fatalf("after heal: %s", n)
	}
}

// fakeTransport records what reaches it.
type fakeTransport struct{ sent chan pb.MessageBatch }

func (f *fakeTransport) Name() string { return "fake" }
func (f *fakeTransport) Start() error { return nil }
func (f *fakeTransport) Close() error { return nil }
func (f *fakeTransport) GetConnection(context.Context, string) (raftio.IConnection, error) {
	return fakeConn{f}, nil
}
func (f *fakeTransport) GetSnapshotConnection(context.Context, string) (raftio.ISnapshotConnection, error) {
	return fakeSnap{}, nil
}

type fakeConn struct{ f *fakeTransport }

func (fakeConn) Close() {}
func (c fakeConn) SendMessageBatch(b pb.MessageBatch) error {
	c.f.sent <- b
	return nil
}

type fakeSnap struct{}

func (fakeSnap) Close()                   {}
func (fakeSnap) SendChunk(pb.Chunk) error { return nil }

type fakeFactory struct{ t *fakeTransport }

func (f fakeFactory) Create(config.NodeHostConfig, raftio.MessageHandler, raftio.ChunkHandler) raftio.ITransport {
	return f.t
}
func (fakeFactory) Validate(string) bool { return true }

func TestTransportWrapper(t *testing.T) {
	n := NewNetwork(1)
	n.AddNode(1, "a:1")
	n.AddNode(2, "b:1")
	ft := &fakeTransport{sent: make(chan pb.MessageBatch, 10)}
	tr := n.Factory(fakeFactory{ft}).Create(config.NodeHostConfig{RaftAddress: "a:1"}, nil, nil)
	c, err := tr.GetConnection(context.Background(), "b:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SendMessageBatch(pb.MessageBatch{BinVer: 1}); err != nil || len(ft.sent) != 1 {
		t.Fatalf("healthy send: %v, %d delivered", err, len(ft.sent))
	}
	n.Set(1, 2, Link{Cut: true})
	if err := c.SendMessageBatch(pb.MessageBatch{BinVer: 2}); err != nil || len(ft.sent) != 1 {
		t.Fatalf("cut send: %v, %d delivered", err, len(ft.sent))
	}
	sc, _ := tr.GetSnapshotConnection(context.Background(), "b:1")
	if err := sc.SendChunk(pb.Chunk{}); err != ErrCut {
		t.Fatalf("chunk over a cut link: %v", err)
	}
	if n.Dropped.Load() != 2 {
		t.Fatalf("dropped %d", n.Dropped.Load())
	}
	n.Set(2, 1, Link{Cut: true}) // the other direction does not matter
	n.Set(1, 2, Link{})
	if err := c.SendMessageBatch(pb.MessageBatch{BinVer: 3}); err != nil || len(ft.sent) != 2 {
		t.Fatalf("healed send: %v, %d delivered", err, len(ft.sent))
	}
}

func TestStallReplication(t *testing.T) {
	n := NewNetwork(1)
	n.AddNode(1, "a:1")
	n.AddNode(2, "b:1")
	ft := &fakeTransport{sent: make(chan pb.MessageBatch, 10)}
	tr := n.Factory(fakeFactory{ft}).Create(config.NodeHostConfig{RaftAddress: "a:1"}, nil, nil)
	c, err := tr.GetConnection(context.Background(), "b:1")
	if err != nil {
		t.Fatal(err)
	}
	var held []uint64
	n.OnHeld(func(node, shard uint64, e pb.Entry) {
		if node != 1 || shard != 7 {
			t.Errorf("held entry of node %d shard %d", node, shard)
		}
		held = append(held, e.Index)
	})
	n.StallReplication(1, 7)
	batch := pb.MessageBatch{Requests: []pb.Message{
		{ShardID: 7, Type: pb.Replicate, Entries: []pb.Entry{{Index: 5}, {Index: 6}}},
		{ShardID: 7, Type: pb.Heartbeat},
		{ShardID: 8, Type: pb.Replicate},
	}}
	if err := c.SendMessageBatch(batch); err != nil {
		t.Fatal(err)
	}
	got := <-ft.sent
	if len(got.Requests) != 2 || got.Requests[0].Type != pb.Heartbeat || got.Requests[1].ShardID != 8 {
		t.Fatalf("stalled batch delivered %+v", got.Requests)
	}
	if len(batch.Requests) != 3 || batch.Requests[0].Type != pb.Replicate {
		t.Fatal("the caller's batch was changed")
	}
	if n.Held.Load() != 1 || len(held) != 2 || held[0] != 5 || held[1] != 6 {
		t.Fatalf("held %d messages, entries %v", n.Held.Load(), held)
	}
	// Only Replicate messages of the stalled shard: nothing sent at all.
	if err := c.SendMessageBatch(pb.MessageBatch{Requests: batch.Requests[:1]}); err != nil || len(ft.sent) != 0 {
		t.Fatalf("all-stalled batch: %v, %d delivered", err, len(ft.sent))
	}
	n.Heal()
	if err := c.SendMessageBatch(pb.MessageBatch{Requests: batch.Requests[:1]}); err != nil || len(ft.sent) != 1 {
		t.Fatalf("after heal: %v, %d delivered", err, len(ft.sent))
	}
	<-ft.sent
	n.StallReplication(1, 7)
	n.ResumeReplication(1, 7)
	if err := c.SendMessageBatch(pb.MessageBatch{Requests: batch.Requests[:1]}); err != nil || len(ft.sent) != 1 {
		t.Fatalf("after resume: %v, %d delivered", err, len(ft.sent))
	}
}

func TestProxyStallsWhileCut(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					c.Write([]byte(line))
				}
			}()
		}
	}()
	n := NewNetwork(1)
	p, err := n.Proxy(1, 2, echo.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	roundTrip := func(s string) (string, error) {
		c.SetDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := c.Write([]byte(s + "\n")); err != nil {
			return "", err
		}
		return r.ReadString('\n')
	}
	if got, err := roundTrip("one"); err != nil || got != "one\n" {
		t.Fatalf("healthy: %q %v", got, err)
	}
	n.Set(2, 1, Link{Cut: true}) // answers held back
	if _, err := roundTrip("two"); err == nil {
		t.Fatal("answer crossed a cut link")
	}
	n.Heal()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "two\n" {
		t.Fatalf("held-back answer after heal: %q %v", got, err)
	}
	if n.Stalled.Load() == 0 {
		t.Fatal("no stall counted")
	}
	n.ResetProxies(2)
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("connection survived a reset")
	}
}

func TestCutInboundOnTimeoutNow(t *testing.T) {
	n := NewNetwork(1)
	n.AddNode(1, "a:1")
	n.AddNode(2, "b:1")
	ft := &fakeTransport{sent: make(chan pb.MessageBatch, 10)}
	tr := n.Factory(fakeFactory{ft}).Create(config.NodeHostConfig{RaftAddress: "a:1"}, nil, nil)
	c, err := tr.GetConnection(context.Background(), "b:1")
	if err != nil {
		t.Fatal(err)
	}
	n.CutInboundOnTimeoutNow(1, []uint64{1, 2, 3})
	if err := c.SendMessageBatch(pb.MessageBatch{Requests: []pb.Message{{Type: pb.Replicate}}}); err != nil {
		t.Fatal(err)
	}
	if l := n.Link(2, 1); l.Cut {
		t.Fatal("inbound cut before any TimeoutNow")
	}
	if err := c.SendMessageBatch(pb.MessageBatch{Requests: []pb.Message{{Type: pb.Heartbeat}, {Type: pb.TimeoutNow}}}); err != nil {
		t.Fatal(err)
	}
	if len(ft.sent) != 2 {
		t.Fatalf("%d batches delivered, want 2 (the TimeoutNow leaves: only inbound links are cut)", len(ft.sent))
	}
	for _, from := range []uint64{2, 3} {
		if !n.Link(from, 1).Cut {
			t.Errorf("link %d → 1 not cut after node 1's TimeoutNow", from)
		}
	}
	if n.Link(1, 2).Cut || n.Link(1, 1).Cut {
		t.Error("an outbound or self link was cut")
	}
	n.Heal()
	n.CutInboundOnTimeoutNow(1, []uint64{2})
	n.Heal()
	if err := c.SendMessageBatch(pb.MessageBatch{Requests: []pb.Message{{Type: pb.TimeoutNow}}}); err != nil {
		t.Fatal(err)
	}
	if n.Link(2, 1).Cut {
		t.Error("Heal did not disarm the cut")
	}
}
