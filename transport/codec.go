package transport

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	protov2 "google.golang.org/protobuf/proto"
)

var protoCodec = encoding.GetCodecV2(proto.Name)

// wireCodec is the client's codec on its batch streams. Requests go out as
// bytes the caller's goroutine marshaled before queueing them, so the
// caller may reuse its owner buffer as soon as its call returns (even when
// it gave up early) and the stream's writer only copies bytes. Answers are
// decoded by hand into a *batchReply (see wire.go); anything else goes to
// grpc's standard proto codec. The name stays "proto", so the wire and
// content-type are the standard ones.
type wireCodec struct{}

// Marshal takes a *[]byte (a pointer, so passing it as an interface does
// not allocate).
func (wireCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("transport: wireCodec sends *[]byte, not %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(*b)}, nil
}

func (wireCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return unmarshalWith(data, v, unmarshalAnswer)
}

// unmarshalWith decodes data into v with decode, in place when it is one
// buffer.
func unmarshalWith(data mem.BufferSlice, v any, decode func([]byte, any) error) error {
	if len(data) == 1 {
		return decode(data[0].ReadOnlyData(), v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return decode(buf.ReadOnlyData(), v)
}

func (wireCodec) Name() string { return proto.Name }

// unmarshalAnswer decodes b, a message to the client, into v: by hand
// for a batch stream's answers, else as grpc's proto codec does. A framed
// stream calls it on the frame's bytes as they are (wrapped in grpc's
// buffers first, as Unmarshal takes them, each message took two
// allocations more).
func unmarshalAnswer(b []byte, v any) error {
	switch r := v.(type) {
	case *batchReply:
		return r.unmarshal(b)
	case *replyPack:
		return r.unmarshal(b)
	}
	return unmarshalProto(b, v)
}

// serverCodec is the servers' codec: batch stream messages (*batchMsg, and
// Batch's *batchPack and *answerPack) are decoded and their answers
// encoded by hand (see wire.go); every other message, the unary calls',
// goes to grpc's standard proto codec.
type serverCodec struct{}

func (serverCodec) Marshal(v any) (mem.BufferSlice, error) {
	var b []byte
	var err error
	switch m := v.(type) {
	case *batchMsg:
		b, err = m.marshalResponse()
	case *answerPack:
		b, err = m.marshal()
	default:
		return protoCodec.Marshal(v)
	}
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (serverCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return unmarshalWith(data, v, unmarshalRequest)
}

func (serverCodec) Name() string { return proto.Name }

// unmarshalRequest is unmarshalAnswer for a message to the server.
func unmarshalRequest(b []byte, v any) error {
	switch m := v.(type) {
	case *batchMsg:
		return m.unmarshal(b)
	case *batchPack:
		return m.unmarshal(b)
	}
	return unmarshalProto(b, v)
}

// appendServerMsg is the server's encoder on its framed streams: m as
// serverCodec encodes it.
func appendServerMsg(b []byte, m any) ([]byte, error) {
	switch v := m.(type) {
	case *batchMsg:
		return v.appendMarshaledResponse(b)
	case *answerPack:
		return v.appendMarshal(b)
	}
	return appendProto(b, m)
}

// appendClientMsg is the client's encoder on its framed streams: a
// request its caller marshaled (*[]byte, see wireCodec), or a protobuf
// message.
func appendClientMsg(b []byte, m any) ([]byte, error) {
	if raw, ok := m.(*[]byte); ok {
		return append(b, *raw...), nil
	}
	return appendProto(b, m)
}

// appendProto appends v, a protobuf message, as grpc's proto codec
// encodes it.
func appendProto(b []byte, v any) ([]byte, error) {
	m, ok := v.(protov2.Message)
	if !ok {
		return nil, fmt.Errorf("transport: cannot send a %T, not a protobuf message", v)
	}
	return protov2.MarshalOptions{}.MarshalAppend(b, m)
}

// unmarshalProto decodes b into v, a protobuf message, as grpc's proto
// codec does (it too decodes a single buffer in place, and protobuf
// copies what it keeps).
func unmarshalProto(b []byte, v any) error {
	m, ok := v.(protov2.Message)
	if !ok {
		return fmt.Errorf("transport: cannot decode into a %T, not a protobuf message", v)
	}
	return protov2.Unmarshal(b, m)
}
