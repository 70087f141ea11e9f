package transport

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/kahunago/kahuna/lease"
)

// These tests speak the wire by hand: request bytes built field by field
// with protowire, the exact method names, responses decoded field by
// field. They pin what an unmodified Kahuna client sends and expects,
// independently of our generated code.

// rawCodec passes message bytes through untouched.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*(v.(*[]byte)) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

func rawConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func rawInvoke(t *testing.T, conn *grpc.ClientConn, method string, req []byte) wireMsg {
	t.Helper()
	var resp []byte
	if err := conn.Invoke(testCtx(t), method, req, &resp); err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	return decodeWire(t, resp)
}

// Wire builders.
func wStr(n protowire.Number, s string) []byte {
	return protowire.AppendString(protowire.AppendTag(nil, n, protowire.BytesType), s)
}

func wBytes(n protowire.Number, b []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, n, protowire.BytesType), b)
}

func wVarint(n protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, n, protowire.VarintType), v)
}

func wMsg(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// wireMsg is a decoded message: field number → raw value (varint or bytes).
type wireMsg map[protowire.Number]wireVal

type wireVal struct {
	typ protowire.Type
	v   uint64
	b   []byte
}

func decodeWire(t *testing.T, b []byte) wireMsg {
	t.Helper()
	m := wireMsg{}
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			t.Fatalf("bad tag: %v", protowire.ParseError(l))
		}
		b = b[l:]
		var val wireVal
		switch typ {
		case protowire.VarintType:
			val.v, l = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			val.b, l = protowire.ConsumeBytes(b)
		default:
			t.Fatalf("field %d: unexpected wire type %d", n, typ)
		}
		if l < 0 {
			t.Fatalf("field %d: %v", n, protowire.ParseError(l))
		}
		if _, dup := m[n]; dup {
			t.Fatalf("field %d twice", n)
		}
		val.typ = typ
		m[n] = val
		b = b[l:]
	}
	return m
}

// varint returns a varint field, 0 when absent (proto3 omits zeros).
func (m wireMsg) varint(t *testing.T, n protowire.Number) uint64 {
	t.Helper()
	v, ok := m[n]
	if ok && v.typ != protowire.VarintType {
		t.Fatalf("field %d is not a varint", n)
	}
	return v.v
}

func (m wireMsg) bytes(t *testing.T, n protowire.Number) ([]byte, bool) {
	t.Helper()
	v, ok := m[n]
	if ok && v.typ != protowire.BytesType {
		t.Fatalf("field %d is not length-delimited", n)
	}
	return v.b, ok
}

func (m wireMsg) sub(t *testing.T, n protowire.Number) wireMsg {
	t.Helper()
	b, ok := m.bytes(t, n)
	if !ok {
		t.Fatalf("field %d missing in %v", n, m)
	}
	return decodeWire(t, b)
}

// int64 reads a varint field as the int64 it encodes.
func (m wireMsg) int64(t *testing.T, n protowire.Number) int64 { return int64(m.varint(t, n)) }

// checkServedFrom pins field 1: present (Kahuna always sets it) and equal
// to the node's name.
func checkServedFrom(t *testing.T, m wireMsg, want string) {
	t.Helper()
	b, ok := m.bytes(t, 1)
	if !ok || string(b) != want {
		t.Fatalf("ServedFrom = %q (present %v), want %q present", b, ok, want)
	}
}

// Request builders with Kahuna's field numbers.
func wTryLock(resource, owner string, ms int32, d int) []byte {
	return wMsg(wStr(1, resource), wBytes(2, []byte(owner)), wVarint(3, uint64(ms)), wVarint(4, uint64(d)))
}

func wExtend(resource, owner string, ms int32, d int) []byte {
	return wMsg(wStr(1, resource), wBytes(2, []byte(owner)), wVarint(3, uint64(ms)), wVarint(4, uint64(d)))
}

func wUnlock(resource, owner string, d int) []byte {
	return wMsg(wStr(1, resource), wBytes(2, []byte(owner)), wVarint(3, uint64(d)))
}

func wGet(resource string, d int) []byte {
	return wMsg(wStr(1, resource), wVarint(2, uint64(d)))
}

