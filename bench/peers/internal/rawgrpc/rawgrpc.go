// Package rawgrpc carries a floor's own bytes over grpc-go: one
// bidirectional stream method whose messages are passed through by a codec
// that encodes nothing, with kahuna's flow-control windows on both sides.
// A floor over it pays grpc-go's own cost (HTTP/2 framing, its reader and
// writer goroutines, flow control) and no protobuf, auth or metrics.
package rawgrpc

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"

	"github.com/kahunago/kahuna/bench/peers/internal/closedloop"
)

// kahuna's gRPC flow-control windows (transport/server.go): a stream may
// have this much unread in flight before its sender waits.
const (
	streamWindow = 1 << 20
	connWindow   = 4 << 20
)

// Msg is one stream message.
type Msg struct{ B []byte }

// codec passes a Msg's bytes through as the message.
type codec struct{}

func (codec) Name() string { return "raw" }

// Marshal hands grpc the Msg's bytes, which it keeps until they are
// written: a sender does not reuse them.
func (codec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.(*Msg).B)}, nil
}

// Unmarshal copies the message into the Msg's bytes, reusing them.
func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	m := v.(*Msg)
	m.B = m.B[:0]
	for _, buf := range data {
		m.B = append(m.B, buf.ReadOnlyData()...)
	}
	return nil
}

const method = "/floor.Raw/Stream"

var streamDesc = grpc.StreamDesc{StreamName: "Stream", ServerStreams: true, ClientStreams: true}

// Serve serves lis, handling each stream with handle, until lis fails.
func Serve(lis net.Listener, handle func(grpc.ServerStream) error) error {
	desc := grpc.ServiceDesc{
		ServiceName: "floor.Raw",
		HandlerType: (*any)(nil),
		Streams:     []grpc.StreamDesc{streamDesc},
	}
	desc.Streams[0].Handler = func(_ any, st grpc.ServerStream) error { return handle(st) }
	g := grpc.NewServer(
		grpc.InitialWindowSize(streamWindow), grpc.InitialConnWindowSize(connWindow),
		grpc.ForceServerCodecV2(codec{}))
	g.RegisterService(&desc, struct{}{})
	return g.Serve(lis)
}

// Conn is a client connection.
type Conn struct{ cc *grpc.ClientConn }

// Dial connects to addr (host:port) in cleartext.
func Dial(addr string) (*Conn, error) {
	cc, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(streamWindow), grpc.WithInitialConnWindowSize(connWindow),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(codec{})))
	if err != nil {
		return nil, err
	}
	return &Conn{cc: cc}, nil
}

// Stream opens a stream on c; it ends with ctx.
func (c *Conn) Stream(ctx context.Context) (grpc.ClientStream, error) {
	st, err := c.cc.NewStream(ctx, &streamDesc, method)
	if err != nil {
		return nil, fmt.Errorf("opening a stream: %w", err)
	}
	return st, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.cc.Close() }

// ReadAnswers receives st's messages, each of whole answers of size bytes,
// and gives deliver each answer, until a receive or deliver fails: then b
// fails with that error, as closedloop.ReadAnswers does on a connection.
func ReadAnswers(st grpc.ClientStream, size int, b *closedloop.Breakage, deliver func(m []byte) error) {
	var m Msg
	for {
		if err := st.RecvMsg(&m); err != nil {
			b.Fail(fmt.Errorf("receiving: %w", err))
			return
		}
		if len(m.B)%size != 0 {
			b.Fail(fmt.Errorf("a message of %d bytes, not of whole %d-byte answers", len(m.B), size))
			return
		}
		for a := m.B; len(a) > 0; a = a[size:] {
			if err := deliver(a[:size]); err != nil {
				b.Fail(err)
				return
			}
		}
	}
}

// Writer returns an io.Writer that sends each Write as one message on st.
// It copies what it is given, since grpc keeps a message's bytes until it
// has written them and a writer may reuse its buffer. Writes must not run
// concurrently.
func Writer(st interface{ SendMsg(any) error }) io.Writer { return writer{st} }

type writer struct {
	st interface{ SendMsg(any) error }
}

func (w writer) Write(b []byte) (int, error) {
	if err := w.st.SendMsg(&Msg{B: bytes.Clone(b)}); err != nil {
		return 0, err
	}
	return len(b), nil
}
