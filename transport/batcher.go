package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/kahunago/kahuna/lease"
	v1 "github.com/kahunago/kahuna/transport/kahunav1pb"
	pb "github.com/kahunago/kahuna/transport/lockspb"
)

// batchStream multiplexes calls over one batch stream (BatchClientLockRequests,
// or BatchServerLockRequests for a forwarder) on its own connection, re-opening the stream when it breaks.
//
// Callers queue their marshaled request and wait on their call's channel.
// One writer goroutine sends whatever is queued the moment it is woken,
// and while it sends, new calls accumulate for its next round: at low load
// a call goes out at once, at high load calls go out back to back and grpc
// packs them into few socket writes. Releases and extensions go first:
// concurrent calls have no order, and a release that waits behind other
// callers' TryLocks keeps a contended lock held for longer. One reader
// goroutine per open stream delivers answers, which come back in any
// order, by RequestId, and wakes the callers of each message in turn
// (wakeInTurn).
type batchStream struct {
	target string // the endpoint, for errors
	conn   *grpc.ClientConn
	method *streamMethod
	frames *frameDialer    // nil: gRPC only (frames.go)
	ctx    context.Context // the client's: ends on Close
	wg     *sync.WaitGroup // the client's goroutines
	wake   chan struct{}   // holds a token while calls are queued for an idle writer
	openMu sync.Mutex      // one stream opening at a time

	mu      sync.Mutex
	closed  bool
	urgent  []*call // queued Unlocks and Extends, sent first
	queue   []*call // queued TryLocks and Gets
	writing bool    // the writer is busy and rechecks the queues before it idles
	cur     *clientStream

	locks *lockCalls // native Locks on the same connection

	// woken counts the callers the reader has woken with their answers,
	// ran those of them that have run since. The writer waits for the
	// callers woken before it (awaitRan), so that the calls they make at
	// once leave together.
	woken, ran atomic.Uint64
	awaitRan   atomic.Uint64 // the ran count the writer waits for; 0: none
	allRan     chan struct{} // capacity 1: awaitRan is reached

	// pack is the writer's buffer for a framed stream's Batch messages,
	// which the framing copies before SendMsg returns.
	pack []byte
}

// clientStream is one open stream and the calls waiting for its answers.
type clientStream struct {
	grpc.ClientStream
	cancel  context.CancelFunc
	packed  bool            // kahuna.v1's Batch: many requests to a message
	dead    bool            // guarded by batchStream.mu
	pending map[int32]*call // guarded by batchStream.mu
	// Guarded by batchStream.mu: end is how the stream ended (RecvMsg's
	// error), once dead; sendEnded holds the calls whose SendMsg found
	// the stream ended by the server (io.EOF) before the reader had its
	// status, for the reader to fail with it.
	end       error
	sendEnded []*call
}

// errUnsent marks the failure of a call that the server never processed:
// it is always safe to send again, to this endpoint or another. It is
// a lease.ErrNotApplied too.
//
// A call is unsent only when one of these is certain:
//   - its stream could not be opened (no connection, dial refused,
//     NewStream failed): nothing of the call was handed to grpc;
//   - its stream had already ended when its turn came;
//   - its SendMsg, or that of a call before it on the stream, failed:
//     grpc queues a message for the wire only when SendMsg succeeds, so a
//     failed one wrote nothing (see batchStream.send);
//   - the server ended the stream cleanly (OK status) before answering it:
//     serveBatch answers every message it processes before a clean end.
//
// Anything else, a stream that breaks (connection lost, reset, deadline,
// any non-OK status) while the call waits for its answer, leaves the
// outcome unknown: the request may have reached the server, which may
// apply it after the break.
var errUnsent = errors.New("transport: request not sent")

type unsentError struct{ cause error }

func (e *unsentError) Error() string { return errUnsent.Error() + ": " + e.cause.Error() }
func (e *unsentError) Unwrap() error { return e.cause }
func (e *unsentError) Is(target error) bool {
	return target == errUnsent || target == lease.ErrNotApplied
}

// errClosedUnsent fails a call that Close (or an earlier Close) stopped
// before it was sent. It is ErrClosed and lease.ErrNotApplied, but not
// errUnsent: it must not be sent again, the client is closed.
var errClosedUnsent = fmt.Errorf("%w (%w)", ErrClosed, lease.ErrNotApplied)

// streamMethod is the batch stream a client speaks.
type streamMethod struct {
	desc *grpc.StreamDesc
	name string
	// packed: kahuna.v1's Batch, whose messages carry many requests; a
	// server without it (Kahuna, an older kahuna) is spoken to with
	// fallback instead.
	packed   bool
	fallback *streamMethod
}