func TestWireUnary(t *testing.T) {
	f := newFake()
	srv := startServer(t, forwardedTo{f, "http://node-7:2070"}, ServerOptions{NodeName: "node-7"})
	for name, addr := range map[string]string{"h2c": srv.mixed, "native": srv.native} {
		t.Run(name, func(t *testing.T) {
			conn := rawConn(t, addr)
			res := "wire/" + name
			call := func(method string, req []byte) wireMsg { return rawInvoke(t, conn, "/Locker/"+method, req) }

			// GetLock on nothing: only ServedFrom and Type travel.
			m := call("GetLock", wGet(res, 1))
			checkServedFrom(t, m, "http://node-7:2070")
			if got := m.varint(t, 2); got != 102 {
				t.Fatalf("GetLock type = %d, want 102 (LockDoesNotExist)", got)
			}
			for _, n := range []protowire.Number{3, 4, 5, 6, 7} {
				if _, ok := m[n]; ok {
					t.Fatalf("GetLock on no lock carries field %d: %v", n, m)
				}
			}

			m = call("TryLock", wTryLock(res, "A", 10000, 1))
			checkServedFrom(t, m, "http://node-7:2070")
			if typ, tok := m.varint(t, 2), m.int64(t, 3); typ != 0 || tok != 0 {
				t.Fatalf("TryLock = (%d, %d), want (0 Locked, 0)", typ, tok)
			}
			if typ := call("TryLock", wTryLock(res, "B", 10000, 1)).varint(t, 2); typ != 1 {
				t.Fatalf("TryLock by another owner = %d, want 1 (Busy)", typ)
			}

			// GetLock on a live lock: owner, expiry as unix ms, token.
			m = call("GetLock", wGet(res, 1))
			if typ := m.varint(t, 2); typ != 4 {
				t.Fatalf("GetLock type = %d, want 4 (Got)", typ)
			}
			if owner, ok := m.bytes(t, 3); !ok || string(owner) != "A" {
				t.Fatalf("GetLock owner = %q, %v", owner, ok)
			}
			if got, want := m.int64(t, 5), f.clock().Add(10*time.Second).UnixMilli(); got != want {
				t.Fatalf("ExpiresPhysical = %d, want %d", got, want)
			}
			if n, c := m.varint(t, 4), m.varint(t, 6); n != 0 || c != 0 {
				t.Fatalf("ExpiresNode/Counter = %d/%d, want 0/0", n, c)
			}

			m = call("TryExtendLock", wExtend(res, "A", 5000, 1))
			if typ, tok := m.varint(t, 2), m.int64(t, 3); typ != 2 || tok != 0 {
				t.Fatalf("TryExtendLock = (%d, %d), want (2 Extended, 0)", typ, tok)
			}
			checkServedFrom(t, m, "http://node-7:2070")
			if typ := call("TryExtendLock", wExtend(res, "B", 5000, 1)).varint(t, 2); typ != 103 {
				t.Fatalf("TryExtendLock by another owner = %d, want 103 (InvalidOwner)", typ)
			}
			m = call("Unlock", wUnlock(res, "A", 1))
			checkServedFrom(t, m, "http://node-7:2070")
			if typ := m.varint(t, 2); typ != 3 {
				t.Fatalf("Unlock = %d, want 3 (Unlocked)", typ)
			}
			if _, ok := m[3]; ok {
				t.Fatalf("Unlock response has a field 3: %v", m)
			}
			if typ := call("Unlock", wUnlock(res, "A", 1)).varint(t, 2); typ != 102 {
				t.Fatalf("second Unlock = %d, want 102", typ)
			}
			// The next grant bumps the token: 1 travels in field 3.
			if tok := call("TryLock", wTryLock(res, "B", 10000, 1)).int64(t, 3); tok != 1 {
				t.Fatalf("token after unlock = %d, want 1", tok)
			}
			// Durability travels in field 4 (TryLock): the ephemeral
			// namespace is separate.
			if tok := call("TryLock", wTryLock(res, "C", 10000, 0)); tok.varint(t, 2) != 0 || tok.int64(t, 3) != 0 {
				t.Fatalf("ephemeral TryLock = %v, want Locked token 0", tok)
			}
		})
	}
}

