// Package actors runs the ring of lock actors. Each resource belongs to one
// actor, which owns its cached entry and serialises every request for it:
// ephemeral locks are decided and answered in memory, persistent ones are
// decided, handed to the durability backend, and answered when applied.
//
// One name is one lock. An actor keeps one entry per resource, whatever
// durability its requests name: a live holder of either kind makes another
// owner's TryLock of the other kind Busy, and Extend, Unlock and Get see
// the one lock (Extend and Unlock write the way the lock was granted: in
// memory for an ephemeral grant, through the backend for a persistent one).
// On a cache miss the stored record is loaded for every request, so an
// ephemeral request sees a persistent holder.
//
// Token rule. A resource has one token count, shared by both kinds: every
// grant to a new owner, ephemeral or persistent, is the previous grant's
// token + 1 while the entry is cached (for the first ever, the partition's
// token floor: 0, or one above the largest token of a record removed by
// Forget). On a miss the count starts from the larger of the stored
// record's token (or the floor when nothing is stored) and the partition's
// ephemeral base (TokenWindows.TokenBase, and the tokens of evicted
// ephemeral entries, kept in the actor's floors), so no grant of either
// kind is ever below an earlier one of the name: across leader changes,
// restarts and evictions (docs/safety.md).
package actors

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kahunago/kahuna/durability"
	"github.com/kahunago/kahuna/lease"
)

// ErrClosed is returned by calls made on, or in flight during, Close.
var ErrClosed = errors.New("actors: ring closed")

// Eviction rule (docs/design.md, Cache eviction): an actor collects every collectEvery messages,
// and only when it caches at least collectMinEntries entries.
const (
	collectEvery      = 500
	collectMinEntries = 200
)

// Config configures a Ring.
type Config struct {
	// Actors is the number of lock actors (≥ 1).
	Actors int
	// CacheEntryTTL is how long an entry must sit unused before it may be evicted.
	CacheEntryTTL time.Duration
	// CacheEntriesToRemove caps the evictions of one collection pass.
	CacheEntriesToRemove int
	// Bounds of one actor's memory (0: no bound). Each refusal is counted
	// in Stats.Refused.
	//   - MaxEntries caps the entries it caches. A request that needs a new
	//     entry (a grant, or a wait or watch on an uncached name) when the
	//     actor is full has lapsed entries evicted first (up to
	//     CacheEntriesToRemove, however recently used); with still no room
	//     it is answered MustRetry, nothing applied (a Watch: ErrFull).
	//     Reads of uncached names are answered without caching them.
	//   - MaxQueued caps the requests queued behind one resource's write in
	//     flight; beyond it a request is answered MustRetry at once.
	//   - MaxPending caps the requests Do has sent to the actor that it has
	//     not taken from its mailbox yet; beyond it Do answers MustRetry
	//     without sending. (protoactor's bounded mailboxes block the sender
	//     or drop messages unanswered, and have no priorities, so the bound
	//     is counted here instead.)
	MaxEntries, MaxQueued, MaxPending int
	// Backend commits persistent locks.
	Backend durability.Backend
	// Serving reports whether this node may answer for partition p now,
	// and the leader term persistent decisions are tagged with. Actors
	// check it for every decision, so a deposed leader stops at once.
	Serving func(p int) (term uint64, ok bool)
	// UnsafeNoEvictionFloor forgets an evicted ephemeral entry's token, so
	// the name's next grant may repeat it: a negative control for the
	// fault tests, never for production.
	UnsafeNoEvictionFloor bool
	// UnsafeTokenRepeat breaks the token rule: a grant to a new owner of
	// a name that has a record or entry takes the last grant's token again
	// instead of one more. A negative control for the fault tests, never
	// for production.
	UnsafeTokenRepeat bool
	// UnsafePermitOvercommit grants a semaphore's permits with every slot
	// taken as free, live ones included (the lowest first): more holders
	// than the limit; and a read/write lock with its holders' leases taken
	// as lapsed: a writer beside readers or another writer. A negative
	// control, never for production.
	UnsafePermitOvercommit bool
	// UnsafeProclaimAnyValue takes a proclaim from any owner with the
	// holder's candidate ID, whatever its value, instead of from the
	// holder alone: a late proclaim undoes a later one. A negative
	// control, never for production.
	UnsafeProclaimAnyValue bool
	// UnsafeNoRenewalFloor loads a persistent lease at its stored expiry
	// alone, though renewals kept in a former leader's memory may have
	// promised it longer (renew.go): a new leader grants it early. A
	// negative control, never for production.
	UnsafeNoRenewalFloor bool
	// UnsafeGroupPartial proposes the grants of a lock of several names
	// one by one, and even when another of its names was not granted: a
	// partial grant. A negative control, never for production.
	UnsafeGroupPartial bool
	// UnsafeDropHandedOver makes Install keep nothing: the leases handed
	// over are lost, though the new leader waits none of them out. A
	// negative control for the fault tests, never for production.
	UnsafeDropHandedOver bool
	// UnsafeUnsureNotGranted answers a waiter whose grant's outcome is
	// unknown (it may hold the lock) Busy or MustRetry, "certainly not
	// granted", instead of Errored: a negative control for the fault
	// tests, never for production.
	UnsafeUnsureNotGranted bool
	// Tokens bounds ephemeral fencing tokens (partition.Leadership); nil:
	// unbounded, from 0 (a node whose ephemeral locks never outlive it).
	Tokens TokenWindows
	// Now is the clock (default time.Now). Leases are measured on its
	// monotonic reading.
	Now func() time.Time
	// Logger receives the few events worth logging (nil = discard).
	Logger *slog.Logger

	onQueued  func(resource string)                   // test hook: a call waits behind a write
	onWait    func(resource string)                   // test hook: a call joined the wait queue
	onLeave   func(resource string)                   // test hook: a leaving caller's leave is queued
	afterFunc func(d time.Duration, f func()) stopper // the holders' expiry timers (default time.AfterFunc; tests swap it)
}

