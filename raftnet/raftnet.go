// Package raftnet is kahuna's Raft transport for dragonboat: TCP (mutual
// TLS when the NodeHostConfig asks for it) with one write per message batch
// and buffered reads.
//
// dragonboat's own TCP transport writes each batch with three write calls
// (magic number, header, body) and reads it back with three, setting a
// deadline around each; on loopback every write also runs the receiver's
// TCP stack, so in a 3-process cluster it was a quarter of each member's
// CPU. Here a connection opens with a preface naming its kind, and each
// batch or snapshot chunk is one frame: length, CRC-32C, body.
//
// The preface also states the sender's Raft timing (tick and election
// ticks), which the leader lease rests on, and the acknowledgement the
// receiver's: a member refuses a connection from or to a member of
// another timing (timing.go).
package raftnet

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// Name is the transport's name as dragonboat reports it.
const Name = "kahuna-raftnet"

const (
	// maxFrame bounds one frame's body: dragonboat's largest message batch
	// (64 MB) plus room for its framing.
	maxFrame = 64<<20 + 1<<20
	// frameHeader is the body's length and its CRC-32C, big-endian.
	frameHeader = 8
	// readBuffer is the receiver's buffer: many small batches a read.
	readBuffer = 64 << 10

	dialTimeout      = 5 * time.Second
	handshakeTimeout = 10 * time.Second
	// writeTimeout bounds a small frame's write, so a peer that stopped
	// reading fails the connection (dragonboat then redials).
	writeTimeout = 10 * time.Second
	// closeAckTimeout bounds the wait for a snapshot receiver's
	// acknowledgement of the end of the stream.
	closeAckTimeout = 10 * time.Second
	keepAlive       = 10 * time.Second
)

// The preface is 4 magic bytes (the last one the version), a kind and a
// hello (timing.go); the receiver answers with prefaceAck or
// prefaceRefused, then its own hello. Version 1, which kahuna spoke
// before timings were checked, has no hellos: its preface is acknowledged
// with the one byte. The receiver answers a snapshot connection's
// end-of-stream frame (length 0) with one byte too.
var (
	magic   = [4]byte{'K', 'R', 'N', 2}
	magicV1 = [4]byte{'K', 'R', 'N', 1}
)

