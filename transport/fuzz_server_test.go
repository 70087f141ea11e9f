package transport

// Fuzz targets for what a server reads from the network: unary gRPC
// request messages, batch streams (a sequence of messages, any of them
// malformed) and REST JSON bodies. They run through the server on a
// loopback listener (or its HTTP handler), so they fuzz the codecs and the
// handlers together and survive refactoring of either.
//
//	go test -run Fuzz ./transport                                   # the seed corpora
//	go test -run X -fuzz FuzzUnaryRequest -fuzztime 10m ./transport  # one target for longer
//	go test -run X -fuzz FuzzBatchStream -fuzztime 10m ./transport
//	go test -run X -fuzz FuzzLockStream -fuzztime 10m ./transport   (fuzz_lockstream_test.go)
//	go test -run X -fuzz FuzzRESTBody -fuzztime 10m ./transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kahunago/kahuna/lease"
	v1 "github.com/kahunago/kahuna/transport/kahunav1pb"
	pb "github.com/kahunago/kahuna/transport/lockspb"
)

// knownStatus: what a server may answer to a lock request.
func knownStatus(s lease.Status) bool {
	switch s {
	case lease.Locked, lease.Busy, lease.Extended, lease.Unlocked, lease.Got, lease.WaitingForReplication,
		lease.Errored, lease.InvalidInput, lease.MustRetry, lease.LockDoesNotExist, lease.InvalidOwner, lease.Aborted:
		return true
	}
	return false
}

// fuzzServer is a server on loopback with a raw client connection.
type fuzzServer struct {
	locker *fakeLocker
	srv    *Server
	conn   *grpc.ClientConn
}

// tryOnlyWaiter is a WaitLocker whose Lock never waits, so the native
// service is served too and a fuzzed LockStream ends as soon as its
// messages are answered.
type tryOnlyWaiter struct{ *fakeLocker }

func (w tryOnlyWaiter) Lock(ctx context.Context, r string, o []byte, ttl, _ time.Duration, d lease.Durability) (lease.Result, error) {
	return w.TryLock(ctx, r, o, ttl, d)
}

func startFuzzServer(f *testing.F) *fuzzServer {
	fs := &fuzzServer{locker: newFake()}
	fs.srv = NewServer(tryOnlyWaiter{fs.locker}, ServerOptions{Logger: slog.New(slog.DiscardHandler), NodeName: "fuzz"})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	go fs.srv.ServeGRPC(lis)
	fs.conn, err = grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		fs.conn.Close()
		fs.srv.Close()
	})
	return fs
}

// healthy checks the server still serves after whatever it was sent.
func (fs *fuzzServer) healthy(t *testing.T) {
	t.Helper()
	req, _ := proto.Marshal(&pb.GrpcGetLockRequest{Resource: "health", Durability: pb.GrpcLockDurability(lease.Ephemeral)})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out []byte
	if err := fs.conn.Invoke(ctx, "/Locker/GetLock", req, &out); err != nil {
		t.Fatalf("server no longer serves: %v", err)
	}
}

var unaryMethods = []struct {
	name string
	op   lease.Op
	req  func() proto.Message
	resp func() proto.Message
}{
	{"/Locker/TryLock", lease.TryLock, func() proto.Message { return &pb.GrpcTryLockRequest{} }, func() proto.Message { return &pb.GrpcTryLockResponse{} }},
	{"/Locker/TryExtendLock", lease.Extend, func() proto.Message { return &pb.GrpcExtendLockRequest{} }, func() proto.Message { return &pb.GrpcExtendLockResponse{} }},
	{"/Locker/Unlock", lease.Unlock, func() proto.Message { return &pb.GrpcUnlockRequest{} }, func() proto.Message { return &pb.GrpcUnlockResponse{} }},
	{"/Locker/GetLock", lease.Get, func() proto.Message { return &pb.GrpcGetLockRequest{} }, func() proto.Message { return &pb.GrpcGetLockResponse{} }},
}

// requestFields extracts what a decoded unary request asks for.
func requestFields(m proto.Message) (resource string, owner []byte, ttl time.Duration, d lease.Durability) {
	switch r := m.(type) {
	case *pb.GrpcTryLockRequest:
		return r.Resource, r.Owner, time.Duration(r.ExpiresMs) * time.Millisecond, lease.Durability(r.Durability)
	case *pb.GrpcExtendLockRequest:
		return r.Resource, r.Owner, time.Duration(r.ExpiresMs) * time.Millisecond, lease.Durability(r.Durability)
	case *pb.GrpcUnlockRequest:
		return r.Resource, r.Owner, 0, lease.Durability(r.Durability)
	case *pb.GrpcGetLockRequest:
		return r.Resource, nil, 0, lease.Durability(r.Durability)
	}
	return "", nil, 0, 0
}