// TokenWindows keeps ephemeral fencing tokens rising across leader
// changes (partition.Leadership implements it): each reign of a partition
// grants ephemeral tokens from a base above every earlier reign's, below a
// limit raised through Raft.
type TokenWindows interface {
	// TokenBase is the least token a first grant of a name of p may take
	// (the latest reign's base: above every ephemeral token of earlier
	// reigns).
	TokenBase(p int) int64
	// TokenWindow is p's window in term (ok false: none for term).
	TokenWindow(p int, term uint64) (w lease.Window, ok bool)
	// RaiseTokens raises p's limit in term past want, in the background;
	// the channel is closed when that raise (or one under way) ends.
	RaiseTokens(p int, term uint64, want int64) <-chan struct{}
	// RaiseTTL raises p's TTL bound in term to at least ttl, likewise.
	RaiseTTL(p int, term uint64, ttl time.Duration) <-chan struct{}
}

type unbounded struct{}

func (unbounded) TokenBase(int) int64 { return 0 }
func (unbounded) TokenWindow(int, uint64) (lease.Window, bool) {
	return lease.Window{Limit: math.MaxInt64, Soon: math.MaxInt64, TTL: math.MaxInt64}, true
}
func (unbounded) RaiseTokens(int, uint64, int64) <-chan struct{}      { return nil }
func (unbounded) RaiseTTL(int, uint64, time.Duration) <-chan struct{} { return nil }

// Request is one lock request (lease.Request, checked by the caller:
// Request.Check) with the resource's partition, computed by the caller.
//
// Wait, for a TryLock, is how long it may wait (lease.WaitForever: until
// Do's ctx ends) when another owner holds the lock: it then joins the
// resource's FIFO queue in its actor and is granted, with a new token, in
// the same step that frees the lock (an Unlock, or the holder's expiry,
// noticed by a timer). A waiter is answered Busy when its wait ends with
// the lock still held, or at once when the queue holds lease.MaxWaiters;
// MustRetry when the partition is dropped or the node stops serving it.
// The queue lives only in the actor's memory, which is the partition
// leader's: nothing of it survives a leader change (its waiters are told
// MustRetry and retry). Wait 0 is a plain TryLock.
type Request struct {
	lease.Request
	Partition int

	// forget, set by Forget only, asks for the removal of the resource's
	// stored record, if it is still the free one stored at forgetAt.
	forget   bool
	forgetAt uint64
}

