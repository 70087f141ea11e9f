package transport

import (
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/kahunago/kahuna/lease"
)

// The batch streams' messages, encoded and decoded by hand.
//
// Every lock call crosses the wire as one batch envelope each way, and a
// profile of a loaded node and its client showed the generated code's
// reflective (un)marshalling, and the messages it allocates, among the
// largest costs of a call. These functions do the same work on flat
// structs. They follow protobuf-go (v1.36) exactly, as the tests check
// against the generated code (vtprotobuf's generated decoders, as fast to
// within a few percent of a call, do not: docs/benchmarks-log.md):
//
//   - decoding: a bad tag, a truncated value, a field number outside
//     1..2^29-1, a stray end-group or an invalid UTF-8 string field
//     (proto3) fails the message; a known field with another wire type is
//     skipped as unknown, like unknown fields (groups included); a repeated
//     scalar keeps its last value; a oneof member that appears twice
//     merges, another member replaces it; int32 and enum values are the
//     low 32 bits of their varint;
//   - encoding: the generated code's bytes, fields in number order,
//     proto3 zero values omitted, optional fields when set, the oneof
//     member always.
//
// The two batch streams (client and server) share the envelope: the same
// field numbers, the same enum values and the same payloads.

// Envelope fields (GrpcBatch{Client,Server}Lock{Request,Response}).
const (
	fieldType      protowire.Number = 1
	fieldRequestID protowire.Number = 2
	fieldTryLock   protowire.Number = 3
	fieldUnlock    protowire.Number = 4
	fieldExtend    protowire.Number = 5
	fieldGet       protowire.Number = 6
)

var (
	errWireDecode = errors.New("transport: invalid wire-format data")
	errWireUTF8   = errors.New("transport: string field contains invalid UTF-8")
)

// payloadField is the envelope field carrying op's payload.
func payloadField(op lease.Op) protowire.Number {
	switch op {
	case lease.Extend:
		return fieldExtend
	case lease.Unlock:
		return fieldUnlock
	case lease.Get:
		return fieldGet
	}
	return fieldTryLock
}

// consumeTag reads a field's tag; n < 0 when protobuf-go would fail the
// message: a bad varint, a field number outside 1..2^29-1, or an end-group
// tag (no group is open at the message level).
func consumeTag(b []byte) (num protowire.Number, typ protowire.Type, n int) {
	v, n := protowire.ConsumeVarint(b)
	if n < 0 {
		return 0, 0, -1
	}
	if f := v >> 3; f < uint64(protowire.MinValidNumber) || f > uint64(protowire.MaxValidNumber) {
		return 0, 0, -1
	}
	typ = protowire.Type(v & 7)
	if typ == protowire.EndGroupType {
		return 0, 0, -1
	}
	return protowire.Number(v >> 3), typ, n
}

// skipField consumes an unknown (or mistyped) field's value.
func skipField(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
	n := protowire.ConsumeFieldValue(num, typ, b)
	if n < 0 {
		return 0, errWireDecode
	}
	return n, nil
}

// varintField consumes a varint value.
func varintField(b []byte) (uint64, int, error) {
	v, n := protowire.ConsumeVarint(b)
	if n < 0 {
		return 0, 0, errWireDecode
	}
	return v, n, nil
}

// bytesField consumes a length-delimited value, aliasing b.
func bytesField(b []byte) ([]byte, int, error) {
	v, n := protowire.ConsumeBytes(b)
	if n < 0 {
		return nil, 0, errWireDecode
	}
	return v, n, nil
}

// ---- Server side: requests in, answers out. ----

// batchMsg is one message of a batch stream on the server: the request as
// decoded, then the answer to encode. The server's codec decodes into it
// and encodes from it (see serverCodec).
type batchMsg struct {
	// The request.
	typ        int32            // Type, echoed in the answer
	id         int32            // RequestId, echoed in the answer
	payload    protowire.Number // the oneof member received, 0 if none
	resource   string
	owner      []byte // freshly allocated: the Locker may keep it
	expiresMs  int32  // TryLock and Extend
	durability int32

	// The answer.
	op         lease.Op
	res        lease.Result
	info       lease.LockInfo
	servedFrom string
}

// resetRequest clears the request's payload fields.
func (m *batchMsg) resetPayload() {
	m.resource, m.owner, m.expiresMs, m.durability = "", nil, 0, 0
}

