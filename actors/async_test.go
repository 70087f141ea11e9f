package actors

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// asyncAnswers collects DoAsync's answers, failing on a second one.
type asyncAnswers struct {
	t     *testing.T
	ch    chan Response
	errs  chan error
	count atomic.Int32
}

func newAsyncAnswers(t *testing.T) *asyncAnswers {
	return &asyncAnswers{t: t, ch: make(chan Response, 1), errs: make(chan error, 1)}
}

func (a *asyncAnswers) done(resp Response, err error) {
	if a.count.Add(1) > 1 {
		a.t.Errorf("a second answer: %+v, %v", resp, err)
		return
	}
	a.ch <- resp
	a.errs <- err
}

func (a *asyncAnswers) wait(t *testing.T) (Response, error) {
	t.Helper()
	select {
	case resp := <-a.ch:
		return resp, <-a.errs
	case <-time.After(10 * time.Second):
		t.Fatal("no answer within 10 s")
		return Response{}, nil
	}
}

func asyncReq(op lease.Op, res, owner string, d lease.Durability) Request {
	return Request{Request: lease.Request{Op: op, Resource: res, Owner: []byte(owner), TTL: time.Minute, Durability: d}, Partition: 1}
}

// TestDoAsyncAnswersWhenTheWriteCommits: a persistent TryLock started by
// DoAsync is answered once, when its write commits, and not before; an
// ephemeral one is answered too.
func TestDoAsyncAnswersWhenTheWriteCommits(t *testing.T) {
	f := newFixture(t, 2, 100)
	f.backend.setHold("r", true)
	a := newAsyncAnswers(t)
	f.ring.DoAsync(context.Background(), asyncReq(lease.TryLock, "r", "a", lease.Persistent), AnswerFunc(a.done))
	p := <-f.backend.held
	if n := a.count.Load(); n != 0 {
		t.Fatalf("answered %d times before the write committed", n)
	}
	p.c.Committed(f.backend.apply(p.rec))
	if resp, err := a.wait(t); err != nil || resp.Status != lease.Locked {
		t.Fatalf("= %+v, %v; want Locked", resp, err)
	}

	e := newAsyncAnswers(t)
	f.ring.DoAsync(context.Background(), asyncReq(lease.TryLock, "e", "a", lease.Ephemeral), AnswerFunc(e.done))
	if resp, err := e.wait(t); err != nil || resp.Status != lease.Locked {
		t.Fatalf("ephemeral = %+v, %v; want Locked", resp, err)
	}
}

// TestDoAsyncInFlightAtCloseAnswersErrClosed: a call whose write is in
// flight when the Ring closes is answered ErrClosed (its write may still
// apply), as Do's caller is, and a call after Close at once.
func TestDoAsyncInFlightAtCloseAnswersErrClosed(t *testing.T) {
	f := newFixture(t, 2, 100)
	f.backend.setHold("r", true)
	a := newAsyncAnswers(t)
	f.ring.DoAsync(context.Background(), asyncReq(lease.TryLock, "r", "a", lease.Persistent), AnswerFunc(a.done))
	p := <-f.backend.held
	f.ring.Close()
	if _, err := a.wait(t); !errors.Is(err, ErrClosed) {
		t.Fatalf("in flight at Close: %v, want ErrClosed", err)
	}
	p.c.Committed(f.backend.apply(p.rec)) // the late outcome answers nothing more
	after := newAsyncAnswers(t)
	f.ring.DoAsync(context.Background(), asyncReq(lease.TryLock, "x", "a", lease.Ephemeral), AnswerFunc(after.done))
	if _, err := after.wait(t); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", err)
	}
}