// Response is the answer to a Request. For Got, Owner and Expires describe
// the lock; Owner is shared with the actor's cache and must not be modified.
type Response struct {
	Status  lease.Status
	Token   int64
	Owner   []byte
	Expires time.Time
	// Waited, for a grant to a waiting TryLock, is how long it sat in the
	// wait queue before the decision that granted it (on the actors'
	// clock); the lease started then.
	Waited time.Duration
	// Grants, for a semaphore's TryLock or Extend, are the permits granted
	// or extended; Reason, for InvalidInput, says why.
	Grants []lease.Grant
	// Free, with a semaphore's Grants, is the permits left free.
	Free   int
	Reason string
	// Each, for a batch (batch.go), is each name's status.
	Each []lease.Status
	// Holders, for a Get of a semaphore or a read/write lock, are its
	// live holders (Expires: when the last one's lease ends).
	Holders []lease.Holder

	// ready: a group's call was granted and its write is held for the
	// group's proposal (group.go); its outcome is answered next.
	ready bool
	// raise, with Status MustRetry, says the call was not decided because
	// its ephemeral grant needs a token past the partition's window: Do
	// asks again once the window is raised (closed).
	raise <-chan struct{}
}

// Ring is a fixed set of lock actors; a resource always goes to the same one.
type Ring struct {
	system *actor.ActorSystem
	pids   []*actor.PID
	actors []*lockActor
	seed   maphash.Seed
	disp   *dispatcher
	calls  sync.Pool
	done   chan struct{}
	closed atomic.Bool
	once   sync.Once
	// unwait is closed by StopWaiting: waiting calls leave their queues.
	unwait     chan struct{}
	unwaitOnce sync.Once
	onLeave    func(resource string) // Config.onLeave
	async      asyncCalls            // DoAsync's calls not answered yet
}

// NewRing spawns cfg.Actors lock actors.
func NewRing(cfg Config) (*Ring, error) {
	if cfg.Actors < 1 {
		return nil, fmt.Errorf("actors: need at least 1 lock actor, got %d", cfg.Actors)
	}
	if cfg.Backend == nil || cfg.Serving == nil {
		return nil, errors.New("actors: Backend and Serving are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Tokens == nil {
		cfg.Tokens = unbounded{}
	}
	if cfg.afterFunc == nil {
		cfg.afterFunc = func(d time.Duration, f func()) stopper { return time.AfterFunc(d, f) }
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg.Logger = logger
	r := &Ring{
		system: actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
			// protoactor's Info lines (system started, dead letters) are noise here.
			return slog.New(warnAndAbove{logger.Handler()}).With("lib", "protoactor")
		})),
		seed:    maphash.MakeSeed(),
		disp:    &dispatcher{},
		done:    make(chan struct{}),
		unwait:  make(chan struct{}),
		onLeave: cfg.onLeave,
	}
	r.calls.New = func() any { return &call{reply: make(chan Response, 1)} }
	// A panic while handling one message is recovered inside the actor
	// (the caller gets Errored); resuming here is the backstop so the
	// actor's cache is never thrown away by a restart.
	resume := actor.NewOneForOneStrategy(10, time.Second, func(any) actor.Directive { return actor.ResumeDirective })
	for i := 0; i < cfg.Actors; i++ {
		a := newLockActor(cfg, r.system.Root)
		a.mailbox = newMailbox()
		props := actor.PropsFromProducer(func() actor.Actor { return a }, actor.WithGuardian(resume), actor.WithDispatcher(r.disp),
			actor.WithMailbox(func() actor.Mailbox { return a.mailbox }))
		pid, err := r.system.Root.SpawnNamed(props, fmt.Sprintf("lock-%d", i))
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("actors: spawn lock actor %d: %w", i, err)
		}
		a.self = pid
		r.pids = append(r.pids, pid)
		r.actors = append(r.actors, a)
	}
	return r, nil
}

