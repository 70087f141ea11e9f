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
	// and here the answer runs on its goroutine, before it is done. The
	// call carries its answer's function, so a call is one allocation.
	c := &call{req: req}
	c.async = asyncCall{ring: r, done: done, ctx: ctx}
	// Posted even if ctx has ended (answered then), as Do posts it: the
	// actor counts it (enter) and skips an abandoned TryLock.
	r.async.add(c)
	if r.closed.Load() { // Close may have passed over it
		r.async.finish(c, Response{}, ErrClosed)
		return
	}
	r.actors[i].mailbox.postInline(c)
}

// answered takes the actor's answer to c, a DoAsync call, on the actor's
// goroutine.
func (r *Ring) answered(c *call, resp Response) {
	if resp.raise == nil {
		r.async.finish(c, resp, nil)
		return
	}
	// Rare (a new reign's first grants, a longer TTL than any before):
	// wait for the raise as Do does, off the actor.
	ctx := c.async.ctx
	go func() {
		select {
		case <-resp.raise:
		case <-ctx.Done():
			r.async.finish(c, Response{}, ctx.Err())
			return
		case <-r.done:
			r.async.finish(c, Response{}, ErrClosed)
			return
		}
		resp, err := r.Do(ctx, c.req)
		r.async.finish(c, resp, err)
	}()
}

// asyncCall is a DoAsync call's answer, given once, and its place among
// the calls pending on its context (under asyncCalls.mu).
type asyncCall struct {
	ring     *Ring
	done     func(Response, error)
	ctx      context.Context
	answered atomic.Bool

	group      *ctxCalls // nil: not pending
	prev, next *call
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
	unending ctxCalls // calls whose context cannot end
}

// ctxCalls are the calls pending on one context, linked through their
// asyncCall, and the context's watch.
type ctxCalls struct {
	head *call
	n    int
	stop func() bool // nil for asyncCalls.unending
}

func (g *ctxCalls) push(c *call) {
	a := &c.async
	a.group, a.prev, a.next = g, nil, g.head
	if g.head != nil {
		g.head.async.prev = c
	}
	g.head = c
	g.n++
}

func (g *ctxCalls) remove(c *call) {
	a := &c.async
	if a.prev != nil {
		a.prev.async.next = a.next
	} else {
		g.head = a.next
	}
	if a.next != nil {
		a.next.async.prev = a.prev
	}
	a.group, a.prev, a.next = nil, nil, nil
	g.n--
}

// take removes and returns every call of g.
func (g *ctxCalls) take() []*call {
	calls := make([]*call, 0, g.n)
	for g.head != nil {
		c := g.head
		g.remove(c)
		calls = append(calls, c)
	}
	return calls
}

// add registers c, unless it is answered already.
func (s *asyncCalls) add(c *call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.async.answered.Load() {
		return
	}
	ctx := c.async.ctx
	done := ctx.Done()
	if done == nil {
		s.unending.push(c)
		return
	}
	g := s.byDone[done]
	if g == nil {
		if s.byDone == nil {
			s.byDone = make(map[<-chan struct{}]*ctxCalls)
		}
		g = &ctxCalls{}
		s.byDone[done] = g
		// Runs on a goroutine of its own, even if ctx has ended: s.mu is
		// free by then.
		g.stop = context.AfterFunc(ctx, func() { s.ended(done, g) })
	}
	g.push(c)
}

// ended answers the calls of g, whose context has ended (done is
// closed), each with its context's error.
func (s *asyncCalls) ended(done <-chan struct{}, g *ctxCalls) {
	s.mu.Lock()
	if s.byDone[done] == g {
		delete(s.byDone, done)
	}
	calls := g.take()
	s.mu.Unlock()
	for _, c := range calls {
		if c.req.Op == lease.TryLock {
			c.abandoned.Store(true) // see Do
		}
		s.finish(c, Response{}, c.async.ctx.Err())
	}
}

// finish gives c its answer unless it has one.
func (s *asyncCalls) finish(c *call, resp Response, err error) {
	a := &c.async
	if !a.answered.CompareAndSwap(false, true) {
		return
	}
	var stop func() bool
	s.mu.Lock()
	if g := a.group; g != nil {
		g.remove(c)
		if g.n == 0 && g.stop != nil { // the last of its context: stop watching it
			if done := a.ctx.Done(); s.byDone[done] == g {
				delete(s.byDone, done)
			}
			stop = g.stop
		}
	}
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
	a.done(resp, err)
}

// closeAll answers every pending call ErrClosed (the Ring is closed).
func (s *asyncCalls) closeAll() {
	s.mu.Lock()
	pending := s.unending.take()
	for _, g := range s.byDone {
		g.stop()
		pending = append(pending, g.take()...)
	}
	s.byDone = nil
	s.mu.Unlock()
	for _, c := range pending {
		if c.async.answered.CompareAndSwap(false, true) {
			c.async.done(Response{}, ErrClosed)
		}
	}
}
