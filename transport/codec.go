package transport

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// wireCodec is the client's codec on its batch streams. Requests go out as
// bytes the caller's goroutine marshaled before queueing them, so the
// caller may reuse its owner buffer as soon as its call returns (even when
// it gave up early) and the stream's writer only copies bytes. Answers are
// decoded by grpc's standard proto codec. The name stays "proto", so the
// wire and content-type are the standard ones.
type wireCodec struct{}

var protoCodec = encoding.GetCodecV2(proto.Name)

// Marshal takes a *[]byte (a pointer, so passing it as an interface does
// not allocate).
func (wireCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("transport: wireCodec sends *[]byte, not %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(*b)}, nil
}

func (wireCodec) Unmarshal(data mem.BufferSlice, v any) error { return protoCodec.Unmarshal(data, v) }

func (wireCodec) Name() string { return proto.Name }
