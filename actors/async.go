package actors

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/kahunago/kahuna/lease"
)

// DoAsync runs req as Do does, without a caller waiting: done gets the
// answer, exactly once, on the goroutine that has it (the caller's own
// when the actor is idle and decides at once, else the actor's worker or
// the goroutine that settles a persistent write). A server that answers
// many requests of one connection need not park a goroutine on each
// until its write commits and wake it to send the answer: under load,
// those wake-ups were most of a node's waiting for a processor.
//
// When ctx ends first, done gets ctx.Err() at once and, as with Do, a
// TryLock not decided yet is not granted. Close answers the calls still
// pending ErrClosed. done must not block (it may run inside the actor)
// and must not call the Ring on its goroutine. req must not wait (Wait 0)
// or name several locks (Also nil): those go through Do.
func (r *Ring) DoAsync(ctx context.Context, req Request, done func(Response, error)) {
	if req.Wait != 0 || req.Also != nil {
		panic("actors: DoAsync of a request that waits or names several locks")
	}
	if r.closed.Load() {
		done(Response{}, ErrClosed)
		return
	}
	i := r.index(req.Resource)
	if !r.actors[i].enter() {
		done(Response{Status: lease.MustRetry}, nil)
		return
	}
	// Not from the pool: the actor may look at a call after answering it,
	// and here the answer runs on its goroutine, before it is done.
	c := &call{req: req}
	p := &asyncCall{done: done}
	c.notify = func(resp Response) {
		if resp.raise == nil {
			r.async.finish(c, p, resp, nil)
			return
		}
		// Rare (a new reign's first grants, a longer TTL than any
		// before): wait for the raise as Do does, off the actor.
		go func() {
			select {
			case <-resp.raise:
			case <-ctx.Done():
				r.async.finish(c, p, Response{}, ctx.Err())
				return
			case <-r.done:
				r.async.finish(c, p, Response{}, ErrClosed)
				return
			}
			resp, err := r.Do(ctx, req)
			r.async.finish(c, p, resp, err)
		}()
	}
	var stop func() bool
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, func() {
			if req.Op == lease.TryLock {
				c.abandoned.Store(true) // see Do
			}
			r.async.finish(c, p, Response{}, ctx.Err())
		})
	}
	// Posted even if ctx has ended (answered then), as Do posts it: the
	// actor counts it (enter) and skips an abandoned TryLock.
	r.async.add(c, p, stop)
	if r.closed.Load() { // Close may have passed over it
		r.async.finish(c, p, Response{}, ErrClosed)
		return
	}
	r.actors[i].mailbox.postInline(c)
}

// asyncCall is one DoAsync call's answer, given once.
type asyncCall struct {
	done     func(Response, error)
	stop     func() bool // ends the watch of the caller's context (under asyncCalls.mu)
	answered atomic.Bool
}

// asyncCalls are DoAsync's calls not answered yet, so that Close can
// answer them.
type asyncCalls struct {
	mu      sync.Mutex
	pending map[*call]*asyncCall
}

// add registers p, with stop, unless it is answered already.
func (s *asyncCalls) add(c *call, p *asyncCall, stop func() bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.answered.Load() {
		return
	}
	if s.pending == nil {
		s.pending = make(map[*call]*asyncCall)
	}
	s.pending[c], p.stop = p, stop
}

// finish gives p its answer unless it has one.
func (s *asyncCalls) finish(c *call, p *asyncCall, resp Response, err error) {
	if !p.answered.CompareAndSwap(false, true) {
		return
	}
	s.mu.Lock()
	delete(s.pending, c)
	stop := p.stop
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
	p.done(resp, err)
}

// closeAll answers every pending call ErrClosed (the Ring is closed).
func (s *asyncCalls) closeAll() {
	s.mu.Lock()
	pending := s.pending
	s.pending = nil
	s.mu.Unlock()
	for _, p := range pending {
		if p.answered.CompareAndSwap(false, true) {
			p.done(Response{}, ErrClosed)
		}
	}
}
