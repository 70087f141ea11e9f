package actors

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// DoAsync runs req as Do does, without a caller waiting: done.Answer gets the
// answer, exactly once, on the goroutine that has it (the caller's own
// when the actor is idle and decides at once, else the actor's worker or
// the goroutine that settles a persistent write). A server that answers
// many requests of one connection need not park a goroutine on each
// until its write commits and wake it to send the answer: under load,
// those wake-ups were most of a node's waiting for a processor.
//
// A waiting TryLock (Wait != 0) waits in its resource's queue as with Do,
// with no goroutine parked on it: its grant is answered by the goroutine
// that decides it (the release's, most often), and the end of its wait by
// a timer. When ctx ends, or StopWaiting, the actor is told and answers it
// (ctx.Err(), ErrClosed) once it has let it go, unless it was granted
// first: a release its caller sends after that answer finds the lock as
// the leave left it.
//
// A call that does not wait is answered ctx.Err() at once when ctx ends
// first and, as with Do, a TryLock not decided yet is then not granted.
// Close answers the calls still pending ErrClosed. done.Answer must not block
// (it may run inside the actor) and must not call the Ring on its
// goroutine. req must not name several locks (Also nil): those go
// through Do.
//
// The call can also be withdrawn on its own (Pending.Withdraw), as the
// end of a context of its own would end it: a server whose stream
// carries many waiting calls passes the stream's context with each, and
// withdraws one when its client cancels it. A context and its watch for
// each call were most of the allocations of a hot lock's hand-off.
func (r *Ring) DoAsync(ctx context.Context, req Request, done Answerer) Pending {
	if req.Also != nil {
		panic("actors: DoAsync of a request that names several locks")
	}
	if r.closed.Load() {
		done.Answer(Response{}, ErrClosed)
		return Pending{}
	}
	i := r.index(req.Resource)
	if !r.actors[i].enter() {
		done.Answer(Response{Status: lease.MustRetry}, nil)
		return Pending{}
	}
	// Not from the pool: the actor may look at a call after answering it,
	// and here the answer runs on its goroutine, before it is done. The
	// call carries its answer's function, so a call is one allocation.
	c := &call{req: req}
	c.async = asyncCall{ring: r, done: done, ctx: ctx}
	waits := req.Op == lease.TryLock && req.Wait != 0
	if waits {
		c.async.waits = true
		// The call outlives the request: not the caller's buffer.
		c.req.Owner = append([]byte(nil), c.req.Owner...)
		if req.Wait > 0 {
			pid := r.pids[i]
			// Set before the call is registered or sent: finish stops it.
			c.async.timer = time.AfterFunc(req.Wait, func() {
				r.system.Root.Send(pid, &leave{c: c, waitOver: true})
			})
		}
	}
	// Posted even if ctx has ended (answered then), as Do posts it: the
	// actor counts it (enter) and skips an abandoned TryLock.
	stopped := r.async.add(c)
	if r.closed.Load() { // Close may have passed over it
		r.async.finish(c, Response{}, ErrClosed)
		return Pending{}
	}
	r.actors[i].mailbox.postInline(c)
	if waits && stopped {
		r.leaveAsync(c, ErrClosed) // StopWaiting came first
	}
	return Pending{c}
}

// An Answerer takes the answer of a call DoAsync started. An interface,
// not a function: a method value given as a function is one more
// allocation for every call.
type Answerer interface {
	Answer(Response, error)
}

// AnswerFunc is a function as an Answerer.
type AnswerFunc func(Response, error)

// Answer calls f.
func (f AnswerFunc) Answer(resp Response, err error) { f(resp, err) }

// Pending is a call DoAsync started, until its answer.
type Pending struct{ c *call }

// LeftError answers a call withdrawn before it was granted or answered;
// Err is the reason its Withdraw was given.
type LeftError struct{ Err error }

func (e *LeftError) Error() string { return "actors: call withdrawn: " + e.Err.Error() }
func (e *LeftError) Unwrap() error { return e.Err }

// Withdraw ends the call as the end of its context would, answered
// &LeftError{err} instead of the context's error: a waiting TryLock
// leaves its queue and is answered so once its actor has let it go,
// unless it was granted first; any other call not answered yet is
// answered so at once (a TryLock not decided yet is then not granted).
// A call answered, or leaving, already is left as it is; so is the zero
// Pending (DoAsync answered it before it returned).
func (p Pending) Withdraw(err error) {
	if p.c != nil {
		p.c.async.ring.async.withdraw(p.c, &LeftError{Err: err})
	}
}

// leaveAsync tells the actor that the waiting DoAsync call c is to leave
// its queue, to be answered err unless it was granted first.
func (r *Ring) leaveAsync(c *call, err error) {
	r.system.Root.Send(r.route(c.req.Resource), &leave{c: c, err: err})
	if r.onLeave != nil {
		r.onLeave(c.req.Resource)
	}
}