func responseStatus(m proto.Message) lease.Status {
	switch r := m.(type) {
	case *pb.GrpcTryLockResponse:
		return lease.Status(r.Type)
	case *pb.GrpcExtendLockResponse:
		return lease.Status(r.Type)
	case *pb.GrpcUnlockResponse:
		return lease.Status(r.Type)
	case *pb.GrpcGetLockResponse:
		return lease.Status(r.Type)
	}
	return -1
}

// FuzzUnaryRequest sends arbitrary bytes as the request message of one of
// the four unary methods. A message the proto codec cannot decode is
// refused with a gRPC error and reaches nothing; one it can is answered
// with a known status, InvalidInput exactly when the request is not valid
// (InvalidInput, nothing applied), and the server keeps serving.
func FuzzUnaryRequest(f *testing.F) {
	seeds := []proto.Message{
		&pb.GrpcTryLockRequest{Resource: "r", Owner: []byte("o"), ExpiresMs: 1000},
		&pb.GrpcTryLockRequest{Resource: "r", Owner: []byte("o"), ExpiresMs: -1, Durability: 1},
		&pb.GrpcExtendLockRequest{Resource: "r", Owner: []byte("o"), ExpiresMs: 5, Durability: 7},
		&pb.GrpcUnlockRequest{Resource: "r", Owner: []byte("o")},
		&pb.GrpcGetLockRequest{Resource: "r", Durability: 1},
		&pb.GrpcGetLockRequest{},
	}
	for i, m := range seeds {
		b, _ := proto.Marshal(m)
		f.Add(uint8(i), b)
	}
	f.Add(uint8(0), []byte{0x0a, 0x02, 0xff, 0xfe}) // invalid UTF-8 resource
	f.Add(uint8(1), []byte{0x0a})                   // truncated
	fs := startFuzzServer(f)
	f.Fuzz(func(t *testing.T, which uint8, payload []byte) {
		m := unaryMethods[int(which)%len(unaryMethods)]
		req := m.req()
		decodable := proto.Unmarshal(payload, req) == nil
		before := fs.locker.served.Load()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var out []byte
		err := fs.conn.Invoke(ctx, m.name, payload, &out)
		switch {
		case err != nil:
			if st, ok := status.FromError(err); !ok || st.Code() == codes.Unknown || st.Code() == codes.DeadlineExceeded {
				t.Fatalf("%s: %v", m.name, err)
			}
			if decodable {
				t.Fatalf("%s refused a request the proto codec decodes (%v): %v", m.name, req, err)
			}
			if fs.locker.served.Load() != before {
				t.Fatalf("%s: a refused request reached the Locker", m.name)
			}
		case !decodable:
			t.Fatalf("%s answered a request the proto codec refuses", m.name)
		default:
			resp := m.resp()
			if err := proto.Unmarshal(out, resp); err != nil {
				t.Fatalf("%s: answer does not decode: %v", m.name, err)
			}
			st := responseStatus(resp)
			if !knownStatus(st) {
				t.Fatalf("%s: unknown status %d", m.name, st)
			}
			resource, owner, ttl, d := requestFields(req)
			if valid := lease.Valid(m.op, resource, owner, ttl, d); valid == (st == lease.InvalidInput) {
				t.Fatalf("%s %v: valid=%v but answered %v", m.name, req, valid, st)
			}
		}
		fs.healthy(t)
	})
}

// frames splits b into length-prefixed frames (2-byte big-endian lengths;
// a short tail is the last frame).
func frames(b []byte) [][]byte {
	var out [][]byte
	for len(b) >= 2 && len(out) < 64 {
		n := int(binary.BigEndian.Uint16(b))
		b = b[2:]
		n = min(n, len(b))
		out = append(out, b[:n])
		b = b[n:]
	}
	if len(b) > 0 {
		out = append(out, b)
	}
	return out
}

func joinFrames(fs ...[]byte) []byte {
	var out []byte
	for _, f := range fs {
		out = binary.BigEndian.AppendUint16(out, uint16(len(f)))
		out = append(out, f...)
	}
	return out
}