func TestWireInvalidInput(t *testing.T) {
	f := newFake()
	srv := startServer(t, f, ServerOptions{})
	conn := rawConn(t, srv.mixed)
	big := string(make([]byte, lease.MaxResourceBytes+1))
	cases := []struct {
		method string
		req    []byte
	}{
		{"TryLock", wTryLock("", "A", 1000, 0)},
		{"TryLock", wTryLock("r", "", 1000, 0)},
		{"TryLock", wTryLock("r", "A", 0, 0)},
		{"TryLock", wTryLock("r", "A", -1, 0)},
		{"TryLock", wTryLock("r", "A", 1000, 2)},
		{"TryLock", wTryLock(big, "A", 1000, 0)},
		{"TryLock", wMsg(wStr(1, "r"), wVarint(3, 1000))}, // no owner at all
		{"TryExtendLock", wMsg(wStr(1, "r"), wVarint(3, 1000))},
		{"TryExtendLock", wExtend("r", "A", 0, 1)},
		{"Unlock", wMsg(wStr(1, "r"))},
		{"Unlock", wUnlock("", "A", 1)},
		{"Unlock", wUnlock("r", "A", 7)},
		{"GetLock", wGet("", 0)},
		{"GetLock", wGet("r", 5)},
	}
	for i, c := range cases {
		m := rawInvoke(t, conn, "/Locker/"+c.method, c.req)
		if typ := m.varint(t, 2); typ != 100 {
			t.Errorf("case %d %s: type %d, want 100 (InvalidInput)", i, c.method, typ)
		}
		if _, ok := m[3]; ok && c.method != "Unlock" {
			t.Errorf("case %d %s: carries field 3 (%v)", i, c.method, m)
		}
	}
	if n := f.served.Load(); n != 0 {
		t.Fatalf("%d invalid requests reached the Locker", n)
	}
}

// batch envelope: Type=1, RequestId=2, payload field 3..6.
func wEnvelope(typ, id int, payloadField protowire.Number, payload []byte) []byte {
	// int32 travels sign-extended: -3 is a ten-byte varint.
	b := wMsg(wVarint(1, uint64(typ)), wVarint(2, uint64(int64(int32(id)))))
	if payload != nil {
		b = append(b, wBytes(payloadField, payload)...)
	}
	return b
}

