package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kahunago/kahuna/lease"
	v1 "github.com/kahunago/kahuna/transport/kahunav1pb"
)

// errNoLockStream says a Lock was not sent on a LockStream and may take
// the unary Lock: the server does not offer the stream (an older kahuna
// answered UNIMPLEMENTED), or this one has MaxLocksPerStream in flight.
var errNoLockStream = errors.New("transport: no lock stream")

// lockCalls multiplexes native Locks over one LockStream on a batch
// stream's connection, re-opening it when it breaks. A Lock registers its
// request id, sends, and waits for its answer, which the stream's reader
// delivers; a Lock whose context ends first withdraws itself with a
// cancel message, so it leaves the server's queue at once, and waits for
// the server's answer to it (a unary Lock leaves the queue by its call's
// cancellation, which the server sees a moment later).
type lockCalls struct {
	target  string // the endpoint, for errors
	conn    *grpc.ClientConn
	frames  *frameDialer    // nil: gRPC only (frames.go)
	forward bool            // a member's: ForwardLockStream, over gRPC
	ctx     context.Context // the client's: ends on Close
	wg      *sync.WaitGroup // the client's goroutines
	openMu  sync.Mutex      // one stream opening at a time

	mu  sync.Mutex
	off bool // the server answered UNIMPLEMENTED: unary Locks only
	ids int64
	cur *lockStreamConn // the open stream; nil once it ends
}

// lockStreamConn is one open LockStream and the Locks waiting on it.
type lockStreamConn struct {
	stream  grpc.BidiStreamingClient[v1.LockStreamRequest, v1.LockStreamResponse]
	cancel  context.CancelFunc
	sendMu  sync.Mutex                // grpc allows one Send at a time
	pending map[int64]chan lockAnswer // guarded by lockCalls.mu; nil once the stream ended
}

type lockAnswer struct {
	resp *v1.LockResponse
	err  error
}

// do sends req on the stream and waits for its answer. It fails with
// errNoLockStream, or an errUnsent error, when req certainly did not reach
// the server; when ctx ends first the Lock is withdrawn, and it returns
// the grant if the lock was granted first, else ctx.Err() once the server
// has answered the withdrawal (or withdrawWait has passed); any other
// error leaves its outcome unknown.
func (l *lockCalls) do(ctx context.Context, req *v1.LockRequest) (*v1.LockResponse, error) {
	st, id, ch, err := l.register()
	if err != nil {
		return nil, err
	}
	st.sendMu.Lock()
	err = st.stream.Send(&v1.LockStreamRequest{RequestId: id, Lock: req})
	st.sendMu.Unlock()
	if err != nil {
		// grpc queues a message only once Send succeeds, so it never left;
		// the stream's end reaches the reader, which fails the others.
		if l.take(st, id) {
			return nil, &unsentError{fmt.Errorf("sending to %s: %w", l.target, err)}
		}
		a := <-ch // the reader failed it first
		return a.resp, a.err
	}
	select {
	case a := <-ch:
		return a.resp, a.err
	case <-ctx.Done():
		// Withdraw it and wait for the server to answer the withdrawal:
		// the caller's next request may be a release, its clean-up of an
		// outcome it cannot know, and sent before the Lock has left the
		// queue it finds nothing to release while the hand-off that
		// follows gives the lock to a caller that has gone, for its whole
		// lease. A failed Send means a broken stream, which has withdrawn
		// the Lock already: the reader fails it.
		st.sendMu.Lock()
		_ = st.stream.Send(&v1.LockStreamRequest{RequestId: id, Cancel: true})
		st.sendMu.Unlock()
		t := time.NewTimer(withdrawWait)
		defer t.Stop()
		var a lockAnswer
		select {
		case a = <-ch:
		case <-t.C:
			if l.take(st, id) {
				return nil, ctx.Err()
			}
			a = <-ch // answered as it was given up
		}
		if a.err == nil && lease.Status(a.resp.GetStatus()) == lease.Locked {
			return a.resp, nil // granted before it left: a late answer is a real one
		}
		return nil, ctx.Err()
	}
}

// withdrawWait bounds the wait for the server's answer to a withdrawal
// (its lock actor handles it at once; only a node in trouble takes long).
const withdrawWait = time.Second

// take removes id from st's pending Locks, reporting whether it was there
// (false: its answer is being delivered).
func (l *lockCalls) take(st *lockStreamConn, id int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := st.pending[id]; !ok {
		return false
	}
	delete(st.pending, id)
	return true
}