// warnAndAbove drops records below Warn.
type warnAndAbove struct{ slog.Handler }

func (h warnAndAbove) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && h.Handler.Enabled(ctx, l)
}

func (h warnAndAbove) WithAttrs(as []slog.Attr) slog.Handler {
	return warnAndAbove{h.Handler.WithAttrs(as)}
}

func (h warnAndAbove) WithGroup(name string) slog.Handler {
	return warnAndAbove{h.Handler.WithGroup(name)}
}

// route picks the actor of a resource.
func (r *Ring) route(resource string) *actor.PID {
	return r.pids[r.index(resource)]
}

func (r *Ring) index(resource string) int {
	return int(maphash.String(r.seed, resource) % uint64(len(r.pids)))
}

// enter counts a call about to be sent to a, and reports false, counting
// nothing, if a already has MaxPending calls waiting in its mailbox.
func (a *lockActor) enter() bool {
	if a.pending.Add(1) > int64(a.cfg.MaxPending) && a.cfg.MaxPending > 0 {
		a.pending.Add(-1)
		a.refused.Add(1)
		return false
	}
	return true
}

// Do runs req on the resource's actor and waits for the answer, the end of
// ctx (ctx.Err() is returned unchanged) or Close (ErrClosed). An actor
// with Config.MaxPending requests in its mailbox answers MustRetry at
// once, without the request being sent.
//
// An ephemeral grant (or extension) that needs a token or a TTL past its
// partition's window (the first of a reign, a longer TTL than any before,
// or a window used up faster than it was raised in the background) waits
// for the raise, one Raft write, and is asked again, at most raiseRounds
// times; a waiting TryLock asks again with what is left of its wait, at
// the back of the queue.
func (r *Ring) Do(ctx context.Context, req Request) (Response, error) {
	if req.Also != nil {
		if r.closed.Load() {
			return Response{}, ErrClosed
		}
		if req.IsBatch() {
			return r.doEach(ctx, req)
		}
		return r.doAll(ctx, req)
	}
	resp, err := r.do(ctx, req)
	if err == nil && resp.raise != nil {
		return r.raised(ctx, req, resp)
	}
	return resp, err
}

// raised waits for the raise resp asks for and asks req again, at most
// raiseRounds times in all: Do's rounds after its first.
func (r *Ring) raised(ctx context.Context, req Request, resp Response) (Response, error) {
	var unwait <-chan struct{} // StopWaiting ends a wait for the lock, not for a raise
	if req.Wait != 0 {
		unwait = r.unwait
	}
	var err error
	for round := 1; err == nil && resp.raise != nil; round++ {
		if round == raiseRounds {
			resp.raise = nil // still no room: the MustRetry stands
			break
		}
		start := time.Now()
		select {
		case <-resp.raise:
		case <-ctx.Done():
			return Response{}, ctx.Err()
		case <-unwait:
			return Response{}, ErrClosed
		case <-r.done:
			return Response{}, ErrClosed
		}
		if req.Wait > 0 {
			req.Wait = max(req.Wait-time.Since(start), 0)
		}
		resp, err = r.do(ctx, req)
	}
	return resp, err
}

// Later is a call DoNow posted whose answer had not come when it
// returned (the zero Later: none).
type Later struct{ c *call }

// Started reports whether l holds a call.
func (l Later) Started() bool { return l.c != nil }

