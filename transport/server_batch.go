package transport

import (
	"context"
	"errors"
	"io"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/kahunago/kahuna/lease"
)

// serveBatch serves one batch stream. Every message is handled
// concurrently, at most MaxInFlightPerStream at once (further messages wait
// unread, so flow control pushes back on a flooding sender), and answered
// as soon as it is done: answers leave out of order and the sender matches
// them by RequestId. l serves the requests.
//
// A Batch stream's requests to a Locker that runs requests without a
// goroutine waiting on each (asyncLocker: the node) are started on the
// reading goroutine. The answers it has at once (an idle lock actor
// decides on the caller's goroutine) are held until the reader has
// started every request of the message, and of the framed messages read
// whole with it, then sent together in one message from the reader: each
// answer sent on its own took a socket write of its own, and a worker
// woken for each request a processor's wake-up. An answer that comes
// later (a persistent write's, once settled; a waiting Lock's grant) goes
// from the goroutine that has it to the outbox's writer. With 64 callers,
// waking a worker for each request and again for each answer was most of
// the node's waiting for a processor (docs/benchmarks-log.md).
//
// Other requests, and every request to another Locker, are handled by
// the stream's workers (see workers): goroutines started on demand and
// kept until the stream ends, so a busy stream does not pay for a new
// goroutine (and the growth of its stack) per message.
//
// The stream ends when the sender closes its side (after every received
// message is answered) or breaks (with that error; the rest of the server
// is unaffected), or when the server shuts down: then the messages already
// received are answered, later ones are dropped unprocessed, and the stream
// ends with OK. So a sender that sees a clean end knows that whatever is
// still unanswered was never processed and may be sent again elsewhere.
func (s *Server) serveBatch(stream grpc.ServerStream, l lease.Locker) error {
	return s.serveStream(stream, l, false)
}

// batchHeader marks the headers of a Batch stream the server serves.
const batchHeader = "kahuna-batch"

// servePacked serves one Batch stream (kahuna.v1): serveBatch with many
// requests to a message each way. The headers go out at once, so a client
// learns at the stream's start that the server offers it (see
// batchStream.stream).
func (s *Server) servePacked(stream grpc.ServerStream, l lease.Locker) error {
	if err := stream.SendHeader(metadata.Pairs(batchHeader, "1")); err != nil {
		return err
	}
	return s.serveStream(stream, l, true)
}

