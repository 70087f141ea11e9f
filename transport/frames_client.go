package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	v1 "github.com/kahunago/kahuna/transport/kahunav1pb"
)

// errNoFrames: the endpoint does not speak kahuna's framing.
var errNoFrames = errors.New("transport: the endpoint does not speak kahuna's framing")

const framesDialTimeout = 5 * time.Second

// frameDialer opens framed streams to one cleartext endpoint. When the
// endpoint shows it does not speak the framing, the client uses gRPC with
// it for framesOff before it tries again: a node closing at shutdown
// looks the same as one of an older version, and the upgraded node that
// replaces it should get the framing back.
type frameDialer struct {
	addr     string        // host:port
	token    func() string // nil: no token
	offUntil atomic.Int64  // unix nanoseconds
}

const framesOff = time.Minute

// use reports whether streams to the endpoint are to be framed.
func (d *frameDialer) use() bool { return d != nil && time.Now().UnixNano() >= d.offUntil.Load() }

// open dials a stream of the kind. errNoFrames means the endpoint does not
// speak the framing (and turns it off for framesOff); a refusal is a
// status error, as gRPC's.
func (d *frameDialer) open(ctx context.Context, kind byte) (*frameClientStream, error) {
	dctx, cancel := context.WithTimeout(ctx, framesDialTimeout)
	defer cancel()
	var dialer net.Dialer
	c, err := dialer.DialContext(dctx, "tcp", d.addr)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			c.Close()
		}
	}()
	var token string
	if d.token != nil {
		token = d.token()
	}
	if len(token) > maxShort {
		return nil, fmt.Errorf("transport: a token of %d bytes", len(token))
	}
	hello := appendHello(nil, kind, token)
	if deadline, set := dctx.Deadline(); set {
		_ = c.SetDeadline(deadline)
	}
	if _, err := c.Write(hello); err != nil {
		return nil, err
	}
	r := bufio.NewReaderSize(c, frameReadBuffer)
	answer, err := r.ReadByte()
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET), err == nil && answer != frameAccepted && answer != frameRefused:
		// Closed at the hello (a reset when the hello was not all read),
		// or answered in another protocol (an older kahuna's REST port
		// answers 400).
		d.offUntil.Store(time.Now().Add(framesOff).UnixNano())
		return nil, errNoFrames
	case err != nil:
		return nil, err
	case answer == frameRefused:
		code, msg, err := readStatus(r)
		if err != nil {
			return nil, err
		}
		return nil, status.Error(code, msg)
	}
	_ = c.SetDeadline(time.Time{})
	ok = true
	context.AfterFunc(ctx, func() { c.Close() })
	return &frameClientStream{frameConn: &frameConn{conn: c, r: r}, ctx: ctx}, nil
}

// openIfUsed opens a framed stream of the kind if the endpoint speaks the
// framing; (nil, nil) means gRPC.
func (d *frameDialer) openIfUsed(ctx context.Context, kind byte) (*frameClientStream, error) {
	if !d.use() {
		return nil, nil
	}
	st, err := d.open(ctx, kind)
	if errors.Is(err, errNoFrames) {
		return nil, nil
	}
	return st, err
}

// frameClientStream is a framed stream as a grpc.ClientStream, so the
// batch stream's client drives it unchanged; its context's end closes it.
type frameClientStream struct {
	*frameConn
	ctx context.Context
}

// Header carries the mark of a Batch stream: a framed stream is one.
func (st *frameClientStream) Header() (metadata.MD, error) {
	return metadata.Pairs(batchHeader, "1"), nil
}

func (st *frameClientStream) Trailer() metadata.MD     { return nil }
func (st *frameClientStream) Context() context.Context { return st.ctx }
func (st *frameClientStream) CloseSend() error         { return st.end(nil) }

// SendMsg writes m (the bytes of a *[]byte, or a proto message) as one
// frame. A failed write left the frame incomplete, which the server never
// decodes: the message was not sent, as when grpc's SendMsg fails.
func (st *frameClientStream) SendMsg(m any) error {
	encErr, err := st.writeMsg(m, appendClientMsg)
	if encErr != nil {
		return encErr
	}
	return err
}

// RecvMsg reads the next message into m. io.EOF is the server's clean end
// only; a connection that ends without one broke.
func (st *frameClientStream) RecvMsg(m any) error {
	b, err := st.read(maxAnswerBytes)
	switch {
	case err == nil:
	case err == errCleanEnd:
		return io.EOF
	case status.Code(err) != codes.Unknown:
		return err // the server's status
	case st.ctx.Err() != nil:
		return status.FromContextError(st.ctx.Err()).Err()
	default:
		return status.Error(codes.Unavailable, fmt.Sprintf("connection broke: %v", err))
	}
	return unmarshalAnswer(b, m)
}

// maxAnswerBytes bounds an answer message, as grpc's default receive
// limit does on a client.
const maxAnswerBytes = 4 << 20

// lockClientFrames is a framed LockStream, as lockCalls drives it.
type lockClientFrames struct{ *frameClientStream }

func (l lockClientFrames) Send(m *v1.LockStreamRequest) error { return l.SendMsg(m) }

func (l lockClientFrames) Recv() (*v1.LockStreamResponse, error) {
	m := new(v1.LockStreamResponse)
	if err := l.RecvMsg(m); err != nil {
		return nil, err
	}
	return m, nil
}
