package transport

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/kahunago/kahuna/lease"
	v1 "github.com/kahunago/kahuna/transport/kahunav1pb"
)

// Kahuna's own framing, spoken on the gRPC ports beside HTTP/2: one batch
// stream (Batch, ForwardBatch) or one LockStream on a TCP connection of its
// own, its messages the same bytes gRPC would carry, each behind a 4-byte
// length. A message is written by the goroutine that sends it and read by
// the one that receives it. Under gRPC each crosses two more goroutines
// (grpc's connection reader and its writer, which yields once before a
// small write) and HTTP/2's flow control: on one hot lock, framed
// hand-offs came about a fifth faster (docs/benchmarks-log.md).
//
// A connection opens with a hello: a header of helloHeader bytes
// (framesMagic, the stream's kind, the bearer token's 2-byte length,
// "\r\n\r\n", zeros), then the token. The header is as long as an HTTP/2
// preface and ends a line early, so a server that does not speak the
// framing refuses it at once: an HTTP/2 one reads a whole preface before it
// closes a connection that does not open with one, and an HTTP/1.x one
// answers the unparsable request line with 400. The server answers
// frameAccepted, or frameRefused and a status (a code byte, a 2-byte
// length, the message), then closes. Either side ends its half with a
// frame of length frameEnd followed by a status, code 0 for a clean end: a
// server that ends cleanly has answered every message it processed, as
// with gRPC. A peer that does not speak the framing (an older kahuna, or
// Kahuna) closes the connection or answers something else; the client
// then uses gRPC with it.
const (
	// framesMagic starts no HTTP/2 preface, HTTP/1.x request or TLS
	// record, so a sniffing listener tells it from those by its first byte.
	framesMagic = "\x00KF1"

	// helloHeader is the hello before the token (see above).
	helloHeader = len(http2Preface)

	frameKindBatch   byte = 'b' // kahuna.v1 Batch
	frameKindForward byte = 'f' // kahuna.v1 ForwardBatch, between members
	frameKindLocks   byte = 'l' // kahuna.v1 LockStream

	frameAccepted byte = 'a'
	frameRefused  byte = 'r'

	frameEnd = 0xFFFFFFFF

	// frameWriteTimeout bounds one frame's write, so a peer that stopped
	// reading breaks the stream instead of holding its writer.
	frameWriteTimeout = 10 * time.Second
	frameReadBuffer   = 32 << 10
	// maxShort bounds what goes behind a 2-byte length: a token, a
	// status's message.
	maxShort = 1<<16 - 1
)

// framesMethod is the gRPC method a kind stands for: its authorisation and
// its Locker are that method's.
func framesMethod(kind byte) (string, bool) {
	switch kind {
	case frameKindBatch:
		return v1.Kahuna_Batch_FullMethodName, true
	case frameKindForward:
		return v1.Kahuna_ForwardBatch_FullMethodName, true
	case frameKindLocks:
		return v1.Kahuna_LockStream_FullMethodName, true
	}
	return "", false
}

// frameConn is one end of a framed stream: frames written whole, under a
// lock, each in one write; frames read from a buffered reader by one
// goroutine at a time.
type frameConn struct {
	conn net.Conn
	r    *bufio.Reader
	raw  syscall.RawConn // conn's socket, for writeNowMsg; nil: not a plain socket
	once *oneWrite       // writeNowMsg's system call; guarded by wmu

	wmu       sync.Mutex
	wbuf      []byte
	wdeadline time.Time     // the write deadline set on conn; guarded by wmu
	wtimeout  time.Duration // a frame's write's bound; 0: frameWriteTimeout (tests set less)
	rbuf      []byte
}

// An encoder appends message m's encoding to b. Frames are encoded
// straight into the connection's write buffer (appendFrame): through a
// codec, each message took a buffer of its own and grpc's wrapping of it.
type encoder func(b []byte, m any) ([]byte, error)

// writeMsg sends one frame holding m as enc encodes it. encErr is enc's
// refusal (nothing was written); err the connection's.
func (f *frameConn) writeMsg(m any, enc encoder) (encErr, err error) {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	b, encErr := appendFrame(f.wbuf[:0], m, enc)
	if encErr != nil {
		return encErr, nil
	}
	f.wbuf = b
	if cap(f.wbuf) > 1<<20 {
		f.wbuf = nil // one huge message need not pin its buffer
	}
	return nil, f.send(b)
}

// appendFrame appends to b, empty, the frame of m: its body's length,
// then the body enc appends.
func appendFrame(b []byte, m any, enc encoder) ([]byte, error) {
	b, err := enc(append(b, 0, 0, 0, 0), m)
	if err != nil {
		return nil, err
	}
	n := len(b) - 4
	if uint64(n) >= frameEnd {
		return nil, fmt.Errorf("transport: a message of %d bytes", n)
	}
	binary.BigEndian.PutUint32(b, uint32(n))
	return b, nil
}

