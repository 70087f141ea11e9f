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
	// Posted even if ctx has ended (answered then), as Do posts it: the
	// actor counts it (enter) and skips an abandoned TryLock.
	r.async.add(ctx, c, p)
	if r.closed.Load() { // Close may have passed over it
		r.async.finish(c, p, Response{}, ErrClosed)
		return
	}
	r.actors[i].mailbox.postInline(c)
}

// asyncCall is one DoAsync call's answer, given once.
type asyncCall struct {
	done     func(Response, error)
	ctx      context.Context // nil: a context that cannot end
	answered atomic.Bool
}

// asyncCalls are DoAsync's calls not answered yet, so that Close can
// answer them, grouped by their caller's context: when one ends, its
// calls are answered with its error (and a TryLock not decided yet is
// not granted), through one watch of the context for all of them. A
// server passes its stream's context with each of the stream's requests,
// and a watch per request (context.AfterFunc, and its stop) took 2.5-4%
// of a node's CPU on persistent writes. Contexts are told apart by their
// Done channel, which any context has comparable (a context's own type
// need not be), and which contexts that end together share.
type asyncCalls struct {
	mu       sync.Mutex
	byDone   map[<-chan struct{}]*ctxCalls
	unending map[*call]*asyncCall // calls whose context cannot end
}

// ctxCalls are the calls pending on one context, and its watch.
type ctxCalls struct {
	calls map[*call]*asyncCall
	stop  func() bool
}

// add registers p, unless it is answered already.
func (s *asyncCalls) add(ctx context.Context, c *call, p *asyncCall) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.answered.Load() {
		return
	}
	done := ctx.Done()
	if done == nil {
		if s.unending == nil {
			s.unending = make(map[*call]*asyncCall)
		}
		s.unending[c] = p
		return
	}
	p.ctx = ctx
	g := s.byDone[done]
	if g == nil {
		if s.byDone == nil {
			s.byDone = make(map[<-chan struct{}]*ctxCalls)
		}
		g = &ctxCalls{calls: make(map[*call]*asyncCall)}
		s.byDone[done] = g
		// Runs on a goroutine of its own, even if ctx has ended: s.mu is
		// free by then.
		g.stop = context.AfterFunc(ctx, func() { s.ended(done, g) })
	}
	g.calls[c] = p
}

// ended answers the calls of g, whose context has ended (done is
// closed), each with its context's error.
func (s *asyncCalls) ended(done <-chan struct{}, g *ctxCalls) {
	s.mu.Lock()
	if s.byDone[done] == g {
		delete(s.byDone, done)
	}
	calls := g.calls
	g.calls = nil
	s.mu.Unlock()
	for c, p := range calls {
		if c.req.Op == lease.TryLock {
			c.abandoned.Store(true) // see Do
		}
		s.finish(c, p, Response{}, p.ctx.Err())
	}
}

// finish gives p its answer unless it has one.
func (s *asyncCalls) finish(c *call, p *asyncCall, resp Response, err error) {
	if !p.answered.CompareAndSwap(false, true) {
		return
	}
	var stop func() bool
	s.mu.Lock()
	if p.ctx == nil {
		delete(s.unending, c)
	} else if g := s.byDone[p.ctx.Done()]; g != nil && g.calls[c] == p {
		delete(g.calls, c)
		if len(g.calls) == 0 { // the last: stop watching its context
			delete(s.byDone, p.ctx.Done())
			stop = g.stop
		}
	}
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
	p.done(resp, err)
}

// closeAll answers every pending call ErrClosed (the Ring is closed).
func (s *asyncCalls) closeAll() {
	s.mu.Lock()
	var pending []*asyncCall
	for _, p := range s.unending {
		pending = append(pending, p)
	}
	for _, g := range s.byDone {
		g.stop()
		for _, p := range g.calls {
			pending = append(pending, p)
		}
	}
	s.unending, s.byDone = nil, nil
	s.mu.Unlock()
	for _, p := range pending {
		if p.answered.CompareAndSwap(false, true) {
			p.done(Response{}, ErrClosed)
		}
	}
}