// DoNow runs req as Do does as far as its actor answers it at once, on
// this goroutine: now is true and resp is the answer. When the answer
// must wait (the actor busy on another goroutine, the call waiting for
// its record's read or for a write), later holds the call, whose answer
// Finish hands on; nothing waits for it here. When the decision needs a
// raise of the token window first (which changed nothing), or the ring
// is closed, neither is set: the caller runs req another way (DoAsync
// waits for a raise off its caller). So a server's reader, which starts
// each request of a message in turn, is never held by one of them. req
// must neither wait (a TryLock with a Wait) nor name several locks.
func (r *Ring) DoNow(req Request) (resp Response, now bool, later Later) {
	if req.Also != nil || req.Wait != 0 && req.Op == lease.TryLock || r.closed.Load() {
		return Response{}, false, Later{}
	}
	c, i, ok := r.newCall(req)
	if !ok {
		return Response{Status: lease.MustRetry}, true, Later{}
	}
	r.actors[i].mailbox.postInline(c)
	resp, ok = r.answeredNow(c)
	switch {
	case !ok:
		return Response{}, false, Later{c}
	case resp.raise != nil:
		return Response{}, false, Later{}
	}
	return resp, true, Later{}
}

// A callBatch is the calls of DoNowEach to one actor, posted as one
// message and decided in one step, in order, on one reading of the clock.
// direct: run on the poster's goroutine, which reads the answers given
// meanwhile from the calls (call.direct).
type callBatch struct {
	calls  []*call
	direct bool
}

// NowAnswer is DoNowEach's outcome of one request, as DoNow's results.
type NowAnswer struct {
	Resp  Response
	Now   bool
	Later Later
}

// DoNowEach runs each of reqs as DoNow runs it, and puts its outcome in
// out[j] (len(out) ≥ len(reqs)). The calls to one actor go to it as one
// message, decided in the order given: a stream's reader so hands each
// actor its share of a read in one step. One message a request cost the
// reader a fifth of each decision in the mailbox, protoactor's dispatch
// and the clock.
func (r *Ring) DoNowEach(reqs []Request, out []NowAnswer) {
	out = out[:len(reqs)]
	var counts [maxNowActors]int32
	if len(r.actors) > maxNowActors || len(reqs) > maxNowCalls {
		for j := range reqs {
			out[j].Resp, out[j].Now, out[j].Later = r.DoNow(reqs[j])
		}
		return
	}
	// Where each call goes (out's Later holds it until it is posted),
	// then one array carved into each actor's batch.
	var at [maxNowCalls]uint8 // each call's actor
	n := 0
	for j := range reqs {
		out[j] = NowAnswer{}
		req := &reqs[j]
		if req.Also != nil || req.Wait != 0 && req.Op == lease.TryLock || r.closed.Load() {
			continue
		}
		c, i, ok := r.newCall(*req)
		if !ok {
			out[j] = NowAnswer{Resp: Response{Status: lease.MustRetry}, Now: true}
			continue
		}
		out[j].Later = Later{c}
		at[j] = uint8(i)
		counts[i]++
		n++
	}
	if n == 0 {
		return
	}
	all := make([]*call, n)
	var batches [maxNowActors]*callBatch
	k := 0
	for i, c := range counts[:len(r.actors)] {
		if c > 0 {
			batches[i] = &callBatch{calls: all[k : k : k+int(c)], direct: true}
			k += int(c)
		}
	}
	for j := range reqs {
		if c := out[j].Later.c; c != nil {
			b := batches[at[j]]
			b.calls = append(b.calls, c)
		}
	}
	for i, b := range batches[:len(r.actors)] {
		if b != nil && !r.actors[i].mailbox.runInline(b) {
			b.direct = false // not here: its answers are sent
			r.actors[i].mailbox.postInline(b)
		}
	}
	for j := range reqs {
		c := out[j].Later.c
		if c == nil {
			continue
		}
		resp, ok := c.now, c.answered
		if ok {
			r.reuse(c)
		} else {
			resp, ok = r.answeredNow(c)
		}
		switch {
		case !ok: // Later{c} stands
		case resp.raise != nil:
			out[j] = NowAnswer{}
		default:
			out[j] = NowAnswer{Resp: resp, Now: true}
		}
	}
}

// DoNowEach groups on the stack for up to maxNowActors actors and
// maxNowCalls requests (a Batch message's most); beyond, it posts each
// call alone.
const (
	maxNowActors = 64
	maxNowCalls  = 1024
)