// FuzzBatchStream opens a BatchClientLockRequests stream and sends a
// sequence of arbitrary messages (the fuzz input cut into length-prefixed
// frames), then closes its side; then the same on a kahuna.v1 Batch
// stream, the frames packed three to a message. If every message decodes the stream must
// end cleanly with exactly one answer per message, matched by RequestId and
// echoing its Type, with a known status (InvalidInput for a malformed or
// invalid request); if one does not, the stream may end with an error, and
// every answer it gave still belongs to a message sent. The server keeps
// serving either way.
func FuzzBatchStream(f *testing.F) {
	enc := func(m *pb.GrpcBatchClientLockRequest) []byte { b, _ := proto.Marshal(m); return b }
	try := func(id int32, res string) []byte {
		return enc(&pb.GrpcBatchClientLockRequest{Type: 1, RequestId: id, Payload: &pb.GrpcBatchClientLockRequest_TryLock{TryLock: &pb.GrpcTryLockRequest{Resource: res, Owner: []byte("o"), ExpiresMs: 1000}}})
	}
	unlock := enc(&pb.GrpcBatchClientLockRequest{Type: 2, RequestId: 2, Payload: &pb.GrpcBatchClientLockRequest_Unlock{Unlock: &pb.GrpcUnlockRequest{Resource: "r", Owner: []byte("o")}}})
	get := enc(&pb.GrpcBatchClientLockRequest{Type: 4, RequestId: 3, Payload: &pb.GrpcBatchClientLockRequest_GetLock{GetLock: &pb.GrpcGetLockRequest{Resource: "r"}}})
	mismatched := enc(&pb.GrpcBatchClientLockRequest{Type: 4, RequestId: 4, Payload: &pb.GrpcBatchClientLockRequest_TryLock{TryLock: &pb.GrpcTryLockRequest{Resource: "r"}}})
	f.Add(joinFrames(try(1, "r"), unlock, get))
	f.Add(joinFrames(try(1, "r"), try(1, "r"), mismatched, enc(&pb.GrpcBatchClientLockRequest{RequestId: 9})))
	f.Add(joinFrames(try(7, "a"), []byte{0xff, 0xff}, try(8, "b")))
	f.Add(joinFrames())
	fs := startFuzzServer(f)
	f.Fuzz(func(t *testing.T, input []byte) {
		msgs := frames(input)
		var want []sent
		allDecode := true
		for _, b := range msgs {
			var m pb.GrpcBatchClientLockRequest
			if proto.Unmarshal(b, &m) != nil {
				allDecode = false
				continue
			}
			want = append(want, sent{int32(m.Type), m.RequestId})
		}
		for _, packed := range []bool{false, true} {
			fuzzOneBatchStream(t, fs, msgs, want, allDecode, packed)
		}
		fs.healthy(t)
	})
}

type sent struct{ typ, id int32 }

// fuzzOneBatchStream sends msgs on a batch stream (Kahuna's, or packed on
// kahuna.v1's Batch) and checks the answers against want (see
// FuzzBatchStream).
func fuzzOneBatchStream(t *testing.T, fs *fuzzServer, msgs [][]byte, want []sent, allDecode, packed bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	method := "/Locker/BatchClientLockRequests"
	out := msgs
	if packed {
		// Kahuna.v1's Batch: the same requests, up to three a message.
		method, out = v1.Kahuna_Batch_FullMethodName, nil
		for i := 0; i < len(msgs); i += 3 {
			var m []byte
			for _, b := range msgs[i:min(i+3, len(msgs))] {
				m = appendPacked(m, b)
			}
			out = append(out, m)
		}
	}
	stream, err := fs.conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, method)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range out {
		if stream.SendMsg(b) != nil {
			break // the server ended the stream; Recv says why
		}
	}
	_ = stream.CloseSend()
	var got []sent
	var end error
	for {
		var out []byte
		if end = stream.RecvMsg(&out); end != nil {
			break
		}
		answers := [][]byte{out}
		if packed {
			var resp v1.BatchResponses
			if err := proto.Unmarshal(out, &resp); err != nil || len(resp.Responses) == 0 {
				t.Fatalf("answer message does not decode or is empty: %v", err)
			}
			answers = answers[:0]
			for _, r := range resp.Responses {
				b, _ := proto.Marshal(r)
				answers = append(answers, b)
			}
		}
		for _, out := range answers {
			var r pb.GrpcBatchClientLockResponse
			if err := proto.Unmarshal(out, &r); err != nil {
				t.Fatalf("answer does not decode: %v", err)
			}
			st := lease.Status(-1)
			switch p := r.Payload.(type) {
			case *pb.GrpcBatchClientLockResponse_TryLock:
				st = lease.Status(p.TryLock.Type)
			case *pb.GrpcBatchClientLockResponse_ExtendLock:
				st = lease.Status(p.ExtendLock.Type)
			case *pb.GrpcBatchClientLockResponse_Unlock:
				st = lease.Status(p.Unlock.Type)
			case *pb.GrpcBatchClientLockResponse_GetLock:
				st = lease.Status(p.GetLock.Type)
			}
			if !knownStatus(st) {
				t.Fatalf("answer %v: no payload or unknown status", &r)
			}
			got = append(got, sent{int32(r.Type), r.RequestId})
		}
	}
	if ctx.Err() != nil {
		t.Fatalf("stream hung: %v", end)
	}
	// Every answer belongs to a message sent, at most once each.
	left := map[sent]int{}
	for _, s := range want {
		left[s]++
	}
	for _, g := range got {
		if left[g] == 0 {
			t.Fatalf("answer %+v to no message sent (sent %+v)", g, want)
		}
		left[g]--
	}
	if allDecode {
		if !errors.Is(end, io.EOF) {
			t.Fatalf("stream of well-formed messages ended with %v", end)
		}
		if len(got) != len(want) {
			t.Fatalf("%d answers to %d messages", len(got), len(want))
		}
	}
}

