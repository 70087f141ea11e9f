package raftnet

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kahunago/kahuna/internal/testport"
	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

const wait = 10 * time.Second

// receiver is a started transport that records what it is handed.
type receiver struct {
	*transport
	batches chan pb.MessageBatch
	mu      sync.Mutex
	chunks  []pb.Chunk
	refuse  bool // the chunk handler refuses
	logs    logLines
}

// logLines is a log destination that hands on each line.
type logLines chan string

func (l logLines) Write(p []byte) (int, error) {
	select {
	case l <- string(p):
	default:
	}
	return len(p), nil
}

// awaitLog waits for a logged line containing want.
func (r *receiver) awaitLog(t *testing.T, want string) {
	t.Helper()
	timeout := time.After(wait)
	for {
		select {
		case line := <-r.logs:
			if strings.Contains(line, want) {
				return
			}
		case <-timeout:
			t.Fatalf("no log line with %q", want)
		}
	}
}

func startReceiver(t *testing.T) *receiver {
	t.Helper()
	return startReceiverWith(t, Factory{})
}

// startReceiverWith is startReceiver with f's timing settings.
func startReceiverWith(t *testing.T, f Factory) *receiver {
	t.Helper()
	r := &receiver{batches: make(chan pb.MessageBatch, 64), logs: make(logLines, 64)}
	f.Logger = slog.New(slog.NewTextHandler(r.logs, nil))
	tr := f.Create(config.NodeHostConfig{RaftAddress: "127.0.0.1:0"},
		func(b pb.MessageBatch) { r.batches <- b },
		func(c pb.Chunk) bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.chunks = append(r.chunks, c)
			return !r.refuse
		})
	r.transport = tr.(*transport)
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func (r *receiver) addr() string { return r.lis.Addr().String() }

func (r *receiver) chunkCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.chunks)
}

func (r *receiver) next(t *testing.T) pb.MessageBatch {
	t.Helper()
	select {
	case b := <-r.batches:
		return b
	case <-time.After(wait):
		t.Fatal("no message batch arrived")
		return pb.MessageBatch{}
	}
}

func dialer(t *testing.T) raftio.ITransport {
	t.Helper()
	s := Factory{}.Create(config.NodeHostConfig{RaftAddress: "127.0.0.1:0"}, func(pb.MessageBatch) {}, func(pb.Chunk) bool { return true })
	return s
}

func batchOf(n int, payload []byte) pb.MessageBatch {
	b := pb.MessageBatch{SourceAddress: "127.0.0.1:1", BinVer: 210}
	for i := 0; i < n; i++ {
		b.Requests = append(b.Requests, pb.Message{
			Type: pb.Replicate, To: 2, From: 1, ShardID: 7, Term: 3, LogIndex: uint64(i),
			Entries: []pb.Entry{{Index: uint64(i + 1), Term: 3, Cmd: payload}},
		})
	}
	return b
}

func sameBatch(t *testing.T, got, want pb.MessageBatch) {
	t.Helper()
	g, _ := got.Marshal()
	w, _ := want.Marshal()
	if !bytes.Equal(g, w) {
		t.Fatalf("batch changed on the way: %d requests, want %d", len(got.Requests), len(want.Requests))
	}
}