const (
	kindMessages   byte = 'm'
	kindChunks     byte = 's'
	prefaceAck     byte = 'a'
	prefaceRefused byte = 'r'
	closeAck       byte = 'k'
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errPreface is a connection that did not open as a member's would (a TLS
// handshake that failed included).
var errPreface = errors.New("bad preface")

// Factory creates the transport (config.TransportFactory).
type Factory struct {
	// Logger receives connection failures; nil: slog.Default().
	Logger *slog.Logger
	// Listener, if set, is the transport's listener, already bound at the
	// NodeHostConfig's listen address: Start serves on it instead of
	// binding that address, so whoever chose the address had no window in
	// which another process could take it. The transport's Close closes it
	// (started or not). A Factory with a Listener creates one transport.
	Listener net.Listener
	// Timing is this member's Raft timing, stated in every handshake; a
	// peer of another timing is refused. The zero Timing checks nothing
	// (tests of the transport alone).
	Timing Timing
	// OnTiming, if set, is told the outcome of every handshake in which
	// the peer stated its timing (unless Timing is zero): the peer's Raft
	// address (dialled, or as it states it), its timing, and whether the
	// connection was refused for it, by either end. It must not block.
	OnTiming func(peer string, t Timing, refused bool)
	// UnsafeAnyTiming accepts peers of any timing: only for the negative
	// controls of the tests.
	UnsafeAnyTiming bool
}

var _ config.TransportFactory = Factory{}

// Create implements config.TransportFactory.
func (f Factory) Create(nhc config.NodeHostConfig, onMessages raftio.MessageHandler, onChunk raftio.ChunkHandler) raftio.ITransport {
	log := f.Logger
	if log == nil {
		log = slog.Default()
	}
	return &transport{
		nhc:        nhc,
		onMessages: onMessages,
		onChunk:    onChunk,
		log:        log.With("component", "raftnet"),
		conns:      map[net.Conn]struct{}{},
		lis:        f.Listener,
		hello:      hello{Timing: f.Timing, Addr: nhc.RaftAddress},
		onTiming:   f.OnTiming,
		anyTiming:  f.UnsafeAnyTiming,
		warned:     map[string]time.Time{},
	}
}

// Validate implements config.TransportFactory: a Raft address is host:port.
func (Factory) Validate(addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	return err == nil && host != "" && port != ""
}

type transport struct {
	nhc        config.NodeHostConfig
	onMessages raftio.MessageHandler
	onChunk    raftio.ChunkHandler
	log        *slog.Logger

	hello     hello // what this member states in its handshakes
	onTiming  func(peer string, t Timing, refused bool)
	anyTiming bool

	mu     sync.Mutex
	lis    net.Listener          // Factory.Listener until Start
	conns  map[net.Conn]struct{} // accepted, closed by Close
	closed bool
	warned map[string]time.Time // when a peer was last warned about (warnPeer)
	wg     sync.WaitGroup
}

var _ raftio.ITransport = (*transport)(nil)

func (t *transport) Name() string { return Name }

// Start listens on the NodeHostConfig's listen address, or serves on
// Factory.Listener.
func (t *transport) Start() error {
	tlsConfig, err := t.nhc.GetServerTLSConfig()
	if err != nil {
		return fmt.Errorf("raftnet: server TLS: %w", err)
	}
	t.mu.Lock()
	lis := t.lis
	t.mu.Unlock()
	if lis == nil {
		if lis, err = net.Listen("tcp", t.nhc.GetListenAddress()); err != nil {
			return fmt.Errorf("raftnet: %w", err)
		}
	}
	if tlsConfig != nil {
		lis = tls.NewListener(lis, tlsConfig)
	}
	t.mu.Lock()
	t.lis = lis
	t.mu.Unlock()
	t.wg.Add(1)
	go t.accept(lis)
	return nil
}

// Close stops listening and closes every accepted connection; it returns
// once their handlers have returned.
func (t *transport) Close() error {
	t.mu.Lock()
	t.closed = true
	if t.lis != nil {
		t.lis.Close()
	}
	for c := range t.conns {
		c.Close()
	}
	t.mu.Unlock()
	t.wg.Wait()
	return nil
}

func (t *transport) accept(lis net.Listener) {
	defer t.wg.Done()
	var backoff time.Duration
	for {
		conn, err := lis.Accept()
		if err != nil {
			t.mu.Lock()
			closed := t.closed
			t.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors, say: keep the listener and try
			// again, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			t.log.Warn("accepting a Raft connection failed; retrying", "err", err, "retry_in", backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			conn.Close()
			return
		}
		t.conns[conn] = struct{}{}
		t.wg.Add(1)
		t.mu.Unlock()
		go func() {
			defer t.wg.Done()
			switch err := t.serve(conn); {
			case err == nil, errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed), errors.Is(err, ErrTimingMismatch):
				// A timing mismatch was logged where it was found.
			case errors.Is(err, errPreface):
				// Not a member, or one with a certificate this cluster's CA
				// did not sign: the operator wants to hear of it.
				t.log.Warn("Raft connection refused", "remote", conn.RemoteAddr().String(), "err", err)
			default:
				t.log.Debug("Raft connection ended", "remote", conn.RemoteAddr().String(), "err", err)
			}
			conn.Close()
			t.mu.Lock()
			delete(t.conns, conn)
			t.mu.Unlock()
		}()
	}
}

// serve reads one connection's frames until it ends: kahuna's framing
// after its preface, or dragonboat's from a member on an older kahuna.
func (t *transport) serve(conn net.Conn) error {
	if err := conn.SetReadDeadline(time.Now().Add(handshakeTimeout)); err != nil {
		return err
	}
	r := bufio.NewReaderSize(conn, readBuffer)
	var preface [len(magic) + 1]byte
	if _, err := io.ReadFull(r, preface[:2]); err != nil {
		if errors.Is(err, io.EOF) {
			return err // connected and left (a probe)
		}
		return fmt.Errorf("%w: %w", errPreface, err)
	}
	// Raft traffic has no idle bound of its own: heartbeats keep a live
	// link busy, and TCP keep-alives find a dead one.
	if [2]byte(preface[:2]) == legacyMagic {
		if err := conn.SetReadDeadline(time.Time{}); err != nil {
			return err
		}
		t.warnUnchecked(conn.RemoteAddr().String(), "it connected in dragonboat's framing (an older kahuna)")
		return t.serveLegacy(conn, r, t.nhc.MutualTLS)
	}
	if _, err := io.ReadFull(r, preface[2:]); err != nil {
		return fmt.Errorf("%w: %w", errPreface, err)
	}
	version := [4]byte(preface[:4])
	if version != magic && version != magicV1 {
		return fmt.Errorf("%w: it opens with %q, not a Raft transport's preface", errPreface, preface[:4])
	}
	kind := preface[4]
	if kind != kindMessages && kind != kindChunks {
		return fmt.Errorf("%w: unknown connection kind %q", errPreface, kind)
	}
	if version == magicV1 {
		t.warnUnchecked(conn.RemoteAddr().String(), "it connected in the framing of an older kahuna")
		if err := writeAll(conn, []byte{prefaceAck}); err != nil {
			return err
		}
	} else if err := t.answerHello(conn, r); err != nil {
		return err
	}
	if err := conn.SetReadDeadline(time.Time{}); err != nil {
		return err
	}
	var buf []byte
	for {
		body, err := readFrame(r, &buf)
		if err != nil {
			return err
		}
		switch {
		case kind == kindMessages && body == nil:
			return errors.New("empty frame on a message connection")
		case kind == kindMessages:
			var b pb.MessageBatch
			if err := b.Unmarshal(body); err != nil {
				return fmt.Errorf("message batch: %w", err)
			}
			t.onMessages(b)
		case body == nil: // end of a snapshot stream
			return writeAll(conn, []byte{closeAck})
		default:
			var c pb.Chunk
			if err := c.Unmarshal(body); err != nil {
				return fmt.Errorf("snapshot chunk: %w", err)
			}
			if !t.onChunk(c) {
				return fmt.Errorf("snapshot chunk %d of shard %d refused", c.ChunkId, c.ShardID)
			}
		}
		if cap(buf) > 4<<20 {
			buf = nil // one huge message need not pin its buffer
		}
	}
}

