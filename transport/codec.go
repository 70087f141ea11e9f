package transport

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
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
	r, ok := v.(*batchReply)
	if !ok {
		return protoCodec.Unmarshal(data, v)
	}
	if len(data) == 1 {
		return r.unmarshal(data[0].ReadOnlyData())
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return r.unmarshal(buf.ReadOnlyData())
}

func (wireCodec) Name() string { return proto.Name }

// serverCodec is the servers' codec: batch stream messages (*batchMsg) are
// decoded and their answers encoded by hand (see wire.go); every other
// message, the unary calls', goes to grpc's standard proto codec.
type serverCodec struct{}

func (serverCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(*batchMsg)
	if !ok {
		return protoCodec.Marshal(v)
	}
	b, err := m.marshalResponse()
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (serverCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*batchMsg)
	if !ok {
		return protoCodec.Unmarshal(data, v)
	}
	if len(data) == 1 {
		return m.unmarshal(data[0].ReadOnlyData())
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return m.unmarshal(buf.ReadOnlyData())
}

func (serverCodec) Name() string { return proto.Name }
