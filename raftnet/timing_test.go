package raftnet

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lni/dragonboat/v4/config"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

var (
	fast = Timing{RTT: 10 * time.Millisecond, ElectionTicks: 10}
	slow = Timing{RTT: 100 * time.Millisecond, ElectionTicks: 10}
)

// timings records what OnTiming is told.
type timings struct {
	mu  sync.Mutex
	got []string
}

func (o *timings) observe(peer string, t Timing, refused bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	verdict := "accepted"
	if refused {
		verdict = "refused"
	}
	o.got = append(o.got, peer+" "+t.RTT.String()+" "+verdict)
}

func (o *timings) all() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.got...)
}

// timedDialer is a transport at timing tm whose handshakes are told to o
// and whose log goes to logs; it claims the Raft address addr.
func timedDialer(f Factory, addr string, logs logLines) *transport {
	f.Logger = slog.New(slog.NewTextHandler(logs, nil))
	return f.Create(config.NodeHostConfig{RaftAddress: addr}, func(pb.MessageBatch) {}, func(pb.Chunk) bool { return true }).(*transport)
}

// A connection between members of different ticks is refused by the
// receiver, which says so to the dialer: the dialer gets an error naming
// both ticks, does not fall back to the older framing, and both log the
// refusal with the peer's Raft address and both values.
func TestTimingMismatchRefused(t *testing.T) {
	var rt, dt timings
	r := startReceiverWith(t, Factory{Timing: fast, OnTiming: rt.observe})
	dlogs := make(logLines, 64)
	d := timedDialer(Factory{Timing: slow, OnTiming: dt.observe}, "10.0.0.7:2073", dlogs)
	for _, kind := range []string{"messages", "snapshot"} {
		var err error
		if kind == "messages" {
			_, err = d.GetConnection(context.Background(), r.addr())
		} else {
			_, err = d.GetSnapshotConnection(context.Background(), r.addr())
		}
		var te *TimingError
		if !errors.Is(err, ErrTimingMismatch) || !errors.As(err, &te) {
			t.Fatalf("%s connection at another tick: %v, want a *TimingError", kind, err)
		}
		if want := "peer " + r.addr() + " runs --raft-rtt 10ms, this member 100ms"; !strings.Contains(err.Error(), want) {
			t.Errorf("dialer's error %q does not say %q", err, want)
		}
	}
	r.awaitLog(t, "Raft connection refused: peer 10.0.0.7:2073 runs --raft-rtt 100ms, this member 10ms; every member must use the same value")
	(&receiver{logs: dlogs}).awaitLog(t, "Raft connection refused: peer "+r.addr()+" runs --raft-rtt 10ms, this member 100ms")
	select {
	case b := <-r.batches:
		t.Fatalf("a refused connection delivered %+v", b)
	default:
	}
	if got := rt.all(); len(got) != 2 || got[0] != "10.0.0.7:2073 100ms refused" {
		t.Errorf("receiver's OnTiming: %q", got)
	}
	if got := dt.all(); len(got) != 2 || got[0] != r.addr()+" 10ms refused" {
		t.Errorf("dialer's OnTiming: %q", got)
	}
}

// Each end checks the other: a receiver that lets any timing in (the
// negative control) still meets a dialer that refuses its answer.
func TestTimingMismatchRefusedByDialer(t *testing.T) {
	r := startReceiverWith(t, Factory{Timing: fast, UnsafeAnyTiming: true})
	var dt timings
	d := timedDialer(Factory{Timing: slow, OnTiming: dt.observe}, "10.0.0.7:2073", make(logLines, 64))
	if _, err := d.GetConnection(context.Background(), r.addr()); !errors.Is(err, ErrTimingMismatch) {
		t.Fatalf("dialer took a receiver at another tick: %v", err)
	}
	if got := dt.all(); len(got) != 1 || got[0] != r.addr()+" 10ms refused" {
		t.Errorf("dialer's OnTiming: %q", got)
	}
}

// Members of one timing connect, and a negative control on both ends
// connects whatever the timings.
func TestTimingMatchConnects(t *testing.T) {
	for name, f := range map[string][2]Factory{
		"same timing":           {{Timing: fast}, {Timing: fast}},
		"checks off both sides": {{Timing: fast, UnsafeAnyTiming: true}, {Timing: slow, UnsafeAnyTiming: true}},
	} {
		t.Run(name, func(t *testing.T) {
			var rt timings
			recv := f[0]
			recv.OnTiming = rt.observe
			r := startReceiverWith(t, recv)
			d := timedDialer(f[1], "10.0.0.7:2073", make(logLines, 64))
			conn, err := d.GetConnection(context.Background(), r.addr())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			want := batchOf(2, []byte("timed"))
			if err := conn.SendMessageBatch(want); err != nil {
				t.Fatal(err)
			}
			sameBatch(t, r.next(t), want)
			if got := rt.all(); len(got) != 1 || !strings.HasSuffix(got[0], " accepted") {
				t.Errorf("receiver's OnTiming: %q", got)
			}
		})
	}
}

// A member on the previous version of the preface (no timing) is served,
// with a warning that its timing cannot be checked.
func TestTimingUncheckedForOlderPreface(t *testing.T) {
	r := startReceiverWith(t, Factory{Timing: fast})
	c, err := net.Dial("tcp", r.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(append(magicV1[:len(magicV1):len(magicV1)], kindMessages)); err != nil {
		t.Fatal(err)
	}
	var ack [1]byte
	c.SetReadDeadline(time.Now().Add(wait))
	if _, err := c.Read(ack[:]); err != nil || ack[0] != prefaceAck {
		t.Fatalf("version 1 preface answered %q, %v", ack[0], err)
	}
	want := batchOf(1, []byte("v1"))
	var buf []byte
	b, err := frame(&buf, want.SizeUpperLimit(), want.MarshalTo)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	sameBatch(t, r.next(t), want)
	r.awaitLog(t, "cannot check a peer's --raft-rtt")
}

// The hello survives its wire form, and a malformed one is an error.
func TestHelloWire(t *testing.T) {
	h := hello{Timing: slow, Addr: "node-3.example:2073"}
	got, err := readHello(strings.NewReader(string(h.append(nil))))
	if err != nil || got != h {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	bad := h.append(nil)
	bad[len(bad)-len(h.Addr)-1] = 0xff // address longer than the hello
	if _, err := readHello(strings.NewReader(string(bad))); err == nil {
		t.Fatal("malformed hello read")
	}
}