func rawStream(t *testing.T, conn *grpc.ClientConn, method string) grpc.ClientStream {
	t.Helper()
	st, err := conn.NewStream(testCtx(t), &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, method)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func recvWire(t *testing.T, st grpc.ClientStream) wireMsg {
	t.Helper()
	var b []byte
	if err := st.RecvMsg(&b); err != nil {
		t.Fatalf("RecvMsg: %v", err)
	}
	return decodeWire(t, b)
}

func TestWireBatchOutOfOrder(t *testing.T) {
	for _, method := range []string{"/Locker/BatchClientLockRequests", "/Locker/BatchServerLockRequests"} {
		t.Run(method, func(t *testing.T) {
			f := newFake()
			g := newGate("slow")
			f.hook = g.hook
			srv := startServer(t, forwardedTo{f, "http://n1:2070"}, ServerOptions{NodeName: "n1"})
			st := rawStream(t, rawConn(t, srv.mixed), method)

			// 1 is parked in the Locker; 2, -3 and 4 are answered meanwhile
			// (one at a time: the stream serves concurrently, so their
			// relative order would otherwise be open).
			must(t, st.SendMsg(wEnvelope(1, 1, 3, wTryLock("slow", "A", 1000, 0))))
			<-g.arrived
			got := map[uint64]wireMsg{}
			for _, env := range [][]byte{
				wEnvelope(1, 2, 3, wTryLock("fast", "A", 1000, 0)),
				wEnvelope(2, -3, 5, wExtend("fast", "A", 2000, 0)),
				wEnvelope(4, 4, 6, wGet("fast", 0)),
			} {
				must(t, st.SendMsg(env))
				m := recvWire(t, st)
				got[m.varint(t, 2)] = m
			}
			close(g.release)
			first := recvWire(t, st)
			if id := first.varint(t, 2); id != 1 {
				t.Fatalf("last answer has RequestId %d, want 1 (the parked one)", id)
			}
			if typ := first.varint(t, 1); typ != 1 {
				t.Fatalf("answer Type = %d, want 1 (TRY_LOCK echoed)", typ)
			}
			if typ := first.sub(t, 3).varint(t, 2); typ != 0 {
				t.Fatalf("parked TryLock answered %d", typ)
			}
			if typ := got[2].sub(t, 3).varint(t, 2); typ != 0 {
				t.Fatalf("id 2 TryLock = %d, want Locked", typ)
			}
			minus3 := int64(-3)
			ext := got[uint64(minus3)]
			if ext == nil || ext.varint(t, 1) != 2 || ext.sub(t, 5).varint(t, 2) != 2 {
				t.Fatalf("id -3 Extend answer = %v, want Type 2 with ExtendLock Extended", ext)
			}
			get := got[4].sub(t, 6)
			if get.varint(t, 2) != 4 || string(must1(get.bytes(t, 3))) != "A" {
				t.Fatalf("id 4 Get answer = %v", get)
			}
			checkServedFrom(t, get, "http://n1:2070")
			must(t, st.CloseSend())
		})
	}
}

func must1[T any](v T, _ bool) T { return v }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestWireBatchBadEnvelopes(t *testing.T) {
	f := newFake()
	srv := startServer(t, f, ServerOptions{})
	st := rawStream(t, rawConn(t, srv.native), "/Locker/BatchClientLockRequests")
	cases := []struct {
		env          []byte
		answerField  protowire.Number // the payload the answer carries
		describeCase string
	}{
		{wEnvelope(0, 10, 3, wTryLock("r", "A", 1000, 0)), 3, "TYPE_NONE with a TryLock payload"},
		{wEnvelope(0, 11, 0, nil), 3, "TYPE_NONE without payload"},
		{wEnvelope(0, 12, 4, wUnlock("r", "A", 0)), 4, "TYPE_NONE with an Unlock payload"},
		{wEnvelope(3, 13, 3, wTryLock("r", "A", 1000, 0)), 4, "UNLOCK with a TryLock payload"},
		{wEnvelope(4, 14, 0, nil), 6, "GET_LOCK without payload"},
		{wEnvelope(2, 15, 6, wGet("r", 0)), 5, "EXTEND_LOCK with a GetLock payload"},
		{wEnvelope(9, 16, 5, wExtend("r", "A", 1000, 0)), 5, "unknown type 9 with an ExtendLock payload"},
	}
	for _, c := range cases {
		must(t, st.SendMsg(c.env))
	}
	seen := map[uint64]bool{}
	for range cases {
		m := recvWire(t, st)
		id := m.varint(t, 2)
		if id < 10 || id >= 10+uint64(len(cases)) {
			t.Fatalf("answer for unknown RequestId %d", id)
		}
		c := cases[id-10]
		seen[id] = true
		if typ := m.sub(t, c.answerField).varint(t, 2); typ != 100 {
			t.Errorf("%s: answered %d in field %d, want 100", c.describeCase, typ, c.answerField)
		}
	}
	if len(seen) != len(cases) {
		t.Fatalf("answered ids %v", seen)
	}
	if n := f.served.Load(); n != 0 {
		t.Fatalf("%d bad envelopes reached the Locker", n)
	}
}

func TestWireForwardedStreamUsesForwardedLocker(t *testing.T) {
	main, fwd := newFake(), newFake()
	srv := startServer(t, main, ServerOptions{Forwarded: fwd})
	conn := rawConn(t, srv.native)

	st := rawStream(t, conn, "/Locker/BatchServerLockRequests")
	must(t, st.SendMsg(wEnvelope(1, 1, 3, wTryLock("r", "A", 1000, 1))))
	if m := recvWire(t, st); m.sub(t, 3).varint(t, 2) != 0 {
		t.Fatalf("forwarded TryLock = %v", m)
	}
	if main.served.Load() != 0 || fwd.served.Load() != 1 {
		t.Fatalf("served main=%d forwarded=%d, want 0 and 1", main.served.Load(), fwd.served.Load())
	}
	// The client stream and unary calls use the main Locker.
	st = rawStream(t, conn, "/Locker/BatchClientLockRequests")
	must(t, st.SendMsg(wEnvelope(1, 1, 3, wTryLock("r", "A", 1000, 1))))
	recvWire(t, st)
	rawInvoke(t, conn, "/Locker/GetLock", wGet("r", 1))
	if main.served.Load() != 2 || fwd.served.Load() != 1 {
		t.Fatalf("served main=%d forwarded=%d, want 2 and 1", main.served.Load(), fwd.served.Load())
	}
}

func TestWirePanicAnswersErrored(t *testing.T) {
	f := newFake()
	f.hook = func(_ context.Context, _ lease.Op, resource string) (lease.Status, error, bool) {
		if resource == "boom" {
			panic("handler bug")
		}
		return 0, nil, false
	}
	srv := startServer(t, f, ServerOptions{})
	conn := rawConn(t, srv.mixed)
	// The Locker may have acted before it panicked: outcome unknown.
	if typ := rawInvoke(t, conn, "/Locker/TryLock", wTryLock("boom", "A", 1000, 0)).varint(t, 2); typ != 99 {
		t.Fatalf("unary panic answered %d, want 99 (Errored)", typ)
	}
	for _, method := range []string{"/Locker/BatchClientLockRequests", "/Locker/BatchServerLockRequests"} {
		st := rawStream(t, conn, method)
		must(t, st.SendMsg(wEnvelope(1, 5, 3, wTryLock("boom", "A", 1000, 0))))
		m := recvWire(t, st)
		if m.varint(t, 2) != 5 || m.varint(t, 1) != 1 || m.sub(t, 3).varint(t, 2) != 99 {
			t.Fatalf("%s: panic answered %v, want id 5 TRY_LOCK Errored", method, m)
		}
		// The stream lives on.
		must(t, st.SendMsg(wEnvelope(1, 6, 3, wTryLock("fine", "A", 1000, 0))))
		if m := recvWire(t, st); m.varint(t, 2) != 6 || m.sub(t, 3).varint(t, 2) != 0 {
			t.Fatalf("%s: after the panic: %v", method, m)
		}
	}
}

func TestWireEnumValues(t *testing.T) {
	// Every status the Locker can return travels as its number.
	f := newFake()
	statuses := []lease.Status{lease.Locked, lease.Busy, lease.Extended, lease.Unlocked, lease.Got,
		lease.WaitingForReplication, lease.Errored, lease.InvalidInput, lease.MustRetry,
		lease.LockDoesNotExist, lease.InvalidOwner, lease.Aborted}
	f.hook = func(_ context.Context, _ lease.Op, resource string) (lease.Status, error, bool) {
		var i int
		fmt.Sscanf(resource, "s%d", &i)
		return statuses[i], nil, true
	}
	srv := startServer(t, f, ServerOptions{})
	conn := rawConn(t, srv.native)
	for i, want := range statuses {
		m := rawInvoke(t, conn, "/Locker/TryLock", wTryLock(fmt.Sprintf("s%d", i), "A", 1000, 0))
		if got := m.varint(t, 2); got != uint64(want) {
			t.Errorf("%v travels as %d, want %d", want, got, int32(want))
		}
	}
}

// TestServedFromLocalIsEmpty: an answer the node served itself carries
// ServedFrom present and empty, as Kahuna sends it, on every surface of
// the wire (unary, batch stream, REST), whatever NodeName says; the native
// service names the node.
func TestServedFromLocalIsEmpty(t *testing.T) {
	srv := startServer(t, newFake(), ServerOptions{NodeName: "7"})
	conn := rawConn(t, srv.mixed)
	checkServedFrom(t, rawInvoke(t, conn, "/Locker/TryLock", wTryLock("local", "A", 1000, 0)), "")
	st := rawStream(t, conn, "/Locker/BatchClientLockRequests")
	must(t, st.SendMsg(wEnvelope(4, 1, 6, wGet("local", 0))))
	checkServedFrom(t, recvWire(t, st).sub(t, 6), "")
	must(t, st.CloseSend())
	m := newREST(t, srv.mixed).post("/v1/locks/get-info", `{"resource":"local","durability":0}`)
	if v, ok := m["servedFrom"]; !ok || v != "" {
		t.Fatalf("REST get-info: %v, want servedFrom present and empty", m)
	}
}