// answered takes the actor's answer to c, a DoAsync call, on the actor's
// goroutine.
func (r *Ring) answered(c *call, resp Response) {
	if resp.raise == nil {
		r.async.finish(c, resp, nil)
		return
	}
	// Rare (a new reign's first grants, a longer TTL than any before):
	// wait for the raise as Do does, off the actor. Not for a waiting
	// call already told to leave (it is not granted: answer why it left);
	// else the goroutine's Do answers it, with its own withdrawal, and the
	// end of ctx no longer does (raising).
	// The goroutine's context ends with the call's, or when the call is
	// withdrawn (with its LeftError as the cause).
	ctx, withdraw := context.WithCancelCause(c.async.ctx)
	if err, leaving := r.async.raising(c, withdraw); leaving {
		withdraw(nil)
		r.async.finish(c, Response{}, err)
		return
	}
	// Only the raise is taken into the goroutine: a closure over resp
	// would move every answer given here to the heap.
	raise := resp.raise
	go func() {
		defer withdraw(nil)
		select {
		case <-raise:
		case <-ctx.Done():
			r.async.finish(c, Response{}, endedBy(ctx))
			return
		case <-r.done:
			r.async.finish(c, Response{}, ErrClosed)
			return
		}
		resp, err := r.Do(ctx, c.req)
		if err != nil && ctx.Err() != nil {
			err = endedBy(ctx)
		}
		r.async.finish(c, resp, err)
	}()
}

// endedBy is the error that answers a call whose raise goroutine's
// context ended: its withdrawal's, else the context's.
func endedBy(ctx context.Context) error {
	if left, ok := context.Cause(ctx).(*LeftError); ok {
		return left
	}
	return ctx.Err()
}