// Finish hands the answer to later, when it comes, to done, from a
// goroutine of its own, as Do would return it given ctx: the end of ctx
// or Close ends the wait, and a raise the answer asks for is waited for
// and the request asked again.
func (r *Ring) Finish(ctx context.Context, later Later, done Answerer) {
	req := later.c.req // await may return the call to the pool
	go func() {
		resp, err := r.await(ctx, later.c)
		if err == nil && resp.raise != nil {
			resp, err = r.raised(ctx, req, resp)
		}
		done.Answer(resp, err)
	}()
}

// reuse returns c, answered, to the pool.
func (r *Ring) reuse(c *call) {
	*c = call{reply: c.reply}
	r.calls.Put(c)
}

// raiseRounds bounds the rounds of one call: the token window and the TTL
// bound may each need a raise.
const raiseRounds = 3

func (r *Ring) do(ctx context.Context, req Request) (Response, error) {
	if r.closed.Load() {
		return Response{}, ErrClosed
	}
	c, i, ok := r.newCall(req)
	if !ok {
		return Response{Status: lease.MustRetry}, nil
	}
	if req.Wait != 0 && req.Op == lease.TryLock {
		return r.wait(ctx, c, r.pids[i])
	}
	// Run here if the actor is idle. A waiting call goes to a worker: run
	// here, it measured no faster.
	r.actors[i].mailbox.postInline(c)
	return r.await(ctx, c)
}

// newCall is a pooled call for req to its actor, index i, unless the
// actor refuses more (ok false: MaxPending calls wait for it already).
func (r *Ring) newCall(req Request) (c *call, i int, ok bool) {
	i = r.index(req.Resource)
	if !r.actors[i].enter() {
		return nil, i, false
	}
	c = r.calls.Get().(*call)
	c.req = req
	return c, i, true
}

// answeredNow returns the answer to c, posted to its actor, if it is there
// already (the actor ran c on this goroutine); c then goes back to the
// pool. A receive that cannot wait costs a fraction of await's select.
func (r *Ring) answeredNow(c *call) (Response, bool) {
	select {
	case resp := <-c.reply:
		r.reuse(c)
		return resp, true
	default:
		return Response{}, false
	}
}

// await waits for the answer to c, posted to its actor, as Do does.
func (r *Ring) await(ctx context.Context, c *call) (Response, error) {
	if resp, ok := r.answeredNow(c); ok {
		return resp, nil
	}
	select {
	case resp := <-c.reply:
		r.reuse(c)
		return resp, nil
	case <-ctx.Done():
		// The actor still owns c and will answer into its buffered
		// channel: never recycle it. A TryLock not decided yet is not
		// granted now: a release its caller sends next to clean up may
		// be decided first.
		if c.req.Op == lease.TryLock {
			c.abandoned.Store(true)
		}
		return Response{}, ctx.Err()
	case <-r.done:
		return Response{}, ErrClosed
	}
}

// Forget removes the stored record of resource in partition p if it is
// still the free record that was stored at index (Released found it): no
// live holder, no write in flight, no waiter, no watcher, and not moved on
// by an ephemeral grant. The removal is a record through the backend,
// fenced like any write; the partition's token floor keeps the name's next
// token above the removed one. It reports whether the record was removed;
// false changes nothing (the next sweep looks again).
func (r *Ring) Forget(ctx context.Context, p int, resource string, index uint64) (bool, error) {
	resp, err := r.Do(ctx, Request{Request: lease.Request{Resource: resource}, Partition: p, forget: true, forgetAt: index})
	return err == nil && resp.Status == lease.Unlocked, err
}

