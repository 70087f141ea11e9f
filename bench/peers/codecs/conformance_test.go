package codecs

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/kahunago/kahuna/bench/peers/codecs/lockspbvt"
)

// vtDecoded is one message type decoded both ways.
type vtDecoded interface {
	proto.Message
	UnmarshalVT([]byte) error
}

// decodeBoth decodes b with protobuf-go and with vtprotobuf's generated
// code into fresh messages of the same type, and says how they differ ("" when
// they agree).
func decodeBoth[T vtDecoded](b []byte, fresh func() T) string {
	ref, vt := fresh(), fresh()
	refErr := proto.Unmarshal(b, ref)
	vtErr := vt.UnmarshalVT(b)
	switch {
	case refErr == nil && vtErr != nil:
		return fmt.Sprintf("protobuf-go accepts, vtprotobuf refuses: %v", vtErr)
	case refErr != nil && vtErr == nil:
		return fmt.Sprintf("protobuf-go refuses (%v), vtprotobuf accepts", refErr)
	case refErr == nil && !proto.Equal(dropUnknown(ref), dropUnknown(vt)):
		return fmt.Sprintf("decoded differently: %v against %v", ref, vt)
	}
	return ""
}

// dropUnknown clears m's unknown fields, and its submessages': neither
// transport's decoder nor its callers read them.
func dropUnknown[T proto.Message](m T) T {
	var drop func(protoreflect.Message)
	drop = func(r protoreflect.Message) {
		r.SetUnknown(nil)
		r.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			if fd.Message() != nil && !fd.IsList() && !fd.IsMap() {
				drop(v.Message())
			}
			return true
		})
	}
	drop(m.ProtoReflect())
	return m
}

func request() *pb.GrpcBatchClientLockRequest   { return new(pb.GrpcBatchClientLockRequest) }
func response() *pb.GrpcBatchClientLockResponse { return new(pb.GrpcBatchClientLockResponse) }

// TestVTProtoDiffersFromProtobufGo records the inputs on which
// vtprotobuf v0.6 decodes a batch envelope otherwise than protobuf-go
// (which transport's hand decoder follows exactly, held to it by
// transport's FuzzWireDecode). They were found by fuzzing decodeBoth on
// both envelopes: each class within seconds, after the ones before it were
// filtered out. Two minutes of fuzzing UnmarshalVT alone found no panic. When this test fails,
// vtprotobuf has come to agree on one of them: docs/benchmarks-log.md's
// section on the hand-written codecs says why they were kept, and should
// be read again.
func TestVTProtoDiffersFromProtobufGo(t *testing.T) {
	tag := func(b []byte, num protowire.Number, typ protowire.Type) []byte {
		return protowire.AppendTag(b, num, typ)
	}
	tryLock := func(payload []byte) []byte {
		b := tag(nil, 3, protowire.BytesType)
		return protowire.AppendBytes(b, payload)
	}
	cases := []struct {
		name string
		in   []byte
	}{
		{"a known field with another wire type (RequestId as bytes)",
			protowire.AppendBytes(tag(nil, 2, protowire.BytesType), []byte("x"))},
		{"invalid UTF-8 in a proto3 string (Resource)",
			tryLock(protowire.AppendBytes(tag(nil, 1, protowire.BytesType), []byte{0xff, 0xfe}))},
		{"a field number above 2^29-1",
			protowire.AppendVarint(protowire.AppendVarint(nil, uint64(1<<30)<<3|uint64(protowire.VarintType)), 1)},
		{"a group whose end tag names another field",
			tag(tag(nil, 8, protowire.StartGroupType), 4, protowire.EndGroupType)},
		{"a varint whose tenth byte overflows 64 bits (Type)",
			append(tag(nil, 1, protowire.VarintType), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02)},
	}
	for _, c := range cases {
		for _, d := range []struct{ envelope, diff string }{
			{"request", decodeBoth(c.in, request)},
			{"answer", decodeBoth(c.in, response)},
		} {
			if d.diff == "" {
				t.Errorf("%s, as %s: vtprotobuf now agrees with protobuf-go", c.name, d.envelope)
				continue
			}
			t.Logf("%s, as %s: %s", c.name, d.envelope, d.diff)
		}
	}
}