// serveStream serves a batch stream of single requests (Kahuna's) or of
// packed ones (kahuna.v1's Batch).
func (s *Server) serveStream(stream grpc.ServerStream, l lease.Locker, packed bool) error {
	ctx := stream.Context()
	var (
		mu       sync.Mutex // orders wg.Add against the drain's wg.Wait
		stopping bool
		sendMu   sync.Mutex // grpc allows one Send at a time
		wg       sync.WaitGroup
	)
	slots := make(chan struct{}, s.opts.MaxInFlightPerStream)
	recvErr := make(chan error, 1)

	// The answer is encoded (SendMsg copies it out), and the Locker kept
	// at most the request's resource and owner, which are allocated
	// afresh for each message: m is free again.
	done := func(m *batchMsg) {
		batchMsgs.Put(m)
		<-slots
		wg.Done()
	}
	// A failed Send means the stream is broken; Recv reports it. grpc ends
	// the stream with the Send's error status, never OK, so a sender never
	// takes this processed request for one dropped unprocessed
	// (TestServerUnsendableAnswerEndsTheStream). Send only queues the
	// encoded answer for grpc's writer, which flushes many answers per
	// socket write.
	out := &outbox{send: func(p *answerPack) { _ = stream.SendMsg(p) }, done: done, busy: func() bool { return len(slots) > 1 }}
	serve := func(m *batchMsg) {
		switch {
		case !s.answer(ctx, l, m):
			done(m)
		case packed:
			out.put(m)
		default:
			sendMu.Lock()
			_ = stream.SendMsg(m)
			sendMu.Unlock()
			done(m)
		}
	}
	workers := newWorkers(serve, urgent)
	defer workers.close()
	al, async := l.(asyncLocker)
	async = async && packed
	var now *nowStarter
	if async {
		out.startWriter()
		defer out.stopWriter()
		now = newNowStarter(s, ctx, al, out, done, func(m *batchMsg, r lease.Request, c lease.Checked) {
			if !s.answerLater(ctx, al, m, r, c, out, done) {
				workers.run(m)
			}
		})
	}

	// more, of a framed stream, reports whether the next message is read
	// whole already: its answers can join those held.
	more, _ := stream.(interface{ more() bool })
	go func() {
		var one [1]*batchMsg
		pack := new(batchPack)
		held := false
		defer func() {
			if held {
				out.release()
			}
		}()
		for {
			var msgs []*batchMsg
			if packed {
				if err := stream.RecvMsg(pack); err != nil {
					recvErr <- err
					return
				}
				msgs = pack.msgs
				if async && !held {
					out.hold()
					held = true
				}
			} else {
				m := batchMsgs.Get().(*batchMsg)
				if err := stream.RecvMsg(m); err != nil {
					batchMsgs.Put(m)
					recvErr <- err
					return
				}
				one[0] = m
				msgs = one[:]
			}
			for i, m := range msgs {
				select {
				case slots <- struct{}{}: // a slot free: no need of the select below
				default:
					if async { // those kept for a start hold slots too
						now.start()
					}
					if held { // the answers held take slots: send them first
						out.release()
						held = false
					}
					select {
					case slots <- struct{}{}:
					case <-ctx.Done():
						putBatchMsgs(msgs[i:])
						msgs = nil // the next Recv fails
					case <-s.draining:
						putBatchMsgs(msgs[i:])
						msgs = nil // dropped unprocessed; the stream is ending
					}
				}
				if msgs == nil {
					break
				}
				mu.Lock()
				if stopping {
					mu.Unlock()
					<-slots
					putBatchMsgs(msgs[i:])
					break
				}
				wg.Add(1)
				mu.Unlock()
				// Started here, a request wakes no goroutine: a release
				// of a lock that others wait for is handed over and
				// answered from the reader, a persistent request waits for
				// its write with no goroutine. The ephemeral ones this
				// node decides itself are kept and started together
				// (DoNowEach): those decided at once are answered with
				// nothing kept for later; one that must wait goes on
				// without the reader, so it holds up no other request.
				if async {
					if r, c, ok := checked(m); ok {
						if lease.Durability(m.durability) != lease.Persistent {
							now.add(m, c)
							continue
						}
						now.start() // what came before it starts first
						if s.answerLater(ctx, al, m, r, c, out, done) {
							continue
						}
					}
				}
				workers.run(m)
			}
			if async {
				now.start()
			}
			if held && (more == nil || !more.more()) {
				out.release()
				held = false
			}
			clear(one[:])
			pack.reset()
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
	// Every handler started must answer before the stream ends: grpc
	// forbids Send after the handler returns.
	wg.Wait()
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// asyncLocker is a Locker that can run a request without a goroutine
// waiting for its outcome (the node: internal/node's DoAsync): out gets
// it. When it takes the request (true), the Withdrawer withdraws it.
type asyncLocker interface {
	DoAsync(ctx context.Context, c lease.Checked, out Outcome) (Withdrawer, bool)
	// DoNowEach runs the ephemeral requests of cs the Locker decides
	// itself: answers[j] (len(answers) ≥ len(cs)) says cs[j] is answered
	// at once (Now, by Res), or that its answer must wait and goes to
	// the Outcome later(j) makes (Taken; at most once, before DoNowEach
	// returns), or neither, when nothing was started. It never waits for
	// an answer.
	DoNowEach(ctx context.Context, cs []lease.Checked, answers []NowAnswer, later func(j int) Outcome)
}

// NowAnswer is what asyncLocker.DoNowEach did with one request.
type NowAnswer struct {
	Res        lease.Result
	Now, Taken bool
}

// An Outcome takes the outcome of a request an asyncLocker started, once,
// on the goroutine that has it, and must not block. An interface, not a
// function: a method value given as a function is one more allocation
// for every request.
type Outcome interface {
	Outcome(lease.LockInfo, lease.Result, error)
}

// A Withdrawer withdraws a request an asyncLocker started, as the end of
// the context it was started with would end it, except that its outcome
// is the error Withdraw is given: a waiting Lock leaves its queue, and is
// answered so once it has left unless it was granted first. A request
// answered already keeps its answer. A LockStream's Locks share the
// stream's context and are withdrawn one by one, by a cancel message or
// shutdown: a context of its own for each waiting Lock, and the lock
// actors' watch of it, were most of what a hot lock's hand-off allocated.
type Withdrawer interface {
	Withdraw(err error)
}

// answerLater starts m on al and reports true if al took it: its answer
// then goes to out when al has it (or, if the stream's context ended by
// then, m is dropped unanswered with done). False: nothing was started.
//
// An answer al has before DoAsync returns (decided at once, by the lock
// actor run on this goroutine or by another) is put in out from here, the
// reader's goroutine, with the others the reader holds; one that comes later is
// handed to out's writer, since the goroutine that has it (a lock
// actor's, one that settles a Raft entry) must not wait on the
// connection. A hot lock's release so goes from the read of the Unlock to
// the write of its answer on one goroutine, the next holder's grant
// written on the way (lockStream).
func (s *Server) answerLater(ctx context.Context, al asyncLocker, m *batchMsg, r lease.Request, c lease.Checked, out *outbox, done func(*batchMsg)) (taken bool) {
	a := newLaterAnswer(s, ctx, m, r, out, done)
	var panicked error
	defer func() {
		if panicked != nil {
			taken = true
			a.Outcome(lease.LockInfo{}, lease.Result{}, panicked)
			a.returned()
		}
	}()
	defer s.recovered(&c, false, &panicked)
	_, taken = al.DoAsync(ctx, c, a)
	a.returned()
	return taken
}

// checked is m's request, checked: ok is false for a malformed or
// invalid one, which the stream's workers answer.
func checked(m *batchMsg) (r lease.Request, c lease.Checked, ok bool) {
	r, ok = m.request()
	if !ok {
		return r, c, false
	}
	c, why := r.Check()
	return r, c, why == ""
}

// nowStarter starts a stream's ephemeral requests on its reader, a
// read's together (DoNowEach): an answer the Locker has at once is held
// with the reader's others; one that must wait gets a laterAnswer, made
// only then; one the Locker did not start goes to rest.
type nowStarter struct {
	s    *Server
	ctx  context.Context
	al   asyncLocker
	out  *outbox
	done func(*batchMsg)
	rest func(m *batchMsg, r lease.Request, c lease.Checked)

	// The requests added since the last start, and their laterAnswers
	// where DoNowEach made one.
	ms      []*batchMsg
	cs      []lease.Checked
	as      []*laterAnswer
	answers []NowAnswer
	later   func(j int) Outcome // n.makeLater, made once
}

func newNowStarter(s *Server, ctx context.Context, al asyncLocker, out *outbox, done func(*batchMsg), rest func(*batchMsg, lease.Request, lease.Checked)) *nowStarter {
	n := &nowStarter{s: s, ctx: ctx, al: al, out: out, done: done, rest: rest}
	n.later = n.makeLater
	return n
}

func (n *nowStarter) makeLater(j int) Outcome {
	n.as[j] = newLaterAnswer(n.s, n.ctx, n.ms[j], n.cs[j].Request(), n.out, n.done)
	return n.as[j]
}

// add keeps m (its request checked, c) for the next start.
func (n *nowStarter) add(m *batchMsg, c lease.Checked) {
	n.ms, n.cs = append(n.ms, m), append(n.cs, c)
}

// start starts the requests added, in the order added; a panic in the
// Locker answers each one it left unanswered Errored, as answerLater's.
func (n *nowStarter) start() {
	if len(n.ms) == 0 {
		return
	}
	n.as = slices.Grow(n.as[:0], len(n.ms))[:len(n.ms)]
	n.answers = slices.Grow(n.answers[:0], len(n.ms))[:len(n.ms)]
	defer func() {
		clear(n.ms)
		clear(n.cs)
		clear(n.as)
		n.ms, n.cs = n.ms[:0], n.cs[:0]
	}()
	var panicked error
	func() {
		defer n.s.recovered(&n.cs[0], false, &panicked)
		n.al.DoNowEach(n.ctx, n.cs, n.answers, n.later)
	}()
	if panicked != nil {
		for j := range n.ms {
			if n.as[j] == nil {
				n.makeLater(j)
			}
			n.as[j].Outcome(lease.LockInfo{}, lease.Result{}, panicked)
			n.as[j].returned()
		}
		return
	}
	for j, m := range n.ms {
		switch a := &n.answers[j]; {
		case a.Now:
			op := n.cs[j].Request().Op
			n.s.observe(op, a.Res.Status)
			m.setAnswer(op, a.Res, lease.LockInfo{})
			n.out.put(m)
		case a.Taken:
			n.as[j].returned()
		default:
			n.rest(m, n.cs[j].Request(), n.cs[j])
		}
	}
}

// laterAnswer is a request answerLater started: its answer, given once,
// and who sends it. One allocation holds it all, for every request
// started so.
type laterAnswer struct {
	s    *Server
	ctx  context.Context
	m    *batchMsg
	out  *outbox
	done func(*batchMsg)
	r    lease.Request

	answered atomic.Bool
	state    atomic.Int32 // laterStarting, then one of the two below
	drop     bool         // no answer is due: written before state says answered
}

func newLaterAnswer(s *Server, ctx context.Context, m *batchMsg, r lease.Request, out *outbox, done func(*batchMsg)) *laterAnswer {
	return &laterAnswer{s: s, ctx: ctx, m: m, out: out, done: done, r: r}
}

const (
	laterStarting         int32 = iota // DoAsync has not returned, no answer yet
	laterAnsweredStarting              // answered before it returned: sent by answerLater
	laterStarted                       // it returned first: the answer goes to out's writer
)

// Outcome implements Outcome: the request's answer.
func (a *laterAnswer) Outcome(info lease.LockInfo, res lease.Result, err error) {
	if !a.answered.CompareAndSwap(false, true) {
		return
	}
	r := &a.r
	if err != nil {
		info, res = lease.LockInfo{}, lease.Result{Status: failedStatus(err)}
		if a.ctx.Err() != nil {
			a.drop = true // the stream is gone: no answer is due
		} else {
			a.s.log.Warn("lock request failed", "op", r.Op, "resource", r.Resource, "status", res.Status, "err", err)
		}
	}
	if !a.drop {
		a.s.observe(r.Op, res.Status)
		a.m.setAnswer(r.Op, res, info)
	}
	if a.state.CompareAndSwap(laterStarting, laterAnsweredStarting) {
		return
	}
	a.send(true)
}

// returned is called once DoAsync has returned (or panicked): it sends
// an answer that came before.
func (a *laterAnswer) returned() {
	if !a.state.CompareAndSwap(laterStarting, laterStarted) {
		a.send(false)
	}
}

func (a *laterAnswer) send(later bool) {
	switch {
	case a.drop:
		a.done(a.m)
	case later:
		a.out.deliver(a.m)
	default:
		a.out.put(a.m)
	}
}

// outbox sends the answers of a Batch stream: a worker with an answer
// sends it, with every answer that is ready by then (after one yield), in
// one message;
// workers whose answers are ready while it sends leave them for it, and it
// sends again until none is left. So answers done together share a
// message, and none waits for a timer or another goroutine.
type outbox struct {
	send func(*answerPack)
	done func(*batchMsg) // after the message holding it is sent
	busy func() bool     // other requests of the stream are in flight

	mu      sync.Mutex
	ready   []*batchMsg
	spare   []*batchMsg
	sending bool
	held    bool       // the reader is starting requests: put leaves answers for release
	pack    answerPack // the sender's

	// The writer sends the answers delivered by the goroutines that
	// settle writes, which must not wait on the connection.
	kick    chan struct{} // capacity 1
	kicked  bool          // a kick is on its way
	stopped chan struct{} // closed when the writer has returned
}

func (o *outbox) startWriter() {
	o.kick = make(chan struct{}, 1)
	o.stopped = make(chan struct{})
	go o.writer()
}

// stopWriter ends the writer once every answer is sent.
func (o *outbox) stopWriter() {
	close(o.kick)
	<-o.stopped
}

func (o *outbox) writer() {
	defer close(o.stopped)
	for range o.kick {
		o.mu.Lock()
		o.kicked = false
		o.sendReady()
	}
}

// deliver hands m's answer to the writer (or to a worker sending now).
func (o *outbox) deliver(m *batchMsg) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ready = append(o.ready, m)
	if !o.sending && !o.kicked {
		// Under mu, before m can be sent and the stream's end close kick;
		// never blocks: the writer took the last kick before kicked cleared.
		o.kicked = true
		o.kick <- struct{}{}
	}
}

func (o *outbox) put(m *batchMsg) {
	o.mu.Lock()
	o.ready = append(o.ready, m)
	if o.sending || o.held && len(o.ready) < MaxBatchRequests {
		o.mu.Unlock()
		return
	}
	o.sending = true
	// While other requests of the stream are in flight, yield once, so
	// workers that are runnable finish their answers into this message
	// (about 11 answers a message with 64 callers). An answer alone goes
	// at once.
	if o.busy() {
		o.mu.Unlock()
		runtime.Gosched()
		o.mu.Lock()
	}
	o.drain()
}

// hold keeps the answers put from now on for release: the reader is
// starting the requests it has read.
func (o *outbox) hold() {
	o.mu.Lock()
	o.held = true
	o.mu.Unlock()
}

// release sends what hold kept, on the caller's goroutine (the
// reader's: the next read waits for the write, as flow control would).
func (o *outbox) release() {
	o.mu.Lock()
	o.held = false
	o.sendReady()
}

// sendReady sends what is ready, unless a send is under way (which sends
// it); called with mu held, it returns with mu released.
func (o *outbox) sendReady() {
	if o.sending || len(o.ready) == 0 {
		o.mu.Unlock()
		return
	}
	o.sending = true
	o.drain()
}

// drain sends until nothing is ready; called with mu held and sending
// set, it returns with mu released and sending cleared.
func (o *outbox) drain() {
	for len(o.ready) > 0 {
		msgs := o.ready
		o.ready = o.spare[:0]
		o.mu.Unlock()
		for rest := msgs; len(rest) > 0; {
			k := min(len(rest), MaxBatchRequests)
			o.pack.msgs = rest[:k]
			o.send(&o.pack)
			rest = rest[k:]
		}
		o.pack.msgs = nil
		for _, m := range msgs {
			o.done(m)
		}
		clear(msgs)
		o.mu.Lock()
		o.spare = msgs[:0]
	}
	o.sending = false
	o.mu.Unlock()
}

func putBatchMsgs(msgs []*batchMsg) {
	for i, m := range msgs {
		batchMsgs.Put(m)
		msgs[i] = nil
	}
}

// batchMsgs recycles the batch streams' messages.
var batchMsgs = sync.Pool{New: func() any { return new(batchMsg) }}

// answer serves one batch message and sets its answer: it echoes Type and
// RequestId and carries the payload of the request's op (see
// batchMsg.request for malformed messages). It returns false when the
// stream's context ended and no answer is due.
func (s *Server) answer(ctx context.Context, l lease.Locker, m *batchMsg) bool {
	r, ok := m.request()
	if !ok {
		s.log.Debug("invalid batch message", "type", m.typ, "requestId", m.id)
	}
	info, res, err := s.serve(ctx, l, r)
	if err != nil {
		return false
	}
	m.setAnswer(r.Op, res, info)
	return true
}

// setAnswer makes res (and info) m's answer, to a request of op.
func (m *batchMsg) setAnswer(op lease.Op, res lease.Result, info lease.LockInfo) {
	m.op, m.res, m.info, m.servedFrom = op, res, info, res.ServedFrom
}

// urgent reports whether m releases or extends a lock: a stream's workers
// serve these first. Messages in flight on a stream are concurrent, so
// any order is correct, and serving releases first shortens how long a
// contended lock stays held (with 64 callers on one lock, a release
// otherwise waits behind every caller's TryLock).
func urgent(m *batchMsg) bool {
	op, ok := batchOp(m.typ)
	return ok && (op == lease.Unlock || op == lease.Extend)
}