// The two batch streams. Their envelopes are field for field the same (the
// same numbers, the same enum values for the op types, the same payload
// messages), so the bytes a call encodes as a GrpcBatchClientLockRequest
// are a valid GrpcBatchServerLockRequest too, and the answers decode alike:
// only the method differs.
var (
	batchClientMethod = &streamMethod{desc: &pb.Locker_ServiceDesc.Streams[0], name: pb.Locker_BatchClientLockRequests_FullMethodName}
	batchServerMethod = &streamMethod{desc: &pb.Locker_ServiceDesc.Streams[1], name: pb.Locker_BatchServerLockRequests_FullMethodName}
)

// The packed forms of the two, kahuna.v1's Batch and ForwardBatch: the
// same envelopes, many to a message.
var (
	packedClientMethod = &streamMethod{desc: streamDesc(v1.Kahuna_Batch_FullMethodName), name: v1.Kahuna_Batch_FullMethodName, packed: true, fallback: batchClientMethod}
	packedServerMethod = &streamMethod{desc: streamDesc(v1.Kahuna_ForwardBatch_FullMethodName), name: v1.Kahuna_ForwardBatch_FullMethodName, packed: true, fallback: batchServerMethod}
)

// streamDesc is the kahuna.v1 stream of the full method name.
func streamDesc(fullMethod string) *grpc.StreamDesc {
	for i := range v1.Kahuna_ServiceDesc.Streams {
		d := &v1.Kahuna_ServiceDesc.Streams[i]
		if "/"+v1.Kahuna_ServiceDesc.ServiceName+"/"+d.StreamName == fullMethod {
			return d
		}
	}
	panic("transport: no stream " + fullMethod)
}

func newBatchStream(ctx context.Context, wg *sync.WaitGroup, target string, conn *grpc.ClientConn, method *streamMethod, frames *frameDialer) *batchStream {
	s := &batchStream{target: target, conn: conn, method: method, frames: frames, ctx: ctx, wg: wg, wake: make(chan struct{}, 1), allRan: make(chan struct{}, 1),
		locks: &lockCalls{target: target, conn: conn, frames: frames, ctx: ctx, wg: wg, forward: method == packedServerMethod}}
	wg.Add(1)
	go s.writeLoop()
	return s
}

// do sends c and waits for its answer. When ctx ends first it returns
// ctx.Err() and the answer, if it comes, is dropped.
func (s *batchStream) do(ctx context.Context, c *call) error { return s.doLate(ctx, c, nil) }

// errLeft is doLate's answer when its caller left with the call sent:
// the call's answer, or failure, goes to late.
var errLeft = errors.New("transport: the caller left; the answer goes to late")

// doLate is do, except that when ctx ends with c sent and unanswered, and
// late is not nil, it returns errLeft and the answer (or the stream's
// failure), once it comes, is handed to late on a goroutine of its own.
// A call still queued when ctx ends is never sent: ctx.Err() then.
func (s *batchStream) doLate(ctx context.Context, c *call, late func(reply, error)) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosedUnsent
	}
	c.state = callQueued
	if c.op == lease.Unlock || c.op == lease.Extend {
		s.urgent = append(s.urgent, c)
	} else {
		s.queue = append(s.queue, c)
	}
	wake := !s.writing && len(s.urgent)+len(s.queue) == 1
	s.mu.Unlock()
	if wake {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	select {
	case <-c.done:
		passOn(c)
		s.running(c)
		return c.err
	case <-ctx.Done():
		switch s.abandon(c, late) {
		case callQueued:
			return ctx.Err()
		case callPending:
			if late != nil {
				return errLeft
			}
			return ctx.Err()
		}
		// The answer (or failure) is being delivered right now: take it.
		<-c.done
		passOn(c)
		s.running(c)
		return c.err
	}
}

// running notes that c's caller, woken by the reader, runs again.
func (s *batchStream) running(c *call) {
	if !c.woken {
		return
	}
	c.woken = false
	n := s.ran.Add(1)
	if t := s.awaitRan.Load(); t != 0 && n >= t && s.awaitRan.CompareAndSwap(t, 0) {
		s.allRan <- struct{}{}
	}
}

// minToAwait is how many woken callers still to run make the writer wait
// for them. A hand-off of a hot lock wakes one or two (the next holder,
// the releaser), and the next holder's release should not wait for the
// releaser; an answer message of the lock workload wakes ten or more.
const minToAwait = 4

