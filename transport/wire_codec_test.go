package transport

import (
	"bytes"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/kahunago/kahuna/lease"
	pb "github.com/kahunago/kahuna/transport/lockspb"
)

// The hand-written batch codec (wire.go) against the generated code: for
// the same bytes, the same outcome (error or not) and the same values; for
// the same answer or request, the same bytes.

// refEnvelope is what the batch request messages share.
type refEnvelope interface {
	GetRequestId() int32
	GetTryLock() *pb.GrpcTryLockRequest
	GetExtendLock() *pb.GrpcExtendLockRequest
	GetUnlock() *pb.GrpcUnlockRequest
	GetGetLock() *pb.GrpcGetLockRequest
}

// refRequest reads a request out of a generated batch message, as the
// server did before the hand-written codec.
func refRequest(typ int32, m refEnvelope) (lease.Request, bool) {
	op, known := batchOp(typ)
	if known {
		switch op {
		case lease.TryLock:
			if p := m.GetTryLock(); p != nil {
				return tryLockRequest(p), true
			}
		case lease.Extend:
			if p := m.GetExtendLock(); p != nil {
				return extendRequest(p), true
			}
		case lease.Unlock:
			if p := m.GetUnlock(); p != nil {
				return unlockRequest(p), true
			}
		case lease.Get:
			if p := m.GetGetLock(); p != nil {
				return getRequest(p), true
			}
		}
	} else {
		switch {
		case m.GetExtendLock() != nil:
			op = lease.Extend
		case m.GetUnlock() != nil:
			op = lease.Unlock
		case m.GetGetLock() != nil:
			op = lease.Get
		}
	}
	return lease.Request{Op: op}, false
}

// refResponse builds the generated answer, as the server did.
func refResponse(typ, id int32, op lease.Op, servedFrom string, info lease.LockInfo, res lease.Result) *pb.GrpcBatchClientLockResponse {
	out := &pb.GrpcBatchClientLockResponse{Type: pb.GrpcClientBatchType(typ), RequestId: id}
	switch op {
	case lease.TryLock:
		out.Payload = &pb.GrpcBatchClientLockResponse_TryLock{TryLock: tryLockResponse(&servedFrom, res)}
	case lease.Extend:
		out.Payload = &pb.GrpcBatchClientLockResponse_ExtendLock{ExtendLock: extendResponse(&servedFrom, res)}
	case lease.Unlock:
		out.Payload = &pb.GrpcBatchClientLockResponse_Unlock{Unlock: unlockResponse(&servedFrom, res)}
	case lease.Get:
		out.Payload = &pb.GrpcBatchClientLockResponse_GetLock{GetLock: getResponse(&servedFrom, info, res)}
	}
	return out
}

// refDecode reads a generated answer for a call of op, as the client did.
func refDecode(op lease.Op, m *pb.GrpcBatchClientLockResponse) (reply, error) {
	var r reply
	switch op {
	case lease.TryLock:
		p := m.GetTryLock()
		if p == nil {
			return r, errWrongPayload
		}
		r.res = lease.Result{Status: lease.Status(p.GetType()), FencingToken: p.GetFencingToken(), ServedFrom: p.GetServedFrom()}
	case lease.Extend:
		p := m.GetExtendLock()
		if p == nil {
			return r, errWrongPayload
		}
		r.res = lease.Result{Status: lease.Status(p.GetType()), FencingToken: p.GetFencingToken(), ServedFrom: p.GetServedFrom()}
	case lease.Unlock:
		p := m.GetUnlock()
		if p == nil {
			return r, errWrongPayload
		}
		r.res = lease.Result{Status: lease.Status(p.GetType()), ServedFrom: p.GetServedFrom()}
	case lease.Get:
		p := m.GetGetLock()
		if p == nil {
			return r, errWrongPayload
		}
		r.res = lease.Result{Status: lease.Status(p.GetType()), ServedFrom: p.GetServedFrom()}
		if r.res.Status == lease.Got {
			r.res.FencingToken = p.GetFencingToken()
			r.info = lease.LockInfo{Owner: p.GetOwner(), Expires: time.UnixMilli(p.GetExpiresPhysical()), FencingToken: p.GetFencingToken()}
		}
	}
	return r, nil
}

// Random values, biased to the edges.
func rInt32(r *rand.Rand) int32 {
	switch r.IntN(6) {
	case 0:
		return 0
	case 1:
		return int32(r.IntN(8))
	case 2:
		return -int32(r.IntN(3)) - 1
	case 3:
		return math.MaxInt32
	case 4:
		return math.MinInt32
	}
	return r.Int32()
}

func rInt64(r *rand.Rand) int64 {
	switch r.IntN(5) {
	case 0:
		return 0
	case 1:
		return int64(r.IntN(100))
	case 2:
		return -1
	case 3:
		return math.MaxInt64
	}
	return r.Int64()
}