// wait runs a waiting TryLock. Its wait is timed here, on the caller's
// goroutine, not in the actor: when it ends the actor is told (leave) and
// answers Busy if the call is still queued, or has already answered the
// grant. A caller whose ctx ends, or whose wait StopWaiting ends, tells the
// actor too, so nothing is left in the queue (withdraw). A call the actor
// may still be told about is never recycled.
func (r *Ring) wait(ctx context.Context, c *call, pid *actor.PID) (Response, error) {
	// The call outlives Do if ctx ends: it must not alias the caller's buffer.
	c.req.Owner = append([]byte(nil), c.req.Owner...)
	r.system.Root.Send(pid, c)
	var over <-chan time.Time
	if c.req.Wait > 0 {
		t := time.NewTimer(c.req.Wait)
		defer t.Stop()
		over = t.C
	}
	told := false
	for {
		select {
		case resp := <-c.reply:
			if !told {
				r.reuse(c)
			}
			return resp, nil
		case <-over:
			over, told = nil, true
			r.system.Root.Send(pid, &leave{c: c, waitOver: true})
		case <-ctx.Done():
			return r.withdraw(c, pid, ctx.Err())
		case <-r.unwait:
			return r.withdraw(c, pid, ErrClosed)
		case <-r.done:
			return Response{}, ErrClosed
		}
	}
}

// withdraw takes the waiting call c out of its actor's queue for a caller
// that leaves with err, and returns once the actor has let it go: the
// grant if the lock was granted to c first (a late answer is a real one),
// else err. Returning before the actor has seen the leave would let a
// release the caller sends next (its clean-up of an outcome it cannot
// know) reach the actor first and find nothing to release, and the
// hand-off that follows give the lock to a caller that has gone, for the
// whole of its lease.
func (r *Ring) withdraw(c *call, pid *actor.PID, err error) (Response, error) {
	left := make(chan struct{})
	r.system.Root.Send(pid, &leave{c: c, left: left})
	if r.onLeave != nil {
		r.onLeave(c.req.Resource)
	}
	select {
	case <-left:
	case <-r.done:
		return Response{}, ErrClosed
	}
	select {
	case resp := <-c.reply: // answered before it left
		return resp, nil
	default:
		return Response{}, err // not granted, unless a persistent hand-off to it was in flight
	}
}

// StopWaiting ends every wait, those under way and those to come, with
// ErrClosed, while other calls are still served: an owner that is closing
// answers its callers in flight without being held up by waiters. A
// per-call context would do the same at the price of a context and a
// registration with the owner's for every waiting call.
func (r *Ring) StopWaiting() {
	r.unwaitOnce.Do(func() {
		close(r.unwait)
		r.async.stopWaiting()
	})
}

// DropPartition makes every actor forget its cached entries of partition p
// (ephemeral and persistent) and answer its waiters MustRetry, and returns
// once all have done so. A new
// leader calls it before serving p, so nothing stale is served.
func (r *Ring) DropPartition(ctx context.Context, p int) error {
	acks := make(chan struct{}, len(r.pids))
	for _, pid := range r.pids {
		r.system.Root.Send(pid, &dropPartition{partition: p, ack: acks})
	}
	for range r.pids {
		select {
		case <-acks:
		case <-ctx.Done():
			return ctx.Err()
		case <-r.done:
			return ErrClosed
		}
	}
	return nil
}

// EphemeralLeases returns the live ephemeral leases of partition p, with
// the time each has left. Asked once this node no longer decides for p,
// they are all the ephemeral leases it granted there that may still run.
func (r *Ring) EphemeralLeases(ctx context.Context, p int) ([]durability.HandedLease, error) {
	replies := make(chan []durability.HandedLease, len(r.pids))
	for _, pid := range r.pids {
		r.system.Root.Send(pid, &liveLeases{partition: p, reply: replies})
	}
	var leases []durability.HandedLease
	for range r.pids {
		select {
		case l := <-replies:
			leases = append(leases, l...)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-r.done:
			return nil, ErrClosed
		}
	}
	return leases, nil
}