// awaitWoken waits, when several callers the reader woke have not run
// yet, until as many callers as it had woken have run. Their next calls,
// made at once in a closed loop, then leave with the writer's next
// message: a yield alone gave the other processor the writer while they
// were still queued behind it (about 6 requests a message against 13
// answers).
func (s *batchStream) awaitWoken() {
	target := s.woken.Load()
	if target < s.ran.Load()+minToAwait {
		return
	}
	s.awaitRan.Store(target)
	if s.ran.Load() >= target && s.awaitRan.CompareAndSwap(target, 0) {
		return
	}
	select {
	case <-s.allRan:
	case <-s.ctx.Done():
	}
}

// abandon takes c out of the stream if it is still queued, or, when it
// is pending, hands it to late (if not nil) or forgets it. It returns
// where c was: callIdle if its answer is being delivered.
func (s *batchStream) abandon(c *call, late func(reply, error)) callState {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch was := c.state; was {
	case callQueued: // the writer skips it
		c.state = callAbandoned
		return was
	case callPending:
		if late != nil {
			c.late = late // stays pending: its answer goes to late
			return was
		}
		delete(c.st.pending, c.id)
		c.state = callAbandoned
		return was
	}
	return callIdle
}

func (s *batchStream) writeLoop() {
	defer s.wg.Done()
	var batch []*call
	for {
		select {
		case <-s.wake:
		case <-s.ctx.Done():
			return // close fails whatever is queued
		}
		// Callers woken by answers just delivered get to queue their next
		// calls first, so those leave together, in one Batch message: the
		// writer waits for them to run, then, while other calls wait for
		// answers, yields once. A call alone on the stream (a release
		// handing a hot lock on) goes at once.
		s.awaitWoken()
		if s.inFlight() > 1 {
			runtime.Gosched()
		}
		for {
			s.mu.Lock()
			batch = append(append(batch[:0], s.urgent...), s.queue...)
			clear(s.urgent)
			clear(s.queue)
			s.urgent, s.queue = s.urgent[:0], s.queue[:0]
			s.writing = len(batch) > 0
			s.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			s.send(batch)
			clear(batch)
		}
	}
}

// inFlight is the number of calls sent on the current stream and still
// waiting for their answers.
func (s *batchStream) inFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return 0
	}
	return len(s.cur.pending)
}

// send writes a batch of queued calls on the current stream, opening one
// if there is none.
func (s *batchStream) send(batch []*call) {
	st, err := s.stream()
	if err != nil {
		if !errors.Is(err, lease.ErrUnauthenticated) { // a refusal is final
			err = &unsentError{err}
		}
		s.failQueued(batch, err)
		return
	}
	s.mu.Lock()
	if st.dead {
		end := st.end
		s.mu.Unlock()
		s.failQueued(batch, s.endedUnsent(end))
		return
	}
	// Register before sending: an answer can come back before SendMsg
	// returns.
	n := 0
	for _, c := range batch {
		if c.state != callQueued {
			continue
		}
		c.state, c.st = callPending, st
		st.pending[c.id] = c
		batch[n] = c
		n++
	}
	s.mu.Unlock()
	if st.packed {
		s.sendPacked(st, batch[:n])
		return
	}
	for i, c := range batch[:n] {
		if err := st.SendMsg(&c.buf); err != nil {
			s.sendFailed(st, batch[i:n], err)
			return
		}
	}
}

// maxPackBytes bounds the requests packed into one message, far below
// grpc's default 4 MB limit on a received message.
const maxPackBytes = 256 << 10

// sendPacked sends calls, registered on st, as few Batch messages. Over
// gRPC each message is a new buffer: grpc's writer reads it after SendMsg
// returns. The framing copies it first, so there the writer keeps one.
func (s *batchStream) sendPacked(st *clientStream, calls []*call) {
	_, framed := st.ClientStream.(*frameClientStream)
	for start := 0; start < len(calls); {
		end, size := start, 0
		for end < len(calls) && end-start < MaxBatchRequests && (end == start || size+len(calls[end].buf) <= maxPackBytes) {
			size += 1 + protowire.SizeBytes(len(calls[end].buf))
			end++
		}
		buf := &s.pack
		if !framed {
			fresh := make([]byte, 0, size)
			buf = &fresh
		}
		*buf = (*buf)[:0]
		for _, c := range calls[start:end] {
			*buf = appendPacked(*buf, c.buf)
		}
		if err := st.SendMsg(buf); err != nil {
			s.sendFailed(st, calls[start:], err)
			return
		}
		start = end
	}
}