func rString(r *rand.Rand) string {
	switch r.IntN(6) {
	case 0:
		return ""
	case 1:
		return "res/ü€"
	case 2:
		return string(bytes.Repeat([]byte("x"), 200+r.IntN(100)))
	}
	return "k" + string(rune('a'+r.IntN(26)))
}

func rBytes(r *rand.Rand) []byte {
	switch r.IntN(5) {
	case 0:
		return nil
	case 1:
		return []byte{}
	case 2:
		return []byte{0xff, 0x00, 0xfe}
	}
	return []byte("owner-" + string(rune('a'+r.IntN(26))))
}

func rPayload(r *rand.Rand) (env *pb.GrpcBatchClientLockRequest) {
	env = &pb.GrpcBatchClientLockRequest{Type: pb.GrpcClientBatchType(r.IntN(6)), RequestId: rInt32(r)}
	if r.IntN(10) == 0 {
		env.Type = pb.GrpcClientBatchType(rInt32(r))
	}
	d := pb.GrpcLockDurability(r.IntN(3))
	switch r.IntN(5) {
	case 0:
		env.Payload = &pb.GrpcBatchClientLockRequest_TryLock{TryLock: &pb.GrpcTryLockRequest{Resource: rString(r), Owner: rBytes(r), ExpiresMs: rInt32(r), Durability: d}}
	case 1:
		env.Payload = &pb.GrpcBatchClientLockRequest_ExtendLock{ExtendLock: &pb.GrpcExtendLockRequest{Resource: rString(r), Owner: rBytes(r), ExpiresMs: rInt32(r), Durability: d}}
	case 2:
		env.Payload = &pb.GrpcBatchClientLockRequest_Unlock{Unlock: &pb.GrpcUnlockRequest{Resource: rString(r), Owner: rBytes(r), Durability: d}}
	case 3:
		env.Payload = &pb.GrpcBatchClientLockRequest_GetLock{GetLock: &pb.GrpcGetLockRequest{Resource: rString(r), Durability: d}}
	}
	return env
}

func rResponse(r *rand.Rand) *pb.GrpcBatchClientLockResponse {
	typ, id := int32(r.IntN(6)), rInt32(r)
	ops := []lease.Op{lease.TryLock, lease.Extend, lease.Unlock, lease.Get}
	op := ops[r.IntN(len(ops))]
	statuses := []lease.Status{lease.Locked, lease.Busy, lease.Extended, lease.Unlocked, lease.Got, lease.InvalidInput, lease.MustRetry, lease.LockDoesNotExist, lease.Errored}
	res := lease.Result{Status: statuses[r.IntN(len(statuses))], FencingToken: rInt64(r)}
	info := lease.LockInfo{Owner: rBytes(r), Expires: time.UnixMilli(rInt64(r) >> 20), FencingToken: res.FencingToken}
	m := refResponse(typ, id, op, []string{"", "1", "node-ü"}[r.IntN(3)], info, res)
	if r.IntN(8) == 0 {
		m.Payload = nil
	}
	if g := m.GetGetLock(); g != nil && r.IntN(3) == 0 {
		g.ExpiresNode, g.ExpiresCounter = rInt32(r), uint32(rInt32(r))
	}
	return m
}