// readFrame returns the next frame's body (nil for an empty frame), in
// *buf, which it grows as needed.
func readFrame(r *bufio.Reader, buf *[]byte) ([]byte, error) {
	var h [frameHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(h[:4])
	if n == 0 {
		return nil, nil
	}
	if n > maxFrame {
		return nil, fmt.Errorf("frame of %d bytes is over the %d limit", n, maxFrame)
	}
	if cap(*buf) < int(n) {
		*buf = make([]byte, n)
	}
	body := (*buf)[:n]
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(h[4:]) {
		return nil, errors.New("frame checksum mismatch")
	}
	return body, nil
}

// GetConnection dials target for message batches.
func (t *transport) GetConnection(ctx context.Context, target string) (raftio.IConnection, error) {
	conn, legacy, err := t.dial(ctx, target, kindMessages)
	if err != nil {
		return nil, err
	}
	return &messageConn{sender{conn: conn, legacy: legacy, encrypted: t.nhc.MutualTLS}}, nil
}

// GetSnapshotConnection dials target for one snapshot's chunks.
func (t *transport) GetSnapshotConnection(ctx context.Context, target string) (raftio.ISnapshotConnection, error) {
	conn, legacy, err := t.dial(ctx, target, kindChunks)
	if err != nil {
		return nil, err
	}
	return &chunkConn{sender{conn: conn, legacy: legacy, encrypted: t.nhc.MutualTLS}}, nil
}

// dial connects to target and offers kahuna's framing; a member that
// closes the connection instead of answering the preface runs an older
// kahuna, and gets a new connection in dragonboat's framing (legacy true),
// which every kahuna reads. A member that refuses this one's timing
// answers so: that is an error, never a reason to fall back.
func (t *transport) dial(ctx context.Context, target string, kind byte) (conn net.Conn, legacy bool, err error) {
	conn, err = t.connect(ctx, target)
	if err != nil {
		return nil, false, err
	}
	err = t.offer(conn, target, kind)
	if err == nil {
		return conn, false, nil
	}
	conn.Close()
	if errors.Is(err, ErrTimingMismatch) {
		return nil, false, fmt.Errorf("raftnet: %w", err)
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, syscall.ECONNRESET) {
		return nil, false, fmt.Errorf("raftnet: preface to %s: %w", target, err)
	}
	conn, err = t.connect(ctx, target)
	if err != nil {
		return nil, false, err
	}
	t.warnUnchecked(target, "it closed the connection at this version's preface (an older kahuna)")
	return conn, true, nil
}

// offer sends the preface and reads the answer: the peer's hello, which
// this member checks too (a refusal either way fails the connection).
func (t *transport) offer(conn net.Conn, target string, kind byte) error {
	b := append(magic[:len(magic):len(magic)], kind)
	if err := writeAll(conn, t.hello.append(b)); err != nil {
		return err
	}
	if err := conn.SetReadDeadline(time.Now().Add(handshakeTimeout)); err != nil {
		return err
	}
	var answer [1]byte
	if _, err := io.ReadFull(conn, answer[:]); err != nil {
		return err
	}
	if answer[0] != prefaceAck && answer[0] != prefaceRefused {
		return fmt.Errorf("preface answered %q", answer[0])
	}
	peer, err := readHello(conn)
	if err != nil {
		return fmt.Errorf("the answer to the preface: %w", err)
	}
	peer.Addr = target // as dragonboat names the peer
	if err := t.check(peer, answer[0] == prefaceRefused); err != nil {
		return err
	}
	return conn.SetReadDeadline(time.Time{})
}

func (t *transport) connect(ctx context.Context, target string) (net.Conn, error) {
	d := net.Dialer{Timeout: dialTimeout, KeepAlive: keepAlive}
	conn, err := d.DialContext(ctx, "tcp", target)
	if err != nil {
		return nil, fmt.Errorf("raftnet: dial %s: %w", target, err)
	}
	tlsConfig, err := t.nhc.GetClientTLSConfig(target)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("raftnet: client TLS for %s: %w", target, err)
	}
	if tlsConfig == nil {
		return conn, nil
	}
	tc := tls.Client(conn, tlsConfig)
	hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("raftnet: TLS handshake with %s: %w", target, err)
	}
	return tc, nil
}