// stream returns the open stream, opening one if needed.
func (s *batchStream) stream() (*clientStream, error) {
	s.openMu.Lock()
	defer s.openMu.Unlock()
	s.mu.Lock()
	st := s.cur
	s.mu.Unlock()
	if st != nil {
		return st, nil
	}
	var (
		cs     grpc.ClientStream
		cancel context.CancelFunc
	)
	for {
		var ctx context.Context
		ctx, cancel = context.WithCancel(s.ctx)
		var err error
		if s.method.packed {
			kind := frameKindBatch
			if s.method == packedServerMethod {
				kind = frameKindForward
			}
			fs, err := s.frames.openIfUsed(ctx, kind)
			if err != nil {
				cancel()
				if refused := unauthenticated(s.target, err); refused != nil {
					return nil, refused
				}
				return nil, fmt.Errorf("opening a stream to %s: %w", s.target, err)
			}
			if fs != nil {
				cs = fs
				break
			}
		}
		cs, err = s.conn.NewStream(ctx, s.method.desc, s.method.name, grpc.ForceCodecV2(wireCodec{}))
		if err != nil {
			cancel()
			return nil, fmt.Errorf("opening a stream to %s: %w", s.target, err)
		}
		if !s.method.packed {
			break
		}
		// The server sends the headers of a Batch stream at once, marked,
		// so whether it offers the stream is known before anything is
		// sent on it. A stream without the mark ended (some servers send
		// headers before an error status), and its RecvMsg says why.
		if md, _ := cs.Header(); len(md.Get(batchHeader)) > 0 {
			break
		}
		if err := cs.RecvMsg(new(replyPack)); status.Code(err) != codes.Unimplemented {
			cancel()
			if refused := unauthenticated(s.target, err); refused != nil {
				return nil, refused
			}
			return nil, fmt.Errorf("opening a stream to %s: %w", s.target, err)
		}
		cancel()
		s.method = s.method.fallback // for good: Kahuna, or an older kahuna
	}
	st = &clientStream{ClientStream: cs, cancel: cancel, packed: s.method.packed, pending: make(map[int32]*call)}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		cancel()
		return nil, ErrClosed
	}
	s.cur = st
	s.mu.Unlock()
	s.wg.Add(1)
	go s.readLoop(st)
	return st, nil
}