// restBody mirrors the REST lock DTO as encoding/json reads it; restGetBody
// get-info's (which has no owner or expiry: those fields are ignored).
type restBody struct {
	Resource   string `json:"resource"`
	Owner      []byte `json:"owner"`
	ExpiresMs  int32  `json:"expiresMs"`
	Durability int32  `json:"durability"`
}

type restGetBody struct {
	Resource   string `json:"resource"`
	Durability int32  `json:"durability"`
}

var restPaths = []struct {
	path string
	op   lease.Op
}{
	{"/v1/locks/try-lock", lease.TryLock},
	{"/v1/locks/try-extend", lease.Extend},
	{"/v1/locks/try-unlock", lease.Unlock},
	{"/v1/locks/get-info", lease.Get},
}

// FuzzRESTBody posts arbitrary bodies to the four REST lock routes. The
// answer is 200 with a JSON body carrying a known status (InvalidInput
// exactly when the decoded request is not valid), or 400/413 with a JSON
// error, in which case nothing reached the Locker.
func FuzzRESTBody(f *testing.F) {
	f.Add(uint8(0), []byte(`{"resource":"r","owner":"b3duZXI=","expiresMs":1000,"durability":1}`))
	f.Add(uint8(1), []byte(`{"Resource":"r","OWNER":"b3duZXI=","expiresMs":-5}`))
	f.Add(uint8(2), []byte(`{"resource":"r","lockId":"b3duZXI="}`))
	f.Add(uint8(3), []byte(`{"resource":"r","durability":3}`))
	f.Add(uint8(0), []byte(`{"resource":"r","owner":"not base64!"}`))
	f.Add(uint8(0), []byte(`{"resource":"\ud800","owner":"AA=="}`))
	f.Add(uint8(0), []byte(`{"resource":"r"} trailing`))
	f.Add(uint8(3), []byte(`null`))
	f.Add(uint8(0), []byte(`{"expiresMs":99999999999}`))
	locker := newFake()
	h := NewServer(locker, ServerOptions{Logger: slog.New(slog.DiscardHandler)}).Handler()
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		p := restPaths[int(which)%len(restPaths)]
		req := httptest.NewRequest(http.MethodPost, p.path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		before := locker.served.Load()
		h.ServeHTTP(rec, req)
		var reply map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &reply); err != nil {
			t.Fatalf("%s %q: answer %d is not JSON: %q", p.path, body, rec.Code, rec.Body)
		}
		switch rec.Code {
		case http.StatusOK:
			typ, ok := reply["type"].(float64)
			if !ok || !knownStatus(lease.Status(typ)) {
				t.Fatalf("%s %q: answer without a known type: %v", p.path, body, reply)
			}
			var b restBody
			var err error
			if p.op == lease.Get {
				var g restGetBody
				err = json.Unmarshal(body, &g)
				b.Resource, b.Durability = g.Resource, g.Durability
			} else {
				err = json.Unmarshal(body, &b)
			}
			if err != nil {
				t.Fatalf("%s %q: answered 200 to a body encoding/json refuses: %v", p.path, body, err)
			}
			ttl := time.Duration(b.ExpiresMs) * time.Millisecond
			if p.op == lease.Unlock || p.op == lease.Get {
				ttl = 0
			}
			owner := b.Owner
			if p.op == lease.Get {
				owner = nil
			}
			if valid := lease.Valid(p.op, b.Resource, owner, ttl, lease.Durability(b.Durability)); valid == (lease.Status(typ) == lease.InvalidInput) {
				t.Fatalf("%s %q: valid=%v, answered %v", p.path, body, valid, lease.Status(typ))
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			if _, ok := reply["error"].(string); !ok {
				t.Fatalf("%s %q: %d without an error message: %v", p.path, body, rec.Code, reply)
			}
			if locker.served.Load() != before {
				t.Fatalf("%s %q: refused with %d but reached the Locker", p.path, body, rec.Code)
			}
		default:
			t.Fatalf("%s %q: HTTP %d %q", p.path, body, rec.Code, rec.Body)
		}
	})
}