// Live returns the live leases of partition p, ephemeral and persistent,
// that the actors cache and req wants (lease.ListRequest.Wants): the
// first limit of them in name order. Every live ephemeral lease of a
// partition this node serves is cached; a persistent one may not be (its
// record is the store's). Each actor answers from its own state when it
// takes the message, so the whole is no snapshot of the partition.
func (r *Ring) Live(ctx context.Context, p int, req lease.ListRequest, limit int) ([]lease.ListedLock, error) {
	if r.closed.Load() {
		return nil, ErrClosed
	}
	replies := make(chan []lease.ListedLock, len(r.pids))
	for _, pid := range r.pids {
		r.system.Root.Send(pid, &listLive{partition: p, req: req, limit: limit, reply: replies})
	}
	var all []lease.ListedLock
	for range r.pids {
		select {
		case l := <-replies:
			all = append(all, l...)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-r.done:
			return nil, ErrClosed
		}
	}
	// Each actor's first limit: the first limit of their union are among them.
	slices.SortFunc(all, func(x, y lease.ListedLock) int { return strings.Compare(x.Resource, y.Resource) })
	if len(all) > limit {
		all = all[:limit:limit]
	}
	return all, nil
}

// Install caches leases, handed over by p's previous leader, as live
// ephemeral leases, each for the time it had left from now, on the stored
// record of its name. A new leader calls it after its fence and
// DropPartition, before it serves p.
func (r *Ring) Install(ctx context.Context, p int, leases []durability.HandedLease) error {
	if len(r.actors) > 0 && r.actors[0].cfg.UnsafeDropHandedOver {
		return nil
	}
	byActor := make(map[int][]handed)
	for _, l := range leases {
		i := r.index(l.Resource)
		cfg := &r.actors[i].cfg
		rec, found, err := cfg.Backend.Load(p, l.Resource)
		if err != nil {
			return fmt.Errorf("actors: install handed-over lease of %q: %w", l.Resource, err)
		}
		s := &slot{part: int32(p)}
		if found {
			s.Entry = entryOf(&rec, cfg.Now())
			s.stored(rec.Index, 0)
		}
		s.State, s.Owner, s.Token, s.Revision, s.kind = lease.Held, l.Owner, l.Token, l.Revision, kindOf(lease.Ephemeral)
		byActor[i] = append(byActor[i], handed{s: s, name: l.Resource, left: l.Left})
	}
	acks := make(chan struct{}, len(byActor))
	for i, h := range byActor {
		r.system.Root.Send(r.pids[i], &install{leases: h, ack: acks})
	}
	for range byActor {
		select {
		case <-acks:
		case <-ctx.Done():
			return ctx.Err()
		case <-r.done:
			return ErrClosed
		}
	}
	return nil
}

// Held counts the live leases cached by the actors, ephemeral and
// persistent. It visits every actor, so it is for metrics, not hot paths.
func (r *Ring) Held(ctx context.Context) (ephemeral, persistent int, err error) {
	replies := make(chan [2]int, len(r.pids))
	for _, pid := range r.pids {
		r.system.Root.Send(pid, &countHeld{reply: replies})
	}
	for range r.pids {
		select {
		case n := <-replies:
			ephemeral += n[0]
			persistent += n[1]
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-r.done:
			return 0, 0, ErrClosed
		}
	}
	return ephemeral, persistent, nil
}

// Stats is a point-in-time view of the actors' caches.
type Stats struct {
	Entries   int    // cached entries over all actors
	Waiters   int    // waiting TryLocks queued over all actors
	Evictions uint64 // entries evicted since start (idle, or to make room at MaxEntries)
	// Refused counts the requests answered MustRetry (a Watch: ErrFull)
	// because a bound of Config (MaxEntries, MaxQueued, MaxPending) was
	// reached: backpressure, nothing applied.
	Refused uint64
}

// Stats sums the counters of every actor.
func (r *Ring) Stats() Stats {
	var s Stats
	for _, a := range r.actors {
		s.Entries += int(a.size.Load())
		s.Waiters += int(a.waiting.Load())
		s.Evictions += a.evictions.Load()
		s.Refused += a.refused.Load()
	}
	return s
}

// Close stops the actors. Calls in flight return ErrClosed. Idempotent.
func (r *Ring) Close() {
	r.once.Do(func() {
		r.closed.Store(true)
		close(r.done)
		for _, pid := range r.pids {
			_ = r.system.Root.StopFuture(pid).Wait()
		}
		r.async.closeAll()
		r.system.Shutdown()
		r.disp.close()
	})
}