// sendFailed handles a SendMsg error: unsent holds the call whose send
// failed and those after it, none of which reached the server. grpc
// queues a message for the wire only once SendMsg succeeds (a failed write
// returns before anything is queued, and grpc's transparent retry replays
// only what was queued), so the failed call's bytes never left.
func (s *batchStream) sendFailed(st *clientStream, unsent []*call, err error) {
	s.mu.Lock()
	if s.cur == st {
		s.cur = nil
	}
	var failed []*call
	for _, c := range unsent {
		if st.pending[c.id] == c {
			delete(st.pending, c.id)
			c.state = callIdle
			failed = append(failed, c)
		}
	}
	if errors.Is(err, io.EOF) {
		// The server ended the stream, and the status RecvMsg reports says
		// why: a refused token is ErrUnauthenticated, not a bare EOF. The
		// reader fails them with it (broken); once the stream is dead,
		// broken has taken every pending call, so failed is empty.
		st.sendEnded = append(st.sendEnded, failed...)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	st.cancel() // half-open: end it for the reader
	s.complete(failed, s.failure(&unsentError{fmt.Errorf("sending to %s: %w", s.target, err)}))
}

// endedUnsent is the error of calls never sent because the server had
// ended their stream with end (RecvMsg's error): the server's refusal of
// the token when it was that, else not sent.
func (s *batchStream) endedUnsent(end error) error {
	if refused := unauthenticated(s.target, end); refused != nil {
		return refused
	}
	return &unsentError{fmt.Errorf("stream to %s ended before the request was sent: %w", s.target, end)}
}

func (s *batchStream) readLoop(st *clientStream) {
	defer s.wg.Done()
	// Decoded afresh for each answer (see call.decode).
	m, p := new(batchReply), new(replyPack)
	var chain []*call // a message's calls, woken in turn
	for {
		if !st.packed {
			if err := st.RecvMsg(m); err != nil {
				s.broken(st, err)
				return
			}
			if c := s.deliver(st, m); c != nil {
				finish(c) // one answer a message: no turn to take
			}
			continue
		}
		if err := st.RecvMsg(p); err != nil {
			s.broken(st, err)
			return
		}
		chain = chain[:0]
		for i := range p.n {
			if c := s.deliver(st, &p.replies[i]); c != nil {
				chain = append(chain, c)
			}
		}
		if len(chain) > 0 {
			wakeInTurn(chain)
			clear(chain)
		}
	}
}

// deliver sets the answer m on its call, if it still waits for it, and
// returns the call for its caller to be woken (nil when there is none to
// wake: no call, or one whose answer goes to late, handed on here).
func (s *batchStream) deliver(st *clientStream, m *batchReply) *call {
	s.mu.Lock()
	c := st.pending[m.id]
	if c != nil {
		delete(st.pending, c.id)
		c.state, c.st = callIdle, nil
	}
	s.mu.Unlock()
	if c == nil {
		return nil // the answer to an abandoned call
	}
	c.err = c.decode(m)
	if c.late == nil {
		c.woken = true
		s.woken.Add(1)
		return c
	}
	finish(c)
	return nil
}

// finish hands c's answer (or failure) to its caller, or to late if its
// caller left.
func finish(c *call) {
	if c.late != nil {
		go c.late(c.reply, c.err)
		return
	}
	c.done <- struct{}{}
}

// broken fails the calls still waiting on a stream that ended. A stream
// the server ended cleanly answered everything it processed (see
// serveBatch), so what is left was not processed and may be sent again;
// after any other end the outcome of those calls is unknown.
func (s *batchStream) broken(st *clientStream, err error) {
	s.mu.Lock()
	st.dead, st.end = true, err
	if s.cur == st {
		s.cur = nil
	}
	var failed []*call
	for _, c := range st.pending {
		c.state = callIdle
		failed = append(failed, c)
	}
	clear(st.pending)
	sendEnded := st.sendEnded
	st.sendEnded = nil
	s.mu.Unlock()
	st.cancel()
	s.complete(sendEnded, s.failure(s.endedUnsent(err)))
	if refused := unauthenticated(s.target, err); refused != nil {
		err = refused // the stream was refused at its start: nothing on it was processed
	} else if errors.Is(err, io.EOF) {
		err = &unsentError{fmt.Errorf("stream to %s ended by the server", s.target)}
	} else {
		err = fmt.Errorf("transport: stream to %s broke, outcome unknown: %w", s.target, err)
	}
	s.complete(failed, s.failure(err))
}

// failQueued fails calls taken from the queue that are still queued.
func (s *batchStream) failQueued(batch []*call, err error) {
	s.mu.Lock()
	var failed []*call
	for _, c := range batch {
		if c.state == callQueued {
			c.state = callIdle
			failed = append(failed, c)
		}
	}
	s.mu.Unlock()
	s.complete(failed, s.failure(err))
}

// failure is err, or ErrClosed once the client is closing: a call cut
// short by Close should say so, not show the cancellation behind it. What
// err proves about the outcome is kept: an unsent call stays not applied.
func (s *batchStream) failure(err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !s.closed:
		return err
	case errors.Is(err, lease.ErrNotApplied):
		return errClosedUnsent
	}
	return ErrClosed
}

func (s *batchStream) complete(calls []*call, err error) {
	for _, c := range calls {
		c.err = err
		finish(c)
	}
}

// close fails the queued calls, never sent, with ErrClosed (not applied)
// and closes the connection, which ends the stream and fails the calls
// waiting on it (ErrClosed, outcome unknown). The client's context must be
// cancelled too, to stop the writer.
func (s *batchStream) close() error {
	s.mu.Lock()
	s.closed = true
	queued := append(s.urgent, s.queue...)
	s.urgent, s.queue = nil, nil
	s.mu.Unlock()
	s.failQueued(queued, errClosedUnsent)
	return s.conn.Close()
}

// wakeInTurn wakes the callers of calls, answered by one message, one
// after another: the reader wakes the first, and each wakes the next as it
// runs (passOn). Woken all at once they ran on both processors together,
// which woke threads to run them and made them contend for the stream; in
// turn the client and the node spent less CPU a lock op
// (docs/benchmarks-log.md, "Callers woken in turn").
func wakeInTurn(calls []*call) {
	for i := range len(calls) - 1 {
		calls[i].next = calls[i+1]
	}
	calls[0].done <- struct{}{}
}

// passOn wakes the caller after c's in its message's turn (wakeInTurn).
// A caller woken with its answer calls it before anything else, whichever
// way its wait ended, so no caller is left waiting behind one that left.
func passOn(c *call) {
	if n := c.next; n != nil {
		c.next = nil
		n.done <- struct{}{}
	}
}