// asyncCall is a DoAsync call's answer, given once, and its place among
// the calls pending on its context (under asyncCalls.mu).
type asyncCall struct {
	ring     *Ring
	done     Answerer
	ctx      context.Context
	answered atomic.Bool
	waits    bool        // a waiting TryLock
	timer    *time.Timer // its end of wait; set before it is registered

	group      *ctxCalls // nil: not pending
	prev, next *call
	leaveErr   error // in asyncCalls.leaving: the answer if not granted
	raise      bool  // answered by a goroutine that waits for a raise
	// withdrawRaise ends that goroutine's wait (Pending.Withdraw).
	withdrawRaise context.CancelCauseFunc
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
//
// A context stays watched when its last pending call is answered, until
// it ends or more than maxIdleWatches such contexts are kept: a stream
// whose requests come one at a time (a hot lock's releases) would
// otherwise watch its context anew, and let it go, for each request.
type asyncCalls struct {
	mu       sync.Mutex
	byDone   map[<-chan struct{}]*ctxCalls
	idle     int      // groups in byDone with no call pending
	unending ctxCalls // calls whose context cannot end
	// leaving are waiting calls whose context ended, or that StopWaiting
	// ended, told to leave their queues: the actor answers each.
	leaving        ctxCalls
	stoppedWaiting bool // StopWaiting was called
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

// add registers c, unless it is answered already, and reports whether
// StopWaiting was called.
func (s *asyncCalls) add(c *call) (stoppedWaiting bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.async.answered.Load() {
		return s.stoppedWaiting
	}
	ctx := c.async.ctx
	done := ctx.Done()
	if done == nil {
		s.unending.push(c)
		return s.stoppedWaiting
	}
	g := s.byDone[done]
	switch {
	case g != nil && g.n == 0:
		s.idle--
	case g == nil:
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
	return s.stoppedWaiting
}

// ended answers the calls of g, whose context has ended (done is
// closed), each with its context's error. A waiting call is told to
// leave instead, and answered by its actor; one waiting for a raise is
// answered by the goroutine that waits.
func (s *asyncCalls) ended(done <-chan struct{}, g *ctxCalls) {
	s.mu.Lock()
	if s.byDone[done] == g {
		delete(s.byDone, done)
		if g.n == 0 {
			s.idle--
		}
	}
	var now, leave []*call
	for _, c := range g.take() {
		switch {
		case c.async.raise:
		case c.async.waits:
			leave = s.toLeaving(leave, c, c.async.ctx.Err())
		default:
			now = append(now, c)
		}
	}
	s.mu.Unlock()
	sendLeaves(leave)
	for _, c := range now {
		if c.req.Op == lease.TryLock {
			c.abandoned.Store(true) // see Do
		}
		s.finish(c, Response{}, c.async.ctx.Err())
	}
}

// stopWaiting tells every waiting call, and those that come, to leave
// their queues (Ring.StopWaiting); their actors answer them ErrClosed.
func (s *asyncCalls) stopWaiting() {
	s.mu.Lock()
	s.stoppedWaiting = true
	var leave []*call
	var stops []func() bool
	move := func(g *ctxCalls) {
		for c := g.head; c != nil; {
			next := c.async.next
			if c.async.waits && !c.async.raise {
				g.remove(c)
				leave = s.toLeaving(leave, c, ErrClosed)
			}
			c = next
		}
	}
	move(&s.unending)
	for done, g := range s.byDone {
		move(g)
		if g.n == 0 {
			delete(s.byDone, done)
			stops = append(stops, g.stop)
		}
	}
	s.idle = 0 // every group with no call pending was let go
	s.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
	sendLeaves(leave)
}

// toLeaving moves the waiting call c, taken from its group, to s.leaving,
// to be answered err unless granted first, and appends it to leave; under
// s.mu.
func (s *asyncCalls) toLeaving(leave []*call, c *call, err error) []*call {
	c.async.leaveErr = err
	s.leaving.push(c)
	return append(leave, c)
}

// sendLeaves tells the actors of the calls toLeaving moved; not under
// s.mu.
func sendLeaves(leave []*call) {
	for _, c := range leave {
		c.async.ring.leaveAsync(c, c.async.leaveErr)
	}
}

// raising reports whether c, answered with a raise to wait for, is leaving
// (and why) or answered already; if not, it marks c as answered by the
// goroutine that waits for the raise, not by the end of its context, and
// withdraw as what ends that goroutine's wait when c is withdrawn.
func (s *asyncCalls) raising(c *call, withdraw context.CancelCauseFunc) (err error, leaving bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.async.group == &s.leaving || c.async.answered.Load() {
		return c.async.leaveErr, true
	}
	c.async.raise = true
	c.async.withdrawRaise = withdraw
	return nil, false
}

// withdraw ends c as the end of its context would, answered err (see
// Pending.Withdraw).
func (s *asyncCalls) withdraw(c *call, err error) {
	a := &c.async
	s.mu.Lock()
	g := a.group
	if g == nil || g == &s.leaving || a.answered.Load() {
		s.mu.Unlock() // answered, being answered, or leaving
		return
	}
	if a.raise {
		// Its goroutine answers it; withdrawn once.
		cancel := a.withdrawRaise
		a.withdrawRaise = nil
		s.mu.Unlock()
		if cancel != nil {
			cancel(err)
		}
		return
	}
	stop := s.unlink(c)
	var leave []*call
	if a.waits {
		leave = s.toLeaving(nil, c, err)
	}
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
	if leave != nil {
		sendLeaves(leave)
		return
	}
	if c.req.Op == lease.TryLock {
		c.abandoned.Store(true) // see Do
	}
	s.finish(c, Response{}, err)
}

// unlink takes c out of its group, under s.mu. When that leaves more than
// maxIdleWatches contexts watched with no call pending, it lets them all
// go and returns what stops their watches, to run once s.mu is released.
func (s *asyncCalls) unlink(c *call) (stop func()) {
	g := c.async.group
	if g == nil {
		return nil
	}
	g.remove(c)
	if g.n > 0 || g.stop == nil || s.byDone[c.async.ctx.Done()] != g {
		return nil
	}
	if s.idle++; s.idle <= maxIdleWatches {
		return nil
	}
	var stops []func() bool
	for done, g := range s.byDone {
		if g.n == 0 {
			delete(s.byDone, done)
			stops = append(stops, g.stop)
		}
	}
	s.idle = 0
	return func() {
		for _, stop := range stops {
			stop()
		}
	}
}

// maxIdleWatches bounds the contexts kept watched with no call pending
// (see asyncCalls): a node's streams, a few a connection, end and take
// their watch with them, but a caller's context that never ends would
// otherwise be watched for as long as the Ring lives.
const maxIdleWatches = 1024

// finish gives c its answer unless it has one.
func (s *asyncCalls) finish(c *call, resp Response, err error) {
	a := &c.async
	if !a.answered.CompareAndSwap(false, true) {
		return
	}
	if a.timer != nil {
		a.timer.Stop()
	}
	s.mu.Lock()
	stop := s.unlink(c)
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
	a.done.Answer(resp, err)
}

// closeAll answers every pending call ErrClosed (the Ring is closed).
func (s *asyncCalls) closeAll() {
	s.mu.Lock()
	pending := s.unending.take()
	pending = append(pending, s.leaving.take()...)
	for _, g := range s.byDone {
		g.stop()
		pending = append(pending, g.take()...)
	}
	s.byDone, s.idle = nil, 0
	s.mu.Unlock()
	for _, c := range pending {
		if c.async.answered.CompareAndSwap(false, true) {
			if t := c.async.timer; t != nil {
				t.Stop()
			}
			c.async.done.Answer(Response{}, ErrClosed)
		}
	}
}