// Batches arrive whole and in order, small and large (a frame over the
// receiver's read buffer, and one over the sender's kept buffer).
func TestMessageBatches(t *testing.T) {
	r := startReceiver(t)
	conn, err := dialer(t).GetConnection(context.Background(), r.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	want := []pb.MessageBatch{
		batchOf(1, []byte("a")),
		batchOf(50, bytes.Repeat([]byte("b"), 300)),
		batchOf(2, bytes.Repeat([]byte("c"), 5<<20)),
		batchOf(3, []byte("d")),
	}
	for _, b := range want {
		if err := conn.SendMessageBatch(b); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range want {
		sameBatch(t, r.next(t), b)
	}
}

// A transport given a bound listener serves on it, not at the address
// its NodeHostConfig names (in use here, so binding it would fail), and
// its Close closes the listener, whether it started or not.
func TestGivenListener(t *testing.T) {
	busy, lis, unstarted := loopback(t), loopback(t), loopback(t)
	nhc := config.NodeHostConfig{RaftAddress: busy.Addr().String()}
	batches := make(chan pb.MessageBatch, 1)
	tr := Factory{Listener: lis}.Create(nhc, func(b pb.MessageBatch) { batches <- b }, func(pb.Chunk) bool { return true })
	if err := tr.Start(); err != nil {
		t.Fatalf("Start with a listener: %v", err)
	}
	conn, err := dialer(t).GetConnection(context.Background(), lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	want := batchOf(2, []byte("given"))
	if err := conn.SendMessageBatch(want); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-batches:
		sameBatch(t, b, want)
	case <-time.After(wait):
		t.Fatal("no batch arrived on the given listener")
	}
	tr.Close()
	if !testport.Closed(lis) {
		t.Fatal("listener left open by Close")
	}
	Factory{Listener: unstarted}.Create(nhc, func(pb.MessageBatch) {}, func(pb.Chunk) bool { return true }).Close()
	if !testport.Closed(unstarted) {
		t.Fatal("listener left open by Close of a transport never started")
	}
}

// loopback is a listener on a port of the kernel's choosing, closed when
// the test ends.
func loopback(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// Close of a snapshot connection returns once every chunk is handled.
func TestSnapshotChunks(t *testing.T) {
	r := startReceiver(t)
	conn, err := dialer(t).GetSnapshotConnection(context.Background(), r.addr())
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(0); i < 5; i++ {
		c := pb.Chunk{ShardID: 7, ReplicaID: 2, From: 1, ChunkId: i, ChunkCount: 5, Data: bytes.Repeat([]byte{byte(i)}, 100<<10)}
		if err := conn.SendChunk(c); err != nil {
			t.Fatal(err)
		}
	}
	conn.Close()
	if n := r.chunkCount(); n != 5 {
		t.Fatalf("%d chunks handled when Close returned, want 5", n)
	}
	for i, c := range r.chunks {
		if c.ChunkId != uint64(i) || len(c.Data) != 100<<10 || c.Data[0] != byte(i) {
			t.Fatalf("chunk %d: id %d, %d bytes", i, c.ChunkId, len(c.Data))
		}
	}
}

// A refused chunk ends the stream: the sender's next writes fail.
func TestRefusedChunkEndsStream(t *testing.T) {
	r := startReceiver(t)
	r.refuse = true
	conn, err := dialer(t).GetSnapshotConnection(context.Background(), r.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.Chunk{ShardID: 7, ChunkId: 0, ChunkCount: 2, Data: make([]byte, 1000)}
	deadline := time.Now().Add(wait)
	for conn.SendChunk(c) == nil {
		if time.Now().After(deadline) {
			t.Fatal("sends kept succeeding after the chunk was refused")
		}
		time.Sleep(time.Millisecond) // until the reset reaches the sender
	}
}

// Bad input from the network ends that connection and nothing else: the
// handlers see nothing of it, and a good connection is served after.
func TestBadInputEndsConnection(t *testing.T) {
	r := startReceiver(t)
	good := batchOf(1, []byte("ok"))
	body, _ := good.Marshal()
	header := func(n int, crc uint32) []byte {
		h := make([]byte, frameHeader)
		binary.BigEndian.PutUint32(h, uint32(n))
		binary.BigEndian.PutUint32(h[4:], crc)
		return h
	}
	preface := hello{}.append(append(magic[:len(magic):len(magic)], kindMessages))
	cases := map[string][]byte{
		"garbage":           []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		"unknown kind":      append(magic[:len(magic):len(magic)], 'x'),
		"oversized frame":   append(preface, header(maxFrame+1, 0)...),
		"checksum mismatch": append(append(preface, header(len(body), 1)...), body...),
		"not a batch":       append(append(preface, header(3, crcOf([]byte{0xff, 0xff, 0xff}))...), 0xff, 0xff, 0xff),
		"empty frame":       append(preface, header(0, 0)...),
		"bad legacy header": append(legacyMagic[:], make([]byte, legacyHeader)...),
		"oversized hello":   append(append(magic[:len(magic):len(magic)], kindMessages), 0xff, 0xff),
		"short hello":       append(append(magic[:len(magic):len(magic)], kindMessages), 0, 1, 0),
	}
	for name, input := range cases {
		t.Run(name, func(t *testing.T) {
			for len(r.logs) > 0 {
				<-r.logs
			}
			c, err := net.Dial("tcp", r.addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.Write(input)
			c.SetReadDeadline(time.Now().Add(wait))
			// The server closes the connection: reads end (after the
			// preface's acknowledgement, if it was one).
			if _, err := io.Copy(io.Discard, c); err != nil && !isReset(err) {
				t.Fatalf("connection not closed: %v", err)
			}
			if name == "garbage" || name == "unknown kind" || name == "oversized hello" {
				r.awaitLog(t, "Raft connection refused") // at Warn: an operator should hear of it
			}
		})
	}
	select {
	case b := <-r.batches:
		t.Fatalf("bad input delivered a batch: %+v", b)
	default:
	}
	conn, err := dialer(t).GetConnection(context.Background(), r.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SendMessageBatch(good); err != nil {
		t.Fatal(err)
	}
	sameBatch(t, r.next(t), good)
}

func crcOf(b []byte) uint32 {
	h := make([]byte, frameHeader)
	f, _ := frame(&h, len(b), func(d []byte) (int, error) { return copy(d, b), nil })
	return binary.BigEndian.Uint32(f[4:8])
}

func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

// A sender falls back to dragonboat's framing for a member that closes a
// connection opened with the preface (an older kahuna), and that member
// reads it: oldMember below is dragonboat v4's receive loop as its tcp.go
// has it (magic, header with checksums, payload, poison).
func TestFallbackToDragonboatFraming(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	got := make(chan []byte, 16)
	go oldMember(lis, got)
	s := dialer(t)
	conn, err := s.GetConnection(context.Background(), lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	want := batchOf(4, []byte("legacy"))
	if err := conn.SendMessageBatch(want); err != nil {
		t.Fatal(err)
	}
	select {
	case body := <-got:
		var b pb.MessageBatch
		if err := b.Unmarshal(body); err != nil {
			t.Fatal(err)
		}
		sameBatch(t, b, want)
	case <-time.After(wait):
		t.Fatal("the old member got nothing")
	}
	snap, err := s.GetSnapshotConnection(context.Background(), lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if err := snap.SendChunk(pb.Chunk{ShardID: 7, ChunkId: 0, ChunkCount: 1, Data: []byte("snap")}); err != nil {
		t.Fatal(err)
	}
	snap.Close() // returns after the poison's acknowledgement
	select {
	case body := <-got:
		var c pb.Chunk
		if err := c.Unmarshal(body); err != nil || string(c.Data) != "snap" {
			t.Fatalf("chunk %+v, %v", c, err)
		}
	case <-time.After(wait):
		t.Fatal("the old member got no chunk")
	}
}

// oldMember serves each connection as dragonboat v4's TCP transport does,
// written from its wire format independently of legacy.go: a connection
// whose first two bytes are not the magic is closed.
func oldMember(lis net.Listener, got chan<- []byte) {
	for {
		c, err := lis.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			for {
				m := make([]byte, 2)
				if _, err := io.ReadFull(c, m); err != nil {
					return
				}
				if m[0] == 0 && m[1] == 0 {
					c.Write([]byte{0, 0})
					return
				}
				if m[0] != 0xAE || m[1] != 0x7D {
					return
				}
				h := make([]byte, 18)
				if _, err := io.ReadFull(c, h); err != nil {
					return
				}
				size := binary.BigEndian.Uint64(h[2:])
				payloadCRC := binary.BigEndian.Uint32(h[14:])
				headerCRC := binary.BigEndian.Uint32(h[10:])
				binary.BigEndian.PutUint32(h[10:], 0)
				if crc32.ChecksumIEEE(h) != headerCRC {
					return
				}
				body := make([]byte, size)
				if _, err := io.ReadFull(c, body); err != nil || crc32.ChecksumIEEE(body) != payloadCRC {
					return
				}
				got <- body
			}
		}()
	}
}