// mutate derives odd but possibly valid encodings from b: extra unknown
// fields (groups too), repeated and merged fields, wrong wire types,
// truncations, flipped bytes, concatenations.
func mutate(r *rand.Rand, b, other []byte) []byte {
	b = bytes.Clone(b)
	for range r.IntN(3) + 1 {
		switch r.IntN(12) {
		case 0: // unknown varint field
			b = protowire.AppendVarint(protowire.AppendTag(b, protowire.Number(7+r.IntN(100)), protowire.VarintType), r.Uint64())
		case 1: // unknown group
			n := protowire.Number(7 + r.IntN(5))
			b = protowire.AppendTag(b, n, protowire.StartGroupType)
			b = protowire.AppendVarint(protowire.AppendTag(b, 1, protowire.VarintType), 5)
			b = protowire.AppendTag(b, n, protowire.EndGroupType)
		case 2: // known number, wrong wire type
			n := protowire.Number(1 + r.IntN(6))
			if r.IntN(2) == 0 {
				b = protowire.AppendBytes(protowire.AppendTag(b, n, protowire.BytesType), []byte{1, 2})
			} else {
				b = protowire.AppendFixed32(protowire.AppendTag(b, n, protowire.Fixed32Type), 7)
			}
		case 3: // concatenation = merge
			b = append(b, other...)
		case 4: // truncation
			if len(b) > 0 {
				b = b[:r.IntN(len(b))]
			}
		case 5: // flipped byte
			if len(b) > 0 {
				b[r.IntN(len(b))] ^= byte(1 << r.IntN(8))
			}
		case 6: // a payload with a nested oddity
			var p []byte
			p = protowire.AppendString(protowire.AppendTag(p, 1, protowire.BytesType), rString(r))
			p = protowire.AppendFixed64(protowire.AppendTag(p, protowire.Number(1+r.IntN(7)), protowire.Fixed64Type), 9)
			p = protowire.AppendVarint(protowire.AppendTag(p, protowire.Number(1+r.IntN(7)), protowire.VarintType), r.Uint64())
			p = protowire.AppendBytes(protowire.AppendTag(p, protowire.Number(1+r.IntN(7)), protowire.BytesType), rBytes(r))
			b = protowire.AppendBytes(protowire.AppendTag(b, protowire.Number(3+r.IntN(4)), protowire.BytesType), p)
		case 7: // invalid UTF-8 in a string
			p := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte{0xc3, 0x28})
			b = protowire.AppendBytes(protowire.AppendTag(b, protowire.Number(3+r.IntN(4)), protowire.BytesType), p)
		case 8: // bad tags
			b = append(b, []byte{0x00, 0x04, 0x0c, 0xff, 0x07}[r.IntN(5)])
		case 9: // overlong varint
			b = append(b, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02)
		case 10: // a huge field number
			b = protowire.AppendVarint(b, uint64(protowire.MaxValidNumber+1)<<3)
		case 11: // random bytes
			for range r.IntN(4) + 1 {
				b = append(b, byte(r.IntN(256)))
			}
		}
	}
	return b
}

// checkRequestDecode compares both decoders on b, for both batch streams.
func checkRequestDecode(t *testing.T, b []byte) {
	t.Helper()
	var m batchMsg
	err := m.unmarshal(b)
	var gc pb.GrpcBatchClientLockRequest
	gerr := proto.Unmarshal(b, &gc)
	var gs pb.GrpcBatchServerLockRequest
	serr := proto.Unmarshal(b, &gs)
	if (err == nil) != (gerr == nil) || (gerr == nil) != (serr == nil) {
		t.Fatalf("%x: hand-written error %v, generated %v / %v", b, err, gerr, serr)
	}
	if err != nil {
		return
	}
	got, gok := m.request()
	for _, want := range []struct {
		typ, id int32
		env     refEnvelope
	}{{int32(gc.GetType()), gc.GetRequestId(), &gc}, {int32(gs.GetType()), gs.GetRequestId(), &gs}} {
		w, wok := refRequest(want.typ, want.env)
		if m.typ != want.typ || m.id != want.id || gok != wok || got.Op != w.Op || got.Resource != w.Resource ||
			!bytes.Equal(got.Owner, w.Owner) || (got.Owner == nil) != (w.Owner == nil) || got.TTL != w.TTL || got.Durability != w.Durability {
			t.Fatalf("%x: hand-written %d/%d %+v %v, generated %d/%d %+v %v", b, m.typ, m.id, got, gok, want.typ, want.id, w, wok)
		}
	}
}

// checkReplyDecode compares both client-side decoders on b, for a call of
// every op.
func checkReplyDecode(t *testing.T, b []byte) {
	t.Helper()
	var r batchReply
	r.lastServedFrom = "1"
	err := r.unmarshal(b)
	var g pb.GrpcBatchClientLockResponse
	gerr := proto.Unmarshal(b, &g)
	var gs pb.GrpcBatchServerLockResponse
	serr := proto.Unmarshal(b, &gs)
	if (err == nil) != (gerr == nil) || (gerr == nil) != (serr == nil) {
		t.Fatalf("%x: hand-written error %v, generated %v / %v", b, err, gerr, serr)
	}
	if err != nil {
		return
	}
	if r.id != g.GetRequestId() || r.typ != int32(g.GetType()) {
		t.Fatalf("%x: envelope %d/%d, generated %d/%d", b, r.typ, r.id, g.GetType(), g.GetRequestId())
	}
	for _, op := range []lease.Op{lease.TryLock, lease.Extend, lease.Unlock, lease.Get} {
		c := &call{op: op}
		err := c.decode(&r)
		want, werr := refDecode(op, &g)
		if err != werr || !reflect.DeepEqual(c.reply.res, want.res) || !bytes.Equal(c.reply.info.Owner, want.info.Owner) ||
			(c.reply.info.Owner == nil) != (want.info.Owner == nil) || !c.reply.info.Expires.Equal(want.info.Expires) ||
			c.reply.info.FencingToken != want.info.FencingToken {
			t.Fatalf("%x as %v: hand-written %+v %v, generated %+v %v", b, op, c.reply, err, want, werr)
		}
	}
}

