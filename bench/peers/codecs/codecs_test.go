package codecs

import (
	"encoding/json"
	"testing"

	"github.com/bytedance/sonic"
	gojson "github.com/goccy/go-json"
	"google.golang.org/protobuf/proto"

	pb "github.com/kahunago/kahuna/bench/peers/codecs/lockspbvt"
)

//	go test -run '^$' -bench . -benchmem ./codecs
//
// The messages are those of transport's benchmarks (wire_bench_test.go,
// json_fast_bench_test.go): a TryLock in a batch envelope and its answer,
// and the REST lock call's body and reply.

func benchRequest() *pb.GrpcBatchClientLockRequest {
	return &pb.GrpcBatchClientLockRequest{
		Type:      pb.GrpcClientBatchType_TRY_LOCK,
		RequestId: 1234,
		Payload: &pb.GrpcBatchClientLockRequest_TryLock{TryLock: &pb.GrpcTryLockRequest{
			Resource: "jobs/export", Owner: []byte("owner-1"), ExpiresMs: 30000, Durability: pb.GrpcLockDurability_DURABILITY_PERSISTENT,
		}},
	}
}

func benchResponse() *pb.GrpcBatchClientLockResponse {
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
	in, err := proto.Marshal(benchRequest())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("protobuf-go", func(b *testing.B) {
		for b.Loop() {
			var m pb.GrpcBatchClientLockRequest
			if err := proto.Unmarshal(in, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("vtproto", func(b *testing.B) {
		for b.Loop() {
			var m pb.GrpcBatchClientLockRequest
			if err := m.UnmarshalVT(in); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkWireEncodeResponse(b *testing.B) {
	m := benchResponse()
	b.Run("protobuf-go", func(b *testing.B) {
		buf := make([]byte, 0, 64)
		for b.Loop() {
			var err error
			if buf, err = (proto.MarshalOptions{}).MarshalAppend(buf[:0], m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("vtproto", func(b *testing.B) {
		buf := make([]byte, 64)
		for b.Loop() {
			n := m.SizeVT()
			if _, err := m.MarshalToSizedBufferVT(buf[:n]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkWireEncodeRequest(b *testing.B) {
	b.Run("protobuf-go", func(b *testing.B) {
		buf := make([]byte, 0, 64)
		for b.Loop() {
			var err error
			if buf, err = (proto.MarshalOptions{}).MarshalAppend(buf[:0], benchRequest()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("vtproto", func(b *testing.B) {
		buf := make([]byte, 64)
		for b.Loop() {
			m := benchRequest()
			n := m.SizeVT()
			if _, err := m.MarshalToSizedBufferVT(buf[:n]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkWireDecodeResponse(b *testing.B) {
	in, err := proto.Marshal(benchResponse())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("protobuf-go", func(b *testing.B) {
		for b.Loop() {
			var m pb.GrpcBatchClientLockResponse
			if err := proto.Unmarshal(in, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("vtproto", func(b *testing.B) {
		for b.Loop() {
			var m pb.GrpcBatchClientLockResponse
			if err := m.UnmarshalVT(in); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// The REST lock call's body and reply, field for field as the node
// declares them (transport/server_rest.go): the fields kahuna adds to
// Kahuna's are absent from these messages, as from Kahuna's clients'.
type lockBody struct {
	Resource   string   `json:"resource"`
	Owner      []byte   `json:"owner"`
	ExpiresMs  int32    `json:"expiresMs"`
	Durability int32    `json:"durability"`
	Permits    int32    `json:"permits"`
	Limit      int32    `json:"limit"`
	Shared     bool     `json:"shared"`
	Resize     bool     `json:"resize"`
	NewOwner   []byte   `json:"newOwner"`
	Also       []string `json:"also"`
}

type lockReply struct {
	ServedFrom   string       `json:"servedFrom"`
	Type         int32        `json:"type"`
	FencingToken int64        `json:"fencingToken"`
	Reason       string       `json:"reason,omitempty"`
	Grants       []grantReply `json:"grants,omitempty"`
	PermitsFree  *int         `json:"permitsFree,omitempty"`
	Each         []int32      `json:"each,omitempty"`
}

type grantReply struct {
	Slot         int   `json:"slot"`
	FencingToken int64 `json:"fencingToken"`
}

// benchLockReplyJSON is what the node sends for benchLockReply.
const benchLockReplyJSON = `{"servedFrom":"http://127.0.0.1:2070","type":0,"fencingToken":41}`

var (
	benchLockBody  = []byte(`{"resource":"jobs/export","owner":"b3duZXItMQ==","expiresMs":30000,"durability":1}`)
	benchLockReply = lockReply{ServedFrom: "http://127.0.0.1:2070", Type: 0, FencingToken: 41}
)

func BenchmarkJSONDecodeLockBody(b *testing.B) {
	for _, c := range []struct {
		name      string
		unmarshal func([]byte, any) error
	}{{"encoding-json", json.Unmarshal}, {"go-json", gojson.Unmarshal}, {"sonic", sonic.Unmarshal}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				var lb lockBody
				if err := c.unmarshal(benchLockBody, &lb); err != nil || lb.ExpiresMs != 30000 || string(lb.Owner) != "owner-1" {
					b.Fatal(err, lb)
				}
			}
		})
	}
}

func BenchmarkJSONEncodeLockReply(b *testing.B) {
	for _, c := range []struct {
		name    string
		marshal func(any) ([]byte, error)
	}{{"encoding-json", json.Marshal}, {"go-json", gojson.Marshal}, {"sonic", sonic.Marshal}} {
		b.Run(c.name, func(b *testing.B) {
			var out []byte
			for b.Loop() {
				var err error
				if out, err = c.marshal(benchLockReply); err != nil {
					b.Fatal(err)
				}
			}
			if string(out) != benchLockReplyJSON {
				b.Fatalf("encoded %s, the node sends %s", out, benchLockReplyJSON)
			}
		})
	}
}