// writeAll writes b in one call, within writeTimeout plus a second per MB
// (dragonboat's transport allows 5 s per 2 MB piece).
func writeAll(conn net.Conn, b []byte) error {
	timeout := writeTimeout + time.Duration(len(b)>>20)*time.Second
	if err := conn.SetWriteDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	_, err := conn.Write(b)
	return err
}

// frame marshals a message behind a frame header into *buf.
func frame(buf *[]byte, size int, marshal func([]byte) (int, error)) ([]byte, error) {
	b, err := marshalBehind(buf, frameHeader, size, marshal)
	if err != nil {
		return nil, err
	}
	n := len(b) - frameHeader
	binary.BigEndian.PutUint32(b[:4], uint32(n))
	binary.BigEndian.PutUint32(b[4:8], crc32.Checksum(b[frameHeader:], castagnoli))
	return b, nil
}

// marshalBehind marshals a message of at most size bytes after pre bytes
// of room for its header, into *buf (grown as needed).
func marshalBehind(buf *[]byte, pre, size int, marshal func([]byte) (int, error)) ([]byte, error) {
	if size > maxFrame {
		return nil, fmt.Errorf("raftnet: message of %d bytes is over the %d limit", size, maxFrame)
	}
	if cap(*buf) < pre+size {
		*buf = make([]byte, pre+size)
	}
	b := (*buf)[:pre+size]
	n, err := marshal(b[pre:])
	if err != nil {
		return nil, fmt.Errorf("raftnet: marshal: %w", err)
	}
	return b[:pre+n], nil
}

// sender writes messages on one connection, each in one write, in the
// framing agreed when it was dialled.
type sender struct {
	conn      net.Conn
	legacy    bool // dragonboat's framing (legacy.go)
	encrypted bool
	buf       []byte
}

func (s *sender) send(legacyMethod uint16, size int, marshal func([]byte) (int, error)) error {
	var b []byte
	var err error
	if s.legacy {
		b, err = legacyFrame(&s.buf, legacyMethod, size, s.encrypted, marshal)
	} else {
		b, err = frame(&s.buf, size, marshal)
	}
	if err != nil {
		return err
	}
	err = writeAll(s.conn, b)
	if cap(s.buf) > 4<<20 {
		s.buf = nil // one huge message need not pin its buffer
	}
	return err
}

// messageConn sends message batches; dragonboat calls it from one
// goroutine per target.
type messageConn struct{ sender }

func (c *messageConn) SendMessageBatch(batch pb.MessageBatch) error {
	return c.send(legacyMessages, batch.SizeUpperLimit(), batch.MarshalTo)
}

func (c *messageConn) Close() { c.conn.Close() }

// chunkConn sends one snapshot's chunks.
type chunkConn struct{ sender }

func (c *chunkConn) SendChunk(chunk pb.Chunk) error {
	return c.send(legacyChunks, chunk.Size(), chunk.MarshalTo)
}

// Close ends the stream and waits for the receiver to have handled every
// chunk before closing.
func (c *chunkConn) Close() {
	defer c.conn.Close()
	if c.legacy {
		legacyEnd(c.conn)
		return
	}
	if err := writeAll(c.conn, make([]byte, frameHeader)); err != nil {
		return
	}
	if err := c.conn.SetReadDeadline(time.Now().Add(closeAckTimeout)); err != nil {
		return
	}
	var ack [1]byte
	io.ReadFull(c.conn, ack[:])
}
