package transport

import (
	"errors"
	"fmt"
	"time"

	protobuf "google.golang.org/protobuf/proto"

	"github.com/kahunago/kahuna/lease"
	pb "github.com/kahunago/kahuna/transport/lockspb"
)

// callState says where a call is; a batchStream's mutex guards it.
type callState uint8

const (
	callIdle      callState = iota // not submitted, or its answer delivered
	callQueued                     // waiting for the stream's writer
	callPending                    // sent, waiting for its answer
	callAbandoned                  // its caller gave up; skipped and never reused
)

// call is one lock request in flight on the client. Calls are pooled:
// a call whose caller gave up may still be referenced by a stream (and its
// bytes by grpc), so only calls that got an answer go back to the pool.
type call struct {
	op  lease.Op
	id  int32
	buf []byte // the marshaled GrpcBatchClientLockRequest

	// done receives one value per submission, once reply or err is set.
	done  chan struct{}
	reply reply
	err   error

	state callState     // guarded by the batchStream's mu
	st    *clientStream // the stream it is pending on

	// Encoding scratch, kept to save allocations.
	env      pb.GrpcBatchClientLockRequest
	tryLock  pb.GrpcTryLockRequest
	extend   pb.GrpcExtendLockRequest
	unlock   pb.GrpcUnlockRequest
	get      pb.GrpcGetLockRequest
	tryLockP pb.GrpcBatchClientLockRequest_TryLock
	extendP  pb.GrpcBatchClientLockRequest_ExtendLock
	unlockP  pb.GrpcBatchClientLockRequest_Unlock
	getP     pb.GrpcBatchClientLockRequest_GetLock
}

// reply is the decoded answer to a call.
type reply struct {
	res  lease.Result
	info lease.LockInfo
}

func newCall() *call { return &call{done: make(chan struct{}, 1)} }

// encode marshals the request into c.buf. The request's fields are only
// borrowed for the marshaling: nothing of the caller's stays referenced.
func (c *call) encode(id int32, op lease.Op, resource string, owner []byte, ttl time.Duration, d lease.Durability) error {
	c.op, c.id = op, id
	dur := pb.GrpcLockDurability(d)
	c.env = pb.GrpcBatchClientLockRequest{RequestId: id}
	switch op {
	case lease.TryLock:
		c.tryLock = pb.GrpcTryLockRequest{Resource: resource, Owner: owner, ExpiresMs: ttlToMs(ttl), Durability: dur}
		c.tryLockP.TryLock = &c.tryLock
		c.env.Type, c.env.Payload = pb.GrpcClientBatchType_TRY_LOCK, &c.tryLockP
	case lease.Extend:
		c.extend = pb.GrpcExtendLockRequest{Resource: resource, Owner: owner, ExpiresMs: ttlToMs(ttl), Durability: dur}
		c.extendP.ExtendLock = &c.extend
		c.env.Type, c.env.Payload = pb.GrpcClientBatchType_EXTEND_LOCK, &c.extendP
	case lease.Unlock:
		c.unlock = pb.GrpcUnlockRequest{Resource: resource, Owner: owner, Durability: dur}
		c.unlockP.Unlock = &c.unlock
		c.env.Type, c.env.Payload = pb.GrpcClientBatchType_UNLOCK, &c.unlockP
	case lease.Get:
		c.get = pb.GrpcGetLockRequest{Resource: resource, Durability: dur}
		c.getP.GetLock = &c.get
		c.env.Type, c.env.Payload = pb.GrpcClientBatchType_GET_LOCK, &c.getP
	}
	var err error
	c.buf, err = protobuf.MarshalOptions{}.MarshalAppend(c.buf[:0], &c.env)
	c.tryLock, c.extend, c.unlock, c.get = pb.GrpcTryLockRequest{}, pb.GrpcExtendLockRequest{}, pb.GrpcUnlockRequest{}, pb.GrpcGetLockRequest{}
	if err != nil {
		return fmt.Errorf("transport: encoding %v request: %w", op, err)
	}
	return nil
}

var errWrongPayload = errors.New("transport: answer carries the payload of another op")

// decode reads the answer m into c.reply.
func (c *call) decode(m *pb.GrpcBatchClientLockResponse) error {
	var r reply
	switch c.op {
	case lease.TryLock:
		p := m.GetTryLock()
		if p == nil {
			return errWrongPayload
		}
		r.res = lease.Result{Status: lease.Status(p.GetType()), FencingToken: p.GetFencingToken(), ServedFrom: p.GetServedFrom()}
	case lease.Extend:
		p := m.GetExtendLock()
		if p == nil {
			return errWrongPayload
		}
		r.res = lease.Result{Status: lease.Status(p.GetType()), FencingToken: p.GetFencingToken(), ServedFrom: p.GetServedFrom()}
	case lease.Unlock:
		p := m.GetUnlock()
		if p == nil {
			return errWrongPayload
		}
		r.res = lease.Result{Status: lease.Status(p.GetType()), ServedFrom: p.GetServedFrom()}
	case lease.Get:
		p := m.GetGetLock()
		if p == nil {
			return errWrongPayload
		}
		r.res = lease.Result{Status: lease.Status(p.GetType()), ServedFrom: p.GetServedFrom()}
		if r.res.Status == lease.Got {
			r.res.FencingToken = p.GetFencingToken()
			r.info = lease.LockInfo{Owner: p.GetOwner(), Expires: time.UnixMilli(p.GetExpiresPhysical()), FencingToken: p.GetFencingToken()}
		}
	}
	c.reply = r
	return nil
}