func TestWireCodecMatchesGenerated(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	det := proto.MarshalOptions{Deterministic: true}
	for i := range 40_000 {
		// Requests: the client's encoding, then the server's decoding.
		env := rPayload(r)
		want, err := det.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		checkRequestDecode(t, want)
		other, _ := det.Marshal(rPayload(r))
		checkRequestDecode(t, mutate(r, want, other))
		if op, ok := batchOp(int32(env.GetType())); ok {
			if req, rok := refRequest(int32(env.GetType()), env); rok && lease.Valid(req.Op, req.Resource, req.Owner, req.TTL, req.Durability) && op == req.Op {
				got := appendRequest(nil, env.GetRequestId(), req.Op, req.Resource, req.Owner, req.TTL, req.Durability)
				if !bytes.Equal(got, want) {
					t.Fatalf("request %v: hand-written %x, generated %x", env, got, want)
				}
			}
		}

		// Answers: the server's encoding, then the client's decoding.
		resp := rResponse(r)
		wantResp, err := det.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		checkReplyDecode(t, wantResp)
		otherResp, _ := det.Marshal(rResponse(r))
		checkReplyDecode(t, mutate(r, wantResp, otherResp))
		if i%4 == 0 {
			checkReplyDecode(t, mutate(r, mutate(r, wantResp, want), otherResp))
		}
	}
}

func TestWireAnswerMatchesGenerated(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	det := proto.MarshalOptions{Deterministic: true}
	ops := []lease.Op{lease.TryLock, lease.Extend, lease.Unlock, lease.Get}
	statuses := []lease.Status{lease.Locked, lease.Busy, lease.Extended, lease.Unlocked, lease.Got, lease.InvalidInput, lease.MustRetry, lease.LockDoesNotExist, lease.Errored, lease.Status(-1)}
	for range 20_000 {
		m := batchMsg{typ: rInt32(r), id: rInt32(r), op: ops[r.IntN(len(ops))], servedFrom: []string{"", "1", "node-ü", string(bytes.Repeat([]byte("n"), 300))}[r.IntN(4)]}
		m.res = lease.Result{Status: statuses[r.IntN(len(statuses))], FencingToken: rInt64(r)}
		m.info = lease.LockInfo{Owner: rBytes(r), Expires: time.UnixMilli(rInt64(r) >> 20), FencingToken: rInt64(r)}
		got, err := m.marshalResponse()
		if err != nil {
			t.Fatal(err)
		}
		want, err := det.Marshal(refResponse(m.typ, m.id, m.op, m.servedFrom, m.info, m.res))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%+v: hand-written %x, generated %x", m, got, want)
		}
	}
	// A node name that is not UTF-8 cannot be sent, as with the generated code.
	m := batchMsg{op: lease.TryLock, servedFrom: "\xff"}
	if _, err := m.marshalResponse(); err == nil {
		t.Fatal("invalid UTF-8 ServedFrom encoded")
	}
	if _, err := det.Marshal(refResponse(0, 0, lease.TryLock, "\xff", lease.LockInfo{}, lease.Result{})); err == nil {
		t.Fatal("generated code encoded invalid UTF-8")
	}
}

// FuzzWireDecode: go test -run X -fuzz FuzzWireDecode ./transport
func FuzzWireDecode(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 50 {
		b, _ := proto.Marshal(rPayload(r))
		f.Add(b)
		b, _ = proto.Marshal(rResponse(r))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkRequestDecode(t, b)
		checkReplyDecode(t, b)
	})
}

// TestWireDecodeCopies: decoded values do not alias the received bytes,
// which grpc recycles once the codec returns.
func TestWireDecodeCopies(t *testing.T) {
	req, _ := proto.Marshal(&pb.GrpcBatchClientLockRequest{Type: 1, RequestId: 7,
		Payload: &pb.GrpcBatchClientLockRequest_TryLock{TryLock: &pb.GrpcTryLockRequest{Resource: "r", Owner: []byte("o"), ExpiresMs: 5}}})
	var m batchMsg
	must(t, m.unmarshal(req))
	clear(req)
	if m.resource != "r" || string(m.owner) != "o" {
		t.Fatalf("request aliases its buffer: %q %q", m.resource, m.owner)
	}
	resp, _ := proto.Marshal(refResponse(4, 7, lease.Get, "n", lease.LockInfo{Owner: []byte("o"), FencingToken: 3}, lease.Result{Status: lease.Got}))
	var r batchReply
	must(t, r.unmarshal(resp))
	clear(resp)
	if r.servedFrom != "n" || string(r.owner) != "o" {
		t.Fatalf("answer aliases its buffer: %q %q", r.servedFrom, r.owner)
	}
}