// TestDoAsyncCallerLeaves: when the caller's context ends, or the caller
// withdraws the call, DoAsync answers ctx.Err() (the withdrawal's
// LeftError) at once, and a TryLock not decided yet is never granted (as
// with Do): a release its caller sends next to clean up may be decided
// before it.
func TestDoAsyncCallerLeaves(t *testing.T) {
	for _, how := range []leaving{byContext, byWithdraw} {
		t.Run(how.String(), func(t *testing.T) {
			f := newFixture(t, 1, 100)
			if r := f.do(t, lease.TryLock, "r", "a", time.Minute, lease.Persistent); r.Status != lease.Locked {
				t.Fatalf("a's TryLock = %+v", r)
			}
			f.backend.setHold("r", true)
			unlock := f.async(lease.Unlock, "r", "a", lease.Persistent)
			p := <-f.backend.held // a's release is in flight
			b := newAsyncAnswers(t)
			leave := how.start(f, asyncReq(lease.TryLock, "r", "b", lease.Persistent), b.done)
			<-f.queued // behind the release
			leave()
			if _, err := b.wait(t); !how.answered(err) {
				t.Fatalf("b after it left (%v): %v", how, err)
			}
			f.backend.setHold("r", false)
			p.c.Committed(f.backend.apply(p.rec))
			if r := <-unlock; r.Status != lease.Unlocked {
				t.Fatalf("a's Unlock = %+v", r)
			}
			if r := f.do(t, lease.Get, "r", "", 0, lease.Persistent); r.Status != lease.LockDoesNotExist && r.Owner != nil {
				t.Fatalf("after b left, r = %+v (owner %q): its TryLock was granted", r, r.Owner)
			}
			if rec := f.backend.store["r"]; rec.Locked {
				t.Fatalf("stored %+v: b's TryLock was granted after its caller left", rec)
			}
		})
	}
}

// leaving is how a test's DoAsync call leaves before its answer: its
// context ends, or it is withdrawn (Pending.Withdraw) while its context,
// a server's stream's, goes on.
type leaving int

const (
	byContext leaving = iota
	byWithdraw
)

func (l leaving) String() string { return [...]string{"context", "withdraw"}[l] }

// errTestWithdrawn is the reason tests withdraw calls with.
var errTestWithdrawn = errors.New("withdrawn by the test")