// register adds a pending Lock to the open stream, opening one if there
// is none: one lock taken while a stream is open. A stream that ends
// before the Lock is registered is not taken again: the Lock is unsent.
func (l *lockCalls) register() (*lockStreamConn, int64, chan lockAnswer, error) {
	opened := false
	for {
		l.mu.Lock()
		st := l.cur
		switch {
		case l.off:
			l.mu.Unlock()
			return nil, 0, nil, errNoLockStream
		case st != nil && len(st.pending) >= MaxLocksPerStream:
			l.mu.Unlock()
			return nil, 0, nil, errNoLockStream
		case st != nil:
			// The id is read under the lock: read after it, it may be
			// another caller's, and two Locks would share one id.
			l.ids++
			id := l.ids
			ch := make(chan lockAnswer, 1)
			st.pending[id] = ch
			l.mu.Unlock()
			return st, id, ch, nil
		}
		l.mu.Unlock()
		if opened {
			return nil, 0, nil, &unsentError{fmt.Errorf("lock stream to %s ended as it opened", l.target)}
		}
		if err := l.open(); err != nil {
			return nil, 0, nil, &unsentError{err}
		}
		opened = true
	}
}

// open opens a stream unless another caller has just done so.
func (l *lockCalls) open() error {
	l.openMu.Lock()
	defer l.openMu.Unlock()
	l.mu.Lock()
	open := l.cur != nil
	l.mu.Unlock()
	if open {
		return nil
	}
	ctx, cancel := context.WithCancel(l.ctx)
	var cs grpc.BidiStreamingClient[v1.LockStreamRequest, v1.LockStreamResponse]
	var (
		fs  *frameClientStream
		err error
	)
	if !l.forward {
		fs, err = l.frames.openIfUsed(ctx, frameKindLocks)
	}
	switch {
	case fs != nil:
		cs = lockClientFrames{fs}
	case err == nil && l.forward:
		cs, err = v1.NewKahunaClient(l.conn).ForwardLockStream(ctx)
	case err == nil:
		cs, err = v1.NewKahunaClient(l.conn).LockStream(ctx)
	}
	if err != nil {
		cancel()
		return fmt.Errorf("opening a lock stream to %s: %w", l.target, err)
	}
	st := &lockStreamConn{stream: cs, cancel: cancel, pending: make(map[int64]chan lockAnswer)}
	l.mu.Lock()
	l.cur = st
	l.mu.Unlock()
	l.wg.Add(1)
	go l.readLoop(st)
	return nil
}

func (l *lockCalls) readLoop(st *lockStreamConn) {
	defer l.wg.Done()
	for {
		m, err := st.stream.Recv()
		if err != nil {
			l.broken(st, err)
			return
		}
		l.mu.Lock()
		ch := st.pending[m.GetRequestId()]
		delete(st.pending, m.GetRequestId())
		l.mu.Unlock()
		if ch == nil {
			continue // the answer to a Lock given up on
		}
		a := lockAnswer{resp: m.GetLock()}
		if a.resp == nil {
			a.err = fmt.Errorf("transport: lock stream to %s: an answer without a lock", l.target)
		}
		ch <- a
	}
}

// broken fails the Locks still waiting on a stream that ended: as not
// sent when the server never served the stream (UNIMPLEMENTED, a refused
// token) or ended it cleanly (it answers everything it processed), else
// with their outcome unknown.
func (l *lockCalls) broken(st *lockStreamConn, err error) {
	st.cancel()
	var fail error
	switch {
	case status.Code(err) == codes.Unimplemented:
		fail = errNoLockStream
	case status.Code(err) == codes.Unauthenticated, errors.Is(err, io.EOF):
		fail = &unsentError{fmt.Errorf("lock stream to %s ended: %w", l.target, err)}
	case l.ctx.Err() != nil:
		fail = ErrClosed
	default:
		fail = fmt.Errorf("transport: lock stream to %s broke, outcome unknown: %w", l.target, err)
	}
	l.mu.Lock()
	if l.cur == st {
		l.cur = nil
	}
	if errors.Is(fail, errNoLockStream) {
		l.off = true
	}
	pending := st.pending
	st.pending = nil
	l.mu.Unlock()
	for _, ch := range pending {
		ch <- lockAnswer{err: fail}
	}
}
