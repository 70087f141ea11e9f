package transport

import (
	"errors"
	"time"

	"github.com/kahunago/kahuna/lease"
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
	// late, set (under the batchStream's mu) when the caller left while
	// the call was pending, is handed the answer instead of done.
	late func(reply, error)
	// woken: the reader counted its caller among those it woke
	// (batchStream.woken); set before done is sent, read after.
	woken bool
	// next is the call whose caller this one's wakes as it runs: the next
	// of its answer message's (wakeInTurn).
	next *call
}

// reply is the decoded answer to a call.
type reply struct {
	res  lease.Result
	info lease.LockInfo
}

func newCall() *call { return &call{done: make(chan struct{}, 1)} }

// encode marshals the request into c.buf (see appendRequest). The
// request's fields are only borrowed for the marshaling: nothing of the
// caller's stays referenced.
func (c *call) encode(id int32, op lease.Op, resource string, owner []byte, ttl time.Duration, d lease.Durability) {
	c.op, c.id = op, id
	c.buf = appendRequest(c.buf[:0], id, op, resource, owner, ttl, d)
}

var errWrongPayload = errors.New("transport: answer carries the payload of another op")

// decode reads the answer m into c.reply. m is the stream reader's, reused
// for the next answer: nothing of it may stay referenced.
func (c *call) decode(m *batchReply) error {
	if m.payload != payloadField(c.op) {
		return errWrongPayload
	}
	r := reply{res: lease.Result{Status: lease.Status(m.status), ServedFrom: m.servedFrom}}
	switch c.op {
	case lease.TryLock, lease.Extend:
		r.res.FencingToken = m.token
	case lease.Get:
		if r.res.Status == lease.Got {
			r.res.FencingToken = m.token
			// m.owner is allocated for each answer, so it may be kept.
			r.info = lease.LockInfo{Owner: m.owner, Expires: time.UnixMilli(m.expiresPhysical), FencingToken: m.token}
		}
	}
	c.reply = r
	return nil
}
