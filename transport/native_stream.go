package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"google.golang.org/grpc"

	"github.com/kahunago/kahuna/lease"
	v1 "github.com/kahunago/kahuna/transport/kahunav1pb"
)

// MaxLocksPerStream bounds the Locks one LockStream has in flight on the
// server. One over it is answered Busy at once, with a reason; the
// Client never sends one (it takes the unary Lock instead).
const MaxLocksPerStream = 4096

// lockJob is one Lock of a LockStream, from its message to its answer.
// A Lock the node runs with no goroutine waiting for it (lockAsync) is
// started on the stream's context and withdrawn through w; one run on a
// worker has a context of its own, ended through cancel. Either ends
// early, for ended, when a cancel message withdraws it (errWithdrawn) or
// shutdown ends its wait (errWaitDrained). w, cancel and ended are
// guarded by the stream's mu.
type lockJob struct {
	id  int64
	req *v1.LockRequest

	ctx    context.Context // a worker's Lock's
	cancel context.CancelCauseFunc
	w      Withdrawer // a started Lock's; nil until it is started
	ended  error      // the first reason it was ended early, or nil
}

// endEarly ends j early for why, unless it was already: under the
// stream's mu, it returns what ends it, to be run once mu is released
// (a Lock withdrawn may be answered at once, on the caller's goroutine).
func (j *lockJob) endEarly(why error) (end func()) {
	if j.ended != nil {
		return nil
	}
	j.ended = why
	switch w, cancel := j.w, j.cancel; {
	case cancel != nil:
		return func() { cancel(why) }
	case w != nil:
		return func() { w.Withdraw(why) }
	}
	return nil // not started yet: its start ends it
}

// sendNower is a LockStream that can send an answer without waiting:
// sendNow sends it, or reports false at once when the connection would
// make it wait (or another send is under way), and nothing was sent.
type sendNower interface {
	sendNow(*v1.LockStreamResponse) bool
}

// errWithdrawn ends a Lock withdrawn by a cancel message.
var errWithdrawn = errors.New("transport: the Lock was withdrawn by a cancel message")