// end sends the end of this side's half: err's status, OK when nil.
func (f *frameConn) end(err error) error {
	st := status.Convert(err)
	msg := st.Message()
	if len(msg) > maxShort {
		msg = msg[:maxShort]
	}
	return f.sendRaw(appendStatus(binary.BigEndian.AppendUint32(nil, frameEnd), st.Code(), msg))
}

// sendRaw writes b as it is: the hello's answer, an end.
func (f *frameConn) sendRaw(b []byte) error {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	return f.send(b)
}

// send writes b; the caller holds wmu. The write may wait up to
// frameWriteTimeout, and never less than half of it: the deadline moves
// only when less than half is left, since setting it (a runtime timer's
// reset) took a tenth of a small frame's write.
func (f *frameConn) send(b []byte) error {
	timeout := f.wtimeout
	if timeout == 0 {
		timeout = frameWriteTimeout
	}
	if now := time.Now(); f.wdeadline.Sub(now) < timeout/2 {
		f.wdeadline = now.Add(timeout)
		if err := f.conn.SetWriteDeadline(f.wdeadline); err != nil {
			return err
		}
	}
	_, err := f.conn.Write(b)
	return err
}

// errCleanEnd is the peer's end of its half with an OK status.
var errCleanEnd = errors.New("transport: stream ended")

// read returns the next frame's body, valid until the next read, or
// errCleanEnd at the peer's clean end, or the status error it ended with,
// or the connection's error (io.EOF included: a connection that closed
// without an end frame broke).
func (f *frameConn) read(limit int) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(f.r, h[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(h[:])
	if n == frameEnd {
		code, msg, err := readStatus(f.r)
		switch {
		case err != nil:
			return nil, err
		case code == codes.OK:
			return nil, errCleanEnd
		}
		return nil, status.Error(code, msg)
	}
	if int64(n) > int64(limit) {
		return nil, status.Errorf(codes.ResourceExhausted, "a message of %d bytes, over the %d limit", n, limit)
	}
	if cap(f.rbuf) < int(n) {
		f.rbuf = make([]byte, n)
	}
	b := f.rbuf[:n]
	if _, err := io.ReadFull(f.r, b); err != nil {
		return nil, err
	}
	if cap(f.rbuf) > 1<<20 {
		f.rbuf = nil
	}
	return b, nil
}

func appendStatus(b []byte, code codes.Code, msg string) []byte {
	b = append(b, byte(code))
	b = binary.BigEndian.AppendUint16(b, uint16(len(msg)))
	return append(b, msg...)
}

func readStatus(r *bufio.Reader) (codes.Code, string, error) {
	var h [3]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, "", err
	}
	msg := make([]byte, binary.BigEndian.Uint16(h[1:]))
	if _, err := io.ReadFull(r, msg); err != nil {
		return 0, "", err
	}
	return codes.Code(h[0]), string(msg), nil
}

// appendHello appends the hello of a stream of kind with token (at most
// maxShort).
func appendHello(b []byte, kind byte, token string) []byte {
	b = append(b, framesMagic...)
	b = append(b, kind)
	b = binary.BigEndian.AppendUint16(b, uint16(len(token)))
	b = append(b, "\r\n\r\n"...)
	b = append(b, make([]byte, helloHeader-len(framesMagic)-1-2-4)...)
	return append(b, token...)
}

// readHello reads a hello: the stream's kind and the token.
func readHello(r *bufio.Reader) (kind byte, token string, err error) {
	var h [helloHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, "", err
	}
	if string(h[:len(framesMagic)]) != framesMagic {
		return 0, "", errors.New("not a hello")
	}
	kind = h[len(framesMagic)]
	t := make([]byte, binary.BigEndian.Uint16(h[len(framesMagic)+1:]))
	if _, err := io.ReadFull(r, t); err != nil {
		return 0, "", err
	}
	return kind, string(t), nil
}

// frameConns tracks the server's framed connections, so Close can cut
// them and Shutdown can wait for their streams to wind down.
type frameConns struct {
	accepted atomic.Int64 // streams accepted after their hello (tests read it)

	mu     sync.Mutex
	conns  map[net.Conn]bool // true once past its hello
	closed bool
	wg     sync.WaitGroup
}

func (t *frameConns) add(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	if t.conns == nil {
		t.conns = map[net.Conn]bool{}
	}
	t.conns[c] = false
	t.wg.Add(1)
	return true
}

// streaming marks c past its hello, unless the server is shutting down.
func (t *frameConns) streaming(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.conns[c] = true
	t.accepted.Add(1)
	return true
}