// unmarshal decodes a GrpcBatch{Client,Server}LockRequest into m, which it
// resets first (as proto.Unmarshal does).
func (m *batchMsg) unmarshal(b []byte) error {
	*m = batchMsg{}
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return errWireDecode
		}
		b = b[n:]
		var err error
		switch {
		case (num == fieldType || num == fieldRequestID) && typ == protowire.VarintType:
			var v uint64
			v, n, err = varintField(b)
			if num == fieldType {
				m.typ = int32(v)
			} else {
				m.id = int32(v)
			}
		case num >= fieldTryLock && num <= fieldGet && typ == protowire.BytesType:
			var v []byte
			if v, n, err = bytesField(b); err == nil {
				if m.payload != num { // another member replaces; the same one merges
					m.resetPayload()
					m.payload = num
				}
				err = m.unmarshalPayload(num, v)
			}
		default:
			n, err = skipField(num, typ, b)
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// unmarshalPayload merges a request payload (field num of the envelope)
// into m:
//
//	GrpcTryLockRequest, GrpcExtendLockRequest: 1 Resource, 2 Owner, 3 ExpiresMs, 4 Durability
//	GrpcUnlockRequest:                         1 Resource, 2 Owner, 3 Durability
//	GrpcGetLockRequest:                        1 Resource, 2 Durability
func (m *batchMsg) unmarshalPayload(payload protowire.Number, b []byte) error {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return errWireDecode
		}
		b = b[n:]
		var err error
		switch {
		case num == 1 && typ == protowire.BytesType:
			var v []byte
			if v, n, err = bytesField(b); err == nil {
				if !utf8.Valid(v) {
					return errWireUTF8
				}
				m.resource = string(v)
			}
		case num == 2 && typ == protowire.BytesType && payload != fieldGet:
			var v []byte
			if v, n, err = bytesField(b); err == nil {
				if payload == fieldTryLock {
					m.owner = append([]byte(nil), v...) // proto3 bytes: empty decodes as nil
				} else {
					m.owner = append([]byte{}, v...) // optional bytes: present even if empty
				}
			}
		case typ == protowire.VarintType && durabilityField(payload) == num:
			var v uint64
			v, n, err = varintField(b)
			m.durability = int32(v)
		case num == 3 && typ == protowire.VarintType && (payload == fieldTryLock || payload == fieldExtend):
			var v uint64
			v, n, err = varintField(b)
			m.expiresMs = int32(v)
		default:
			n, err = skipField(num, typ, b)
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// durabilityField is the Durability field of a request payload.
func durabilityField(payload protowire.Number) protowire.Number {
	switch payload {
	case fieldUnlock:
		return 3
	case fieldGet:
		return 2
	}
	return 4
}

// request is what the message asks, as the generated messages were read:
// a message whose Type is TYPE_NONE or unknown, or whose payload is
// missing or of another op, is an empty request (answered InvalidInput),
// whose op is the one named by the Type, else by the payload, else
// TryLock; ok is false then. (Kahuna logs and drops such a message, which
// leaves its sender waiting forever.)
func (m *batchMsg) request() (_ lease.Request, ok bool) {
	op, known := batchOp(m.typ)
	if known {
		if m.payload != payloadField(op) {
			return lease.Request{Op: op}, false
		}
	} else {
		switch m.payload {
		case fieldExtend:
			op = lease.Extend
		case fieldUnlock:
			op = lease.Unlock
		case fieldGet:
			op = lease.Get
		}
		return lease.Request{Op: op}, false
	}
	r := lease.Request{Op: op, Resource: m.resource, Durability: lease.Durability(m.durability)}
	switch op {
	case lease.TryLock, lease.Extend:
		r.Owner, r.TTL = m.owner, msToTTL(m.expiresMs)
	case lease.Unlock:
		r.Owner = m.owner
	}
	return r, true
}

// responseSize is the size of the answer's payload message:
//
//	GrpcTryLockResponse, GrpcExtendLockResponse: 1 ServedFrom, 2 Type, 3 FencingToken
//	GrpcUnlockResponse:                          1 ServedFrom, 2 Type
//	GrpcGetLockResponse:                         1 ServedFrom, 2 Type, 3 Owner, 4 ExpiresNode,
//	                                             5 ExpiresPhysical, 6 ExpiresCounter, 7 FencingToken
//
// ServedFrom is always set (as Kahuna does); Get's lock details only for
// Got (see getResponse).
func (m *batchMsg) payloadSize() int {
	n := 1 + protowire.SizeBytes(len(m.servedFrom))
	if st := uint64(int32(m.res.Status)); st != 0 {
		n += 1 + protowire.SizeVarint(st)
	}
	switch m.op {
	case lease.TryLock, lease.Extend:
		if t := m.res.FencingToken; t != 0 {
			n += 1 + protowire.SizeVarint(uint64(t))
		}
	case lease.Get:
		if m.res.Status == lease.Got {
			if m.info.Owner != nil {
				n += 1 + protowire.SizeBytes(len(m.info.Owner))
			}
			if ms := m.info.Expires.UnixMilli(); ms != 0 {
				n += 1 + protowire.SizeVarint(uint64(ms))
			}
			if t := m.info.FencingToken; t != 0 {
				n += 1 + protowire.SizeVarint(uint64(t))
			}
		}
	}
	return n
}

// marshalResponse encodes the answer, a GrpcBatch{Client,Server}LockResponse:
// 1 Type and 2 RequestId echoed, the payload of m.op.
func (m *batchMsg) marshalResponse() ([]byte, error) { return m.appendMarshaledResponse(nil) }

// appendMarshaledResponse appends what marshalResponse returns to b.
func (m *batchMsg) appendMarshaledResponse(b []byte) ([]byte, error) {
	if !utf8.ValidString(m.servedFrom) {
		return nil, errWireUTF8 // as the generated code refuses it
	}
	size, psize := m.responseSize()
	return m.appendResponse(slices.Grow(b, size), psize), nil
}

// responseSize is the size of the encoded answer and of its payload.
func (m *batchMsg) responseSize() (size, psize int) {
	psize = m.payloadSize()
	size = 1 + protowire.SizeBytes(psize)
	if m.typ != 0 {
		size += 1 + protowire.SizeVarint(uint64(m.typ))
	}
	if m.id != 0 {
		size += 1 + protowire.SizeVarint(uint64(m.id))
	}
	return size, psize
}

// appendResponse appends the answer (see marshalResponse) to b, its
// payload psize bytes long.
func (m *batchMsg) appendResponse(b []byte, psize int) []byte {
	if m.typ != 0 {
		b = protowire.AppendVarint(append(b, byte(fieldType)<<3|byte(protowire.VarintType)), uint64(m.typ))
	}
	if m.id != 0 {
		b = protowire.AppendVarint(append(b, byte(fieldRequestID)<<3|byte(protowire.VarintType)), uint64(m.id))
	}
	b = append(b, byte(payloadField(m.op))<<3|byte(protowire.BytesType))
	b = protowire.AppendVarint(b, uint64(psize))
	b = protowire.AppendString(append(b, 1<<3|byte(protowire.BytesType)), m.servedFrom)
	if st := uint64(int32(m.res.Status)); st != 0 {
		b = protowire.AppendVarint(append(b, 2<<3|byte(protowire.VarintType)), st)
	}
	switch m.op {
	case lease.TryLock, lease.Extend:
		if t := m.res.FencingToken; t != 0 {
			b = protowire.AppendVarint(append(b, 3<<3|byte(protowire.VarintType)), uint64(t))
		}
	case lease.Get:
		if m.res.Status == lease.Got {
			if m.info.Owner != nil {
				b = protowire.AppendBytes(append(b, 3<<3|byte(protowire.BytesType)), m.info.Owner)
			}
			if ms := m.info.Expires.UnixMilli(); ms != 0 {
				b = protowire.AppendVarint(append(b, 5<<3|byte(protowire.VarintType)), uint64(ms))
			}
			if t := m.info.FencingToken; t != 0 {
				b = protowire.AppendVarint(append(b, 7<<3|byte(protowire.VarintType)), uint64(t))
			}
		}
	}
	return b
}

// ---- Packed messages: kahuna.v1's Batch stream. ----

// MaxBatchRequests is the most requests (or answers) one message of a
// Batch stream may carry; a message with more ends the stream with an
// error.
const MaxBatchRequests = 1024

var errTooManyRequests = fmt.Errorf("transport: a Batch message carries more than %d requests", MaxBatchRequests)

// packField is the repeated field of BatchRequests and BatchResponses.
const packField protowire.Number = 1

// batchPack is one message of a Batch stream on the server, a
// BatchRequests: its requests, each decoded into a pooled batchMsg.
type batchPack struct{ msgs []*batchMsg }

func (p *batchPack) reset() {
	clear(p.msgs)
	p.msgs = p.msgs[:0]
}

// unmarshal decodes a BatchRequests. On an error no message is kept.
func (p *batchPack) unmarshal(b []byte) error {
	p.reset()
	err := eachPacked(b, func(v []byte) error {
		if len(p.msgs) == MaxBatchRequests {
			return errTooManyRequests
		}
		m := batchMsgs.Get().(*batchMsg)
		p.msgs = append(p.msgs, m)
		return m.unmarshal(v)
	})
	if err != nil {
		putBatchMsgs(p.msgs)
		p.reset()
	}
	return err
}

// answerPack is one message of answers on a Batch stream, a
// BatchResponses.
type answerPack struct{ msgs []*batchMsg }

// marshal sizes the message first, as its buffer is new (over gRPC).
func (p *answerPack) marshal() ([]byte, error) {
	size := 0
	for _, m := range p.msgs {
		n, _ := m.responseSize()
		size += 1 + protowire.SizeBytes(n)
	}
	return p.appendMarshal(make([]byte, 0, size))
}

// appendMarshal appends what marshal returns to b. It sizes each answer
// once, as it appends it: b is the framing's buffer, which has room
// (sizing the whole message first cost a fifth more).
func (p *answerPack) appendMarshal(b []byte) ([]byte, error) {
	for _, m := range p.msgs {
		if !utf8.ValidString(m.servedFrom) {
			return nil, errWireUTF8
		}
	}
	for _, m := range p.msgs {
		n, psize := m.responseSize()
		b = protowire.AppendVarint(append(b, byte(packField)<<3|byte(protowire.BytesType)), uint64(n))
		b = m.appendResponse(b, psize)
	}
	return b, nil
}

// eachPacked calls f with each element of a packed message's repeated
// field, skipping other fields.
func eachPacked(b []byte, f func([]byte) error) error {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return errWireDecode
		}
		b = b[n:]
		var err error
		if num == packField && typ == protowire.BytesType {
			var v []byte
			if v, n, err = bytesField(b); err == nil {
				err = f(v)
			}
		} else {
			n, err = skipField(num, typ, b)
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// appendPacked appends req, one encoded request, as an element of a
// BatchRequests.
func appendPacked(b, req []byte) []byte {
	b = protowire.AppendVarint(append(b, byte(packField)<<3|byte(protowire.BytesType)), uint64(len(req)))
	return append(b, req...)
}

// replyPack is one message of answers on a client's Batch stream, a
// BatchResponses, decoded. A stream's reader reuses one.
type replyPack struct {
	replies []batchReply
	n       int
}

func (p *replyPack) unmarshal(b []byte) error {
	p.n = 0
	return eachPacked(b, func(v []byte) error {
		if p.n == MaxBatchRequests {
			return errTooManyRequests
		}
		if p.n == len(p.replies) {
			p.replies = append(p.replies, batchReply{})
		}
		p.n++
		return p.replies[p.n-1].unmarshal(v)
	})
}

// ---- Client side: requests out, answers in. ----

// appendRequest appends a GrpcBatchClientLockRequest (which is also a
// valid GrpcBatchServerLockRequest) for one call to b. The caller has
// checked the request with lease.Valid, so owner is set for the ops that
// carry one.
func appendRequest(b []byte, id int32, op lease.Op, resource string, owner []byte, ttl time.Duration, d lease.Durability) []byte {
	payload := payloadField(op)
	// The payload's size.
	n := 0
	if resource != "" {
		n += 1 + protowire.SizeBytes(len(resource))
	}
	hasOwner := op != lease.Get && (len(owner) > 0 || (op != lease.TryLock && owner != nil))
	if hasOwner {
		n += 1 + protowire.SizeBytes(len(owner))
	}
	var ms int32
	if op == lease.TryLock || op == lease.Extend {
		ms = ttlToMs(ttl)
		if ms != 0 {
			n += 1 + protowire.SizeVarint(uint64(ms))
		}
	}
	dur := uint64(int32(d))
	if dur != 0 {
		n += 1 + protowire.SizeVarint(dur)
	}

	// Type: TRY_LOCK 1, EXTEND_LOCK 2, UNLOCK 3, GET_LOCK 4 (lease.Op + 1).
	b = protowire.AppendVarint(append(b, byte(fieldType)<<3|byte(protowire.VarintType)), uint64(batchType(op)))
	if id != 0 {
		b = protowire.AppendVarint(append(b, byte(fieldRequestID)<<3|byte(protowire.VarintType)), uint64(id))
	}
	b = protowire.AppendVarint(append(b, byte(payload)<<3|byte(protowire.BytesType)), uint64(n))
	if resource != "" {
		b = protowire.AppendString(append(b, 1<<3|byte(protowire.BytesType)), resource)
	}
	if hasOwner {
		b = protowire.AppendBytes(append(b, 2<<3|byte(protowire.BytesType)), owner)
	}
	if ms != 0 {
		b = protowire.AppendVarint(append(b, 3<<3|byte(protowire.VarintType)), uint64(ms))
	}
	if dur != 0 {
		b = protowire.AppendVarint(append(b, byte(durabilityField(payload))<<3|byte(protowire.VarintType)), dur)
	}
	return b
}

// batchType is the envelope Type of op (the inverse of batchOp).
func batchType(op lease.Op) int32 {
	switch op {
	case lease.Extend:
		return 2
	case lease.Unlock:
		return 3
	case lease.Get:
		return 4
	}
	return 1
}

// batchReply is an answer on a client's batch stream, decoded. A stream's
// reader reuses one.
type batchReply struct {
	typ     int32
	id      int32
	payload protowire.Number // the oneof member received, 0 if none

	servedFrom      string
	status          int32 // Type
	token           int64 // FencingToken (not in GrpcUnlockResponse)
	owner           []byte
	expiresPhysical int64

	// lastServedFrom keeps the previous answer's ServedFrom, so the usual
	// case, the same node name again, costs no allocation.
	lastServedFrom string
}

// unmarshal decodes a GrpcBatch{Client,Server}LockResponse into r.
func (r *batchReply) unmarshal(b []byte) error {
	last := r.lastServedFrom
	*r = batchReply{lastServedFrom: last}
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return errWireDecode
		}
		b = b[n:]
		var err error
		switch {
		case (num == fieldType || num == fieldRequestID) && typ == protowire.VarintType:
			var v uint64
			v, n, err = varintField(b)
			if num == fieldType {
				r.typ = int32(v)
			} else {
				r.id = int32(v)
			}
		case num >= fieldTryLock && num <= fieldGet && typ == protowire.BytesType:
			var v []byte
			if v, n, err = bytesField(b); err == nil {
				if r.payload != num {
					r.servedFrom, r.status, r.token, r.owner, r.expiresPhysical = "", 0, 0, nil, 0
					r.payload = num
				}
				err = r.unmarshalPayload(num, v)
			}
		default:
			n, err = skipField(num, typ, b)
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// unmarshalPayload merges an answer payload (see payloadSize for the
// fields) into r.
func (r *batchReply) unmarshalPayload(payload protowire.Number, b []byte) error {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return errWireDecode
		}
		b = b[n:]
		var err error
		var v uint64
		switch {
		case num == 1 && typ == protowire.BytesType:
			var s []byte
			if s, n, err = bytesField(b); err == nil {
				if !utf8.Valid(s) {
					return errWireUTF8
				}
				if string(s) == r.lastServedFrom {
					r.servedFrom = r.lastServedFrom
				} else {
					r.servedFrom = string(s)
					r.lastServedFrom = r.servedFrom
				}
			}
		case num == 2 && typ == protowire.VarintType:
			v, n, err = varintField(b)
			r.status = int32(v)
		case payload == fieldGet && num == 3 && typ == protowire.BytesType:
			var o []byte
			if o, n, err = bytesField(b); err == nil {
				r.owner = append([]byte{}, o...) // optional bytes: present even if empty
			}
		case payload == fieldGet && num == 5 && typ == protowire.VarintType:
			v, n, err = varintField(b)
			r.expiresPhysical = int64(v)
		case payload == fieldGet && (num == 4 || num == 6) && typ == protowire.VarintType:
			_, n, err = varintField(b) // ExpiresNode, ExpiresCounter: unused
		case typ == protowire.VarintType && num == fencingTokenField(payload):
			v, n, err = varintField(b)
			r.token = int64(v)
		default:
			n, err = skipField(num, typ, b)
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// fencingTokenField is the FencingToken field of an answer payload (0:
// none).
func fencingTokenField(payload protowire.Number) protowire.Number {
	switch payload {
	case fieldTryLock, fieldExtend:
		return 3
	case fieldGet:
		return 7
	}
	return 0
}