// lockStream serves one LockStream on l. A wait never holds up the
// stream's other messages, and the reader keeps reading (cancels must get
// through however many Locks wait). A Lock ends with the stream, or on
// its own by a cancel message; its wait is also ended by shutdown.
//
// A Lock that l cannot run without a goroutine (one of another member's
// partition, a lock of several names) runs on one of the stream's
// workers, as a unary Lock does. One the node serves itself waits with
// no goroutine at all (lockAsync): it is answered by the goroutine that
// decides it, a hot lock's grant by the release's. On the framing over a
// plain socket (sendNower) that goroutine writes the answer with one
// system call that never waits; otherwise, or when the socket is full, a
// goroutine of its own sends it. A peer that stopped reading so never
// holds a lock actor (docs/benchmarks-log.md).
func (s *Server) lockStream(l lease.Locker, stream grpc.BidiStreamingServer[v1.LockStreamRequest, v1.LockStreamResponse]) error {
	ctx := stream.Context()
	var (
		mu       sync.Mutex
		stopping bool
		draining bool // shutdown ended every wait, and ends those that come
		inflight = map[int64]*lockJob{}
		sendMu   sync.Mutex // grpc allows one Send at a time
		wg       sync.WaitGroup
	)
	// At shutdown every wait of the stream ends, and is answered (a Lock
	// withdrawn by a cancel message, or whose stream is gone, is not).
	streamDone := make(chan struct{})
	defer close(streamDone)
	go func() {
		select {
		case <-s.draining:
		case <-streamDone:
			return
		}
		mu.Lock()
		draining = true
		var ends []func()
		for _, j := range inflight {
			if end := j.endEarly(errWaitDrained); end != nil {
				ends = append(ends, end)
			}
		}
		mu.Unlock()
		for _, end := range ends {
			end()
		}
	}()
	send := func(resp *v1.LockStreamResponse) {
		sendMu.Lock()
		defer sendMu.Unlock()
		// A failed Send means the stream is broken: Recv reports it.
		_ = stream.Send(resp)
	}
	// finished ends Lock j, which lockOn or lockAsync answered resp or
	// err: its answer, or nil when none is due (the stream is gone).
	finished := func(j *lockJob, resp *v1.LockResponse, err error) *v1.LockStreamResponse {
		mu.Lock()
		delete(inflight, j.id)
		withdrawn, cancel := j.ended == errWithdrawn, j.cancel
		mu.Unlock()
		if cancel != nil {
			cancel(nil)
		}
		switch {
		case err == nil: // a grant that came before a cancel message is answered too
			return &v1.LockStreamResponse{RequestId: j.id, Lock: resp}
		case withdrawn:
			// The client waits for this before it cleans up: its release,
			// sent after, finds the lock as the withdrawal left it.
			return &v1.LockStreamResponse{RequestId: j.id, Lock: &v1.LockResponse{Status: v1.Status(lease.Aborted),
				Reason: "withdrawn by a cancel message", ServedFrom: s.opts.NodeName}}
		}
		return nil
	}
	serve := func(j *lockJob) {
		defer wg.Done()
		resp, err := s.lockOn(j.ctx, l, j.req)
		if m := finished(j, resp, err); m != nil {
			send(m)
		}
	}
	workers := newWorkers(serve, nil)
	defer workers.close()

	al, async := l.(asyncLocker)
	now, canSendNow := stream.(sendNower)
	// answerAsync is serve's end for a Lock started by lockAsync; it runs
	// where the answer is decided and must not wait.
	answerAsync := func(j *lockJob, resp *v1.LockResponse, err error) {
		m := finished(j, resp, err)
		if m == nil {
			wg.Done()
			return
		}
		if canSendNow && sendMu.TryLock() {
			sent := now.sendNow(m)
			sendMu.Unlock()
			if sent {
				wg.Done()
				return
			}
		}
		go func() {
			defer wg.Done()
			send(m)
		}()
	}
	start := func(j *lockJob) {
		if async {
			w, taken := s.lockAsync(ctx, al, j.req, func(resp *v1.LockResponse, err error) { answerAsync(j, resp, err) })
			if taken {
				mu.Lock()
				j.w = w
				why := j.ended // shutdown came first
				mu.Unlock()
				if why != nil && w != nil {
					w.Withdraw(why)
				}
				return
			}
		}
		jctx, cancel := context.WithCancelCause(ctx)
		mu.Lock()
		j.ctx, j.cancel = jctx, cancel
		if j.ended != nil {
			cancel(j.ended)
		}
		mu.Unlock()
		workers.run(j)
	}

	// answerNow answers a message that waits for nothing; called with mu
	// held, so wg.Add is ordered before the drain's wg.Wait.
	answerNow := func(id int64, st lease.Status, reason string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			send(&v1.LockStreamResponse{RequestId: id, Lock: &v1.LockResponse{Status: v1.Status(st), Reason: reason, ServedFrom: s.opts.NodeName}})
		}()
	}

	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			id := m.GetRequestId()
			var (
				job *lockJob
				end func()
			)
			mu.Lock()
			switch {
			case stopping:
				// Received after shutdown began: dropped unprocessed, and
				// the clean end tells the client so.
			case m.GetCancel():
				if j := inflight[id]; j != nil {
					end = j.endEarly(errWithdrawn)
				}
			case m.GetLock() == nil:
				answerNow(id, lease.InvalidInput, "a LockStream message carries a lock or a cancel")
			case inflight[id] != nil:
				answerNow(id, lease.InvalidInput, fmt.Sprintf("request_id %d is already waiting on this stream", id))
			case len(inflight) >= MaxLocksPerStream:
				answerNow(id, lease.Busy, fmt.Sprintf("this stream has %d locks waiting, the most it serves at once", MaxLocksPerStream))
			default:
				job = &lockJob{id: id, req: m.GetLock()}
				if draining {
					job.ended = errWaitDrained
				}
				inflight[id] = job
				wg.Add(1)
			}
			mu.Unlock()
			// Not under mu: a Lock started or withdrawn here may be
			// answered here.
			if end != nil {
				end()
			}
			if job != nil {
				start(job)
			}
		}
	}()

	var err error
	select {
	case err = <-recvErr:
	case <-s.draining:
	}
	mu.Lock()
	stopping = true
	mu.Unlock()
	// Every Lock received must be answered before the stream ends: grpc
	// forbids Send after the handler returns. At shutdown their waits end
	// (drain); on a broken stream their contexts have.
	wg.Wait()
	if err == nil || errors.Is(err, io.EOF) {
		return nil
	}
	return err
}