// start starts req through DoAsync and returns what makes it leave.
func (l leaving) start(f *fixture, req Request, done func(Response, error)) (leave func()) {
	if l == byWithdraw {
		p := f.ring.DoAsync(context.Background(), req, AnswerFunc(done))
		return func() { p.Withdraw(errTestWithdrawn) }
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.ring.DoAsync(ctx, req, AnswerFunc(done))
	return cancel
}

// answered reports whether err answers a call that left as l makes it.
func (l leaving) answered(err error) bool {
	if l == byWithdraw {
		var left *LeftError
		return errors.As(err, &left) && errors.Is(err, errTestWithdrawn)
	}
	return errors.Is(err, context.Canceled)
}

// TestDoAsyncWithdrawAfterTheAnswerChangesNothing: a call withdrawn once
// it is answered keeps its answer (a grant stands) and is not answered
// again; nor is a call DoAsync answered before it returned.
func TestDoAsyncWithdrawAfterTheAnswerChangesNothing(t *testing.T) {
	f := newFixture(t, 1, 100)
	a := newAsyncAnswers(t)
	req := asyncReq(lease.TryLock, "r", "a", lease.Ephemeral)
	req.Wait = time.Minute
	p := f.ring.DoAsync(context.Background(), req, AnswerFunc(a.done))
	if resp, err := a.wait(t); err != nil || resp.Status != lease.Locked {
		t.Fatalf("a's waiting TryLock on a free lock = %+v, %v", resp, err)
	}
	p.Withdraw(errTestWithdrawn)
	f.sync(t, "r")
	if r := f.do(t, lease.Get, "r", "", 0, lease.Ephemeral); r.Status != lease.Got || string(r.Owner) != "a" {
		t.Fatalf("after a withdrawal that came after the grant: %+v (owner %q), want a's", r, r.Owner)
	}
	// a second answer would have been reported by a.done
	Pending{}.Withdraw(errTestWithdrawn) // the zero Pending: nothing to withdraw
}

// TestDoAsyncCallsOfOneContextLeaveTogether: calls that share a context
// (a server passes its stream's with each request) are watched through
// it together: when it ends, each one still pending is answered ctx.Err()
// and none not decided yet is granted; a call answered before is not
// answered again; and once none is pending, nothing is left watching.
func TestDoAsyncCallsOfOneContextLeaveTogether(t *testing.T) {
	f := newFixture(t, 1, 100)
	for _, res := range []string{"r", "s"} {
		if r := f.do(t, lease.TryLock, res, "a", time.Minute, lease.Persistent); r.Status != lease.Locked {
			t.Fatalf("a's TryLock of %s = %+v", res, r)
		}
	}
	f.backend.setHold("r", true)
	f.backend.setHold("s", true)
	var releases []heldProposal
	for _, res := range []string{"r", "s"} {
		f.async(lease.Unlock, res, "a", lease.Persistent)
		releases = append(releases, <-f.backend.held) // a's release of res is in flight
	}
	ctx, cancel := context.WithCancel(context.Background())
	early := newAsyncAnswers(t)
	f.ring.DoAsync(ctx, asyncReq(lease.TryLock, "e", "b", lease.Ephemeral), AnswerFunc(early.done))
	if resp, err := early.wait(t); err != nil || resp.Status != lease.Locked {
		t.Fatalf("b's TryLock of e = %+v, %v; want Locked", resp, err)
	}
	var waiting []*asyncAnswers
	for _, res := range []string{"r", "s"} {
		b := newAsyncAnswers(t)
		f.ring.DoAsync(ctx, asyncReq(lease.TryLock, res, "b", lease.Persistent), AnswerFunc(b.done))
		<-f.queued // behind a's release
		waiting = append(waiting, b)
	}
	cancel()
	waitCanceled(t, waiting)
	for i, res := range []string{"r", "s"} {
		f.backend.setHold(res, false)
		releases[i].c.Committed(f.backend.apply(releases[i].rec))
		if rec := f.backend.store[res]; rec.Locked {
			t.Fatalf("%s stored %+v: b's TryLock was granted after its context ended", res, rec)
		}
	}
	if n := early.count.Load(); n != 1 {
		t.Fatalf("the call answered before the context ended was answered %d times", n)
	}
	// A context that stays alive stays watched once its calls are done,
	// until it ends; then nothing is left watching.
	alive, stop := context.WithCancel(context.Background())
	defer stop()
	later := newAsyncAnswers(t)
	f.ring.DoAsync(alive, asyncReq(lease.TryLock, "f", "b", lease.Ephemeral), AnswerFunc(later.done))
	if resp, err := later.wait(t); err != nil || resp.Status != lease.Locked {
		t.Fatalf("b's TryLock of f = %+v, %v; want Locked", resp, err)
	}
	if n, idle := f.watched(); n != 1 || idle != 1 {
		t.Fatalf("%d contexts watched (%d with no call), want the live one's", n, idle)
	}
	stop()
	waitFor(t, "the ended context's watch let go", func() bool { n, _ := f.watched(); return n == 0 })
	if n, idle := f.watched(); n != 0 || idle != 0 {
		t.Fatalf("%d contexts watched (%d with no call) once every call was answered and every context ended", n, idle)
	}
}

// TestDoAsyncLetsIdleWatchesGo: contexts that stay alive with no call
// pending are watched up to maxIdleWatches of them; one more, and they
// are all let go, so a caller's contexts that never end cannot pile up.
func TestDoAsyncLetsIdleWatchesGo(t *testing.T) {
	f := newFixture(t, 1, 100)
	for i := range maxIdleWatches + 1 {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		a := newAsyncAnswers(t)
		f.ring.DoAsync(ctx, asyncReq(lease.Get, "r", "", lease.Ephemeral), AnswerFunc(a.done))
		if _, err := a.wait(t); err != nil {
			t.Fatalf("Get %d: %v", i, err)
		}
		n, idle := f.watched()
		want := i + 1
		if i == maxIdleWatches {
			want = 0
		}
		if n != want || idle != want {
			t.Fatalf("after %d calls on contexts of their own: %d watched, %d with no call; want %d", i+1, n, idle, want)
		}
	}
}

// watched is how many contexts the ring's DoAsync calls watch, and how
// many of them have no call pending.
func (f *fixture) watched() (n, idle int) {
	f.ring.async.mu.Lock()
	defer f.ring.async.mu.Unlock()
	return len(f.ring.async.byDone), f.ring.async.idle
}

// waitCanceled waits for each call's answer: context.Canceled, as the
// calls' context has ended.
func waitCanceled(t *testing.T, calls []*asyncAnswers) {
	t.Helper()
	for i, a := range calls {
		if _, err := a.wait(t); !errors.Is(err, context.Canceled) {
			t.Fatalf("TryLock %d after its context ended: %v, want context.Canceled", i, err)
		}
	}
}

// unhashableCtx is a context whose type cannot be a map key.
type unhashableCtx struct {
	context.Context
	tags []string
}

// TestDoAsyncTakesAnyContext: a caller's context of a type that is not
// comparable is watched too, and calls on contexts that end together (a
// context and one wrapping it) are answered when it ends.
func TestDoAsyncTakesAnyContext(t *testing.T) {
	f := newFixture(t, 1, 100)
	if r := f.do(t, lease.TryLock, "r", "a", time.Minute, lease.Persistent); r.Status != lease.Locked {
		t.Fatalf("a's TryLock = %+v", r)
	}
	f.backend.setHold("r", true)
	f.async(lease.Unlock, "r", "a", lease.Persistent)
	p := <-f.backend.held // a's release is in flight
	ctx, cancel := context.WithCancel(context.Background())
	var waiting []*asyncAnswers
	for _, c := range []context.Context{unhashableCtx{ctx, []string{"b"}}, ctx} {
		b := newAsyncAnswers(t)
		f.ring.DoAsync(c, asyncReq(lease.TryLock, "r", "b", lease.Persistent), AnswerFunc(b.done))
		<-f.queued // behind a's release
		waiting = append(waiting, b)
	}
	cancel()
	waitCanceled(t, waiting)
	f.backend.setHold("r", false)
	p.c.Committed(f.backend.apply(p.rec))
	if rec := f.backend.store["r"]; rec.Locked {
		t.Fatalf("stored %+v: a TryLock was granted after its context ended", rec)
	}
}

// A waiting TryLock started by DoAsync that needs a raise of its
// partition's TTL bound waits for the raise and is then granted; one
// whose caller leaves while the raise is under way is answered its
// context's error and is not granted once the raise is done.
func TestDoAsyncWaitThroughARaise(t *testing.T) {
	for _, leave := range []bool{false, true} {
		for _, how := range []leaving{byContext, byWithdraw} {
			if !leave && how == byWithdraw {
				continue
			}
			t.Run(fmt.Sprintf("leave=%v/%v", leave, how), func(t *testing.T) {
				w := &slowRaise{asked: make(chan struct{}, 1), raised: make(chan struct{})}
				w.ttl.Store(int64(time.Second))
				f := newFixture(t, 1, 100, func(c *Config) { c.Tokens = w })
				a := newAsyncAnswers(t)
				req := asyncReq(lease.TryLock, "r", "a", lease.Ephemeral)
				req.Wait = lease.WaitForever
				stop := how.start(f, req, a.done)
				defer stop()
				<-w.asked // its TTL is over the bound: it waits for the raise
				if leave {
					stop()
					if _, err := a.wait(t); !how.answered(err) {
						t.Fatalf("left during the raise (%v): %v", how, err)
					}
				}
				w.ttl.Store(int64(time.Hour))
				close(w.raised)
				if leave {
					f.sync(t, "r")
					if r := f.do(t, lease.Get, "r", "", 0, lease.Ephemeral); r.Status != lease.LockDoesNotExist {
						t.Fatalf("after the raise: %+v, want free: the caller had left", r)
					}
					return
				}
				if resp, err := a.wait(t); err != nil || resp.Status != lease.Locked {
					t.Fatalf("after the raise: %+v, %v; want Locked", resp, err)
				}
			})
		}
	}
}

// waitFor polls cond until it holds: for what a goroutine of the
// runtime's does with no signal to wait on (a context's AfterFunc).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