func (t *frameConns) remove(c net.Conn) {
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
	t.wg.Done()
}

// open is how many framed connections are open (tests).
func (t *frameConns) open() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.conns)
}

// shutdown waits for the streams, which the server's draining ends;
// connections still in their hello are closed, so none holds it up.
func (t *frameConns) shutdown() {
	t.mu.Lock()
	t.closed = true
	for c, streaming := range t.conns {
		if !streaming {
			c.Close()
		}
	}
	t.mu.Unlock()
	t.wg.Wait()
}

// close cuts every connection.
func (t *frameConns) close() {
	t.mu.Lock()
	t.closed = true
	for c := range t.conns {
		c.Close()
	}
	t.mu.Unlock()
}

// serveFrames serves one connection that opened with framesMagic.
func (s *Server) serveFrames(c net.Conn) {
	if !s.frames.add(c) {
		c.Close()
		return
	}
	defer s.frames.remove(c)
	defer c.Close()
	f := &frameConn{conn: c, r: bufio.NewReaderSize(c, frameReadBuffer), raw: rawConnOf(c)}
	// The hello is bounded as the sniff was: a silent connection holds
	// nothing for long.
	timeout := s.opts.SniffTimeout
	if timeout <= 0 {
		timeout = DefaultSniffTimeout
	}
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	kind, token, err := readHello(f.r)
	if err != nil {
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	method, ok := framesMethod(kind)
	if !ok || s.noLockStream {
		// Not a stream this server serves this way: it closes, and the
		// client speaks gRPC to it.
		return
	}
	if _, ok := s.locker.(lease.WaitLocker); !ok {
		return // no native service (registerNative)
	}
	if t := s.tokensFor(method); t != nil {
		var auth []string
		if token != "" {
			auth = []string{"Bearer " + token}
		}
		if why := check(t, auth); why != "" {
			_ = f.sendRaw(appendStatus([]byte{frameRefused}, codes.Unauthenticated, why))
			return
		}
	}
	if !s.frames.streaming(c) || f.sendRaw([]byte{frameAccepted}) != nil {
		return // shutting down, or gone
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := &frameServerStream{frameConn: f, ctx: ctx, cancel: cancel, limit: s.opts.MaxRequestBytes}
	switch kind {
	case frameKindBatch:
		err = s.serveStream(st, s.locker, true)
	case frameKindForward:
		err = s.serveStream(st, s.forwarded, true)
	case frameKindLocks:
		err = s.lockStream(s.locker, lockServerFrames{st})
	}
	_ = f.end(err)
}

// frameServerStream is a framed stream as a grpc.ServerStream, so the
// gRPC handlers serve it unchanged.
type frameServerStream struct {
	*frameConn
	ctx    context.Context
	cancel context.CancelFunc
	limit  int
}

func (st *frameServerStream) SetHeader(metadata.MD) error  { return nil }
func (st *frameServerStream) SendHeader(metadata.MD) error { return nil }
func (st *frameServerStream) SetTrailer(metadata.MD)       {}
func (st *frameServerStream) Context() context.Context     { return st.ctx }

func (st *frameServerStream) SendMsg(m any) error {
	encErr, err := st.writeMsg(m, appendServerMsg)
	switch {
	case encErr != nil:
		return encErr
	case err != nil:
		st.cancel()
		return status.Error(codes.Unavailable, err.Error())
	}
	return nil
}

// more reports whether the next message is read already, whole: reading
// it will not wait for the connection.
func (st *frameServerStream) more() bool {
	n := st.r.Buffered()
	if n < 4 {
		return false
	}
	h, _ := st.r.Peek(4)
	size := binary.BigEndian.Uint32(h)
	return size != frameEnd && uint64(n) >= 4+uint64(size)
}

// RecvMsg reads the next message; a broken connection ends the stream's
// context, as a reset does under gRPC.
func (st *frameServerStream) RecvMsg(m any) error {
	b, err := st.read(st.limit)
	switch {
	case err == errCleanEnd:
		return io.EOF // the client closed its half, as gRPC's CloseSend
	case err != nil:
		st.cancel()
		if _, ok := status.FromError(err); !ok {
			err = status.Error(codes.Canceled, err.Error()) // the connection broke
		}
		return err
	}
	return unmarshalRequest(b, m)
}

// lockServerFrames is a framed LockStream, as lockStream takes it.
type lockServerFrames struct{ *frameServerStream }

func (l lockServerFrames) Recv() (*v1.LockStreamRequest, error) {
	m := new(v1.LockStreamRequest)
	if err := l.RecvMsg(m); err != nil {
		return nil, err
	}
	return m, nil
}

func (l lockServerFrames) Send(m *v1.LockStreamResponse) error { return l.SendMsg(m) }
