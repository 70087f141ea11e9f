package transport

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kahunago/kahuna/lease"
	pb "github.com/kahunago/kahuna/transport/lockspb"
)

// The batch streams' protobuf, encoded and decoded by hand (wire.go) and
// by the generated code, side by side on one TryLock and its answer. The
// same messages are measured with planetscale/vtprotobuf in the bench
// module (bench/peers/codecs), beside protobuf-go again:
//
//	go test -run '^$' -bench 'Wire' -benchmem ./transport

func benchWireRequest() *pb.GrpcBatchClientLockRequest {
	return &pb.GrpcBatchClientLockRequest{
		Type:      pb.GrpcClientBatchType_TRY_LOCK,
		RequestId: 1234,
		Payload: &pb.GrpcBatchClientLockRequest_TryLock{TryLock: &pb.GrpcTryLockRequest{
			Resource: "jobs/export", Owner: []byte("owner-1"), ExpiresMs: 30000, Durability: pb.GrpcLockDurability_DURABILITY_PERSISTENT,
		}},
	}
}

func benchWireResponse() *pb.GrpcBatchClientLockResponse {
	return &pb.GrpcBatchClientLockResponse{
		Type:      pb.GrpcClientBatchType_TRY_LOCK,
		RequestId: 1234,
		Payload: &pb.GrpcBatchClientLockResponse_TryLock{TryLock: &pb.GrpcTryLockResponse{
			ServedFrom: proto.String(""), Type: pb.GrpcLockResponseType_LOCK_RESPONSE_TYPE_LOCKED, FencingToken: 41,
		}},
	}
}

// The server decodes requests and encodes answers; the client the reverse.

func BenchmarkWireDecodeRequest(b *testing.B) {
	in, err := proto.Marshal(benchWireRequest())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("hand", func(b *testing.B) {
		var m batchMsg
		for b.Loop() {
			if err := m.unmarshal(in); err != nil || m.expiresMs != 30000 {
				b.Fatal(err, m)
			}
		}
	})
	b.Run("protobuf-go", func(b *testing.B) {
		for b.Loop() {
			var m pb.GrpcBatchClientLockRequest
			if err := proto.Unmarshal(in, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkWireEncodeResponse(b *testing.B) {
	want, err := proto.Marshal(benchWireResponse())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("hand", func(b *testing.B) {
		m := batchMsg{typ: int32(pb.GrpcClientBatchType_TRY_LOCK), id: 1234, op: lease.TryLock, res: lease.Result{Status: lease.Locked, FencingToken: 41}}
		buf := make([]byte, 0, 64)
		for b.Loop() {
			_, psize := m.responseSize()
			buf = m.appendResponse(buf[:0], psize)
		}
		if string(buf) != string(want) {
			b.Fatalf("encoded %x, the generated code %x", buf, want)
		}
	})
	b.Run("protobuf-go", func(b *testing.B) {
		m := benchWireResponse()
		buf := make([]byte, 0, 64)
		for b.Loop() {
			if buf, err = (proto.MarshalOptions{}).MarshalAppend(buf[:0], m); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkWireEncodeRequest(b *testing.B) {
	want, err := proto.Marshal(benchWireRequest())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("hand", func(b *testing.B) {
		buf := make([]byte, 0, 64)
		owner := []byte("owner-1")
		for b.Loop() {
			buf = appendRequest(buf[:0], 1234, lease.TryLock, "jobs/export", owner, 30*time.Second, lease.Persistent)
		}
		if string(buf) != string(want) {
			b.Fatalf("encoded %x, the generated code %x", buf, want)
		}
	})
	b.Run("protobuf-go", func(b *testing.B) {
		buf := make([]byte, 0, 64)
		for b.Loop() {
			if buf, err = (proto.MarshalOptions{}).MarshalAppend(buf[:0], benchWireRequest()); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkWireDecodeResponse(b *testing.B) {
	in, err := proto.Marshal(benchWireResponse())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("hand", func(b *testing.B) {
		var r batchReply
		for b.Loop() {
			if err := r.unmarshal(in); err != nil || r.token != 41 {
				b.Fatal(err, r)
			}
		}
	})
	b.Run("protobuf-go", func(b *testing.B) {
		for b.Loop() {
			var m pb.GrpcBatchClientLockResponse
			if err := proto.Unmarshal(in, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkWireEncodeAnswerPack encodes a Batch message of ten answers:
// appended to the framing's buffer, and marshaled afresh as gRPC's codec
// does.
func BenchmarkWireEncodeAnswerPack(b *testing.B) {
	var p answerPack
	for i := range 10 {
		p.msgs = append(p.msgs, &batchMsg{typ: int32(pb.GrpcClientBatchType_TRY_LOCK), id: int32(1234 + i), op: lease.TryLock, res: lease.Result{Status: lease.Locked, FencingToken: 41}})
	}
	want, err := p.marshal()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("append", func(b *testing.B) {
		buf := make([]byte, 0, 4096)
		for b.Loop() {
			buf, _ = p.appendMarshal(buf[:0])
		}
		if string(buf) != string(want) {
			b.Fatalf("appended %x, marshaled %x", buf, want)
		}
	})
	b.Run("marshal", func(b *testing.B) {
		for b.Loop() {
			_, _ = p.marshal()
		}
	})
}
