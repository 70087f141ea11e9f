package actors

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna/durability"
	"github.com/kahunago/kahuna/lease"
)

// waitFor starts a waiting TryLock and returns once it is in the queue.
func (f *fixture) waitFor(t *testing.T, ctx context.Context, res, owner string, wait time.Duration, d lease.Durability) <-chan Response {
	t.Helper()
	ch := f.startWait(ctx, res, owner, wait, d)
	if got := <-f.waiting; got != res {
		t.Fatalf("queued on %q, want %q", got, res)
	}
	return ch
}

func (f *fixture) startWait(ctx context.Context, res, owner string, wait time.Duration, d lease.Durability) <-chan Response {
	ch := make(chan Response, 1)
	req := Request{Request: lease.Request{Op: lease.TryLock, Resource: res, Owner: []byte(owner), TTL: time.Minute, Durability: d, Wait: wait}, Partition: 1}
	f.waitCall(ctx, req, func(resp Response, err error) {
		if err != nil {
			resp = Response{Status: lease.Status(-1)} // a call error: no status
		}
		ch <- resp
	})
	return ch
}

// waitCall runs the waiting request req as the fixture's waits run: on
// a goroutine of its own through Do, or through DoAsync under
// TestWaitsAsync. answer gets its answer once and must not block.
func (f *fixture) waitCall(ctx context.Context, req Request, answer func(Response, error)) {
	switch {
	case f.withdrawnWaits:
		// On a context that never ends, as a server's stream passes its
		// own: the end of ctx withdraws the call instead.
		p := f.ring.DoAsync(context.Background(), req, AnswerFunc(answer))
		context.AfterFunc(ctx, func() { p.Withdraw(ctx.Err()) })
	case f.asyncWaits:
		f.ring.DoAsync(ctx, req, AnswerFunc(answer))
	default:
		go func() { answer(f.ring.Do(ctx, req)) }()
	}
}

// asyncWaitsTest and withdrawnWaitsTest name the tests under which the
// fixture's waiting TryLocks go through DoAsync, and are withdrawn when
// their context ends instead of passing it.
const (
	asyncWaitsTest     = "TestWaitsAsync/"
	withdrawnWaitsTest = "TestWaitsWithdrawn/"
)

// queueTests are the wait queue's tests that TestWaitsAsync and
// TestWaitsWithdrawn run again.
var queueTests = []struct {
	name string
	fn   func(*testing.T)
}{
	{"WaitersGrantedInFIFOOrderOnRelease", TestWaitersGrantedInFIFOOrderOnRelease},
	{"ExpiredHolderWakesHeadByTimer", TestExpiredHolderWakesHeadByTimer},
	{"ExtendedHolderKeepsLockAgainstOldTimer", TestExtendedHolderKeepsLockAgainstOldTimer},
	{"WaiterLeavesOnCancel", TestWaiterLeavesOnCancel},
	{"LeavingWaiterNeverHoldsUnseen", TestLeavingWaiterNeverHoldsUnseen},
	{"WaiterLeavingBehindWriteIsDropped", TestWaiterLeavingBehindWriteIsDropped},
	{"WaitEndsBusy", TestWaitEndsBusy},
	{"FullQueueAnswersBusyAtOnce", TestFullQueueAnswersBusyAtOnce},
	{"DropPartitionAnswersWaitersMustRetry", TestDropPartitionAnswersWaitersMustRetry},
	{"NotServingAnswersWaitersMustRetry", TestNotServingAnswersWaitersMustRetry},
	{"PersistentHandOffNotCommittedKeepsHead", TestPersistentHandOffNotCommittedKeepsHead},
	{"SameOwnerWaitingTryLockKeepsGrant", TestSameOwnerWaitingTryLockKeepsGrant},
	{"HandOffAcrossDurabilities", TestHandOffAcrossDurabilities},
	{"WaiterLeavingDuringFailedHandOffIsDropped", TestWaiterLeavingDuringFailedHandOffIsDropped},
	{"HandOffUnknownButCommittedKeepsEarliestWait", TestHandOffUnknownButCommittedKeepsEarliestWait},
	{"HandOffUnknownNeverAnsweredNotGranted", TestHandOffUnknownNeverAnsweredNotGranted},
	{"HandOffUnknownThenRegrantFenced", TestHandOffUnknownThenRegrantFenced},
	{"UnsafeUnsureNotGranted", TestUnsafeUnsureNotGranted},
	{"StopWaitingEndsWaits", TestStopWaitingEndsWaits},
	{"SemaphoreQueueIsFirstComeFirstServed", TestSemaphoreQueueIsFirstComeFirstServed},
	{"SemaphoreWaiterWokenWhenThePermitItNeedsLapses", TestSemaphoreWaiterWokenWhenThePermitItNeedsLapses},
	{"SemaphoreHeadLeavingLetsTheNextIn", TestSemaphoreHeadLeavingLetsTheNextIn},
	{"SemaphoreReloadedFromItsRecord", TestSemaphoreReloadedFromItsRecord},
}

// TestWaitsAsync runs the wait queue's tests with every waiting TryLock
// started by DoAsync, whose wait no goroutine sits in: its grant, the end
// of its wait, its caller's leaving and StopWaiting must come out as Do's.
func TestWaitsAsync(t *testing.T) {
	for _, test := range queueTests {
		t.Run(test.name, test.fn)
	}
}

// TestWaitsWithdrawn runs them again with every waiting TryLock started
// by DoAsync on a context that never ends, and withdrawn
// (Pending.Withdraw) when the test ends its own: a withdrawal must leave
// the queue as the end of the call's context does.
func TestWaitsWithdrawn(t *testing.T) {
	for _, test := range queueTests {
		t.Run(test.name, test.fn)
	}
}

// sync returns once the actor of res has handled everything sent to it
// before (a Get behind it in the same mailbox lane).
func (f *fixture) sync(t *testing.T, res string) {
	t.Helper()
	f.do(t, lease.Get, res, "", 0, lease.Ephemeral)
}

// stats is Ring.Stats once every actor has published its sizes after the
// messages already answered (an actor answers while it handles a message
// and publishes after it): Held visits every actor, and no actor may be
// blocked when it is called.
func (f *fixture) stats(t *testing.T) Stats {
	t.Helper()
	if _, _, err := f.ring.Held(context.Background()); err != nil {
		t.Fatal(err)
	}
	return f.ring.Stats()
}

func TestWaitersGrantedInFIFOOrderOnRelease(t *testing.T) {
	for _, d := range []lease.Durability{lease.Ephemeral, lease.Persistent} {
		t.Run(d.String(), func(t *testing.T) {
			f := newFixture(t, 2, 100)
			if r := f.do(t, lease.TryLock, "r", "holder", time.Minute, d); r.Status != lease.Locked || r.Token != 0 {
				t.Fatalf("holder: %+v", r)
			}
			const n = 5
			var ws []<-chan Response
			for i := range n {
				ws = append(ws, f.waitFor(t, context.Background(), "r", fmt.Sprint("w", i), lease.WaitForever, d))
			}
			f.sync(t, "r") // the actor publishes its sizes after each message
			if s := f.ring.Stats(); s.Waiters != n {
				t.Fatalf("waiters = %d, want %d", s.Waiters, n)
			}
			prev := "holder"
			for i, w := range ws {
				proposals := f.backend.index
				if r := f.do(t, lease.Unlock, "r", prev, 0, d); r.Status != lease.Unlocked {
					t.Fatalf("unlock by %s: %+v", prev, r)
				}
				// Handed off by the Unlock: no other request is made (and
				// no timer fired) before the head's answer arrives.
				if r := <-w; r.Status != lease.Locked || r.Token != int64(i+1) {
					t.Fatalf("waiter %d after release: %+v, want Locked token %d", i, r, i+1)
				}
				f.sync(t, "r")
				if s := f.ring.Stats(); s.Waiters != n-i-1 {
					t.Fatalf("after grant %d: %d waiters, want %d (one granted, in order)", i, s.Waiters, n-i-1)
				}
				if d == lease.Persistent {
					if got := f.backend.index - proposals; got != 1 {
						t.Fatalf("release + hand-off took %d records, want 1", got)
					}
					if rec := f.backend.store["r"]; string(rec.Owner) != fmt.Sprint("w", i) || rec.Token != int64(i+1) || !rec.Locked {
						t.Fatalf("stored %+v", rec)
					}
				}
				prev = fmt.Sprint("w", i)
			}
			f.sync(t, "r") // the last grant's sizes are published after its answer
			if s := f.ring.Stats(); s.Waiters != 0 {
				t.Fatalf("waiters at the end = %d", s.Waiters)
			}
		})
	}
}

func TestExpiredHolderWakesHeadByTimer(t *testing.T) {
	for _, d := range []lease.Durability{lease.Ephemeral, lease.Persistent} {
		t.Run(d.String(), func(t *testing.T) {
			f := newFixture(t, 1, 100)
			f.do(t, lease.TryLock, "r", "crashed", time.Minute, d)
			w := f.waitFor(t, context.Background(), "r", "w", lease.WaitForever, d)
			timer := <-f.timers
			if timer.d <= 59*time.Second || timer.d > time.Minute+time.Millisecond {
				t.Fatalf("timer set for %v, want the holder's expiry (1 min)", timer.d)
			}
			// A second waiter joins the same queue: still one timer.
			w2 := f.waitFor(t, context.Background(), "r", "w2", lease.WaitForever, d)
			select {
			case extra := <-f.timers:
				t.Fatalf("second timer set (%v) for the same holder", extra.d)
			default:
			}
			f.clock.Advance(time.Minute + time.Millisecond)
			timer.fire() // no request reaches the actor: only the timer
			r := <-w
			if r.Status != lease.Locked || r.Token != 1 {
				t.Fatalf("head after expiry: %+v, want Locked token 1", r)
			}
			f.sync(t, "r")
			if s := f.ring.Stats(); s.Waiters != 1 {
				t.Fatalf("waiters = %d, want 1 (w2 still queued)", s.Waiters)
			}
			// The new holder's expiry has its own timer.
			next := <-f.timers
			f.clock.Advance(time.Minute + time.Millisecond)
			next.fire()
			if r := <-w2; r.Status != lease.Locked || r.Token != 2 {
				t.Fatalf("second waiter: %+v", r)
			}
		})
	}
}

// An extension moves the holder's expiry: a timer that fires at the old
// one grants nothing and is set again.
func TestExtendedHolderKeepsLockAgainstOldTimer(t *testing.T) {
	f := newFixture(t, 1, 100)
	f.do(t, lease.TryLock, "r", "a", time.Minute, lease.Ephemeral)
	w := f.waitFor(t, context.Background(), "r", "w", lease.WaitForever, lease.Ephemeral)
	old := <-f.timers
	f.clock.Advance(30 * time.Second)
	if r := f.do(t, lease.Extend, "r", "a", time.Minute, lease.Ephemeral); r.Status != lease.Extended {
		t.Fatalf("extend: %+v", r)
	}
	f.clock.Advance(31 * time.Second) // past the old expiry, before the new one
	old.f()                           // fires even if stopped: a stale wake must do nothing
	f.sync(t, "r")
	if s := f.ring.Stats(); s.Waiters != 1 {
		t.Fatalf("waiters = %d: granted while the holder's extended lease lives", s.Waiters)
	}
	if r := f.do(t, lease.Get, "r", "", 0, lease.Ephemeral); r.Status != lease.Got || string(r.Owner) != "a" {
		t.Fatalf("get: %+v", r)
	}
	renewed := <-f.timers // set again for the new expiry
	f.clock.Advance(30 * time.Second)
	renewed.fire()
	if r := <-w; r.Status != lease.Locked || r.Token != 1 {
		t.Fatalf("waiter after the extended lease: %+v", r)
	}
}

// TestHandOffsKeepTheExpiryTimer: a hand-off whose new holder expires
// after the timer set does not set another; the timer, firing at the
// first holder's expiry, grants nothing while the current holder's lease
// lives and is set again for it, and that one grants the next waiter.
func TestHandOffsKeepTheExpiryTimer(t *testing.T) {
	f := newFixture(t, 1, 100)
	f.do(t, lease.TryLock, "r", "a", time.Minute, lease.Ephemeral)
	wb := f.waitFor(t, context.Background(), "r", "b", lease.WaitForever, lease.Ephemeral)
	wc := f.waitFor(t, context.Background(), "r", "c", lease.WaitForever, lease.Ephemeral)
	first := <-f.timers
	f.clock.Advance(10 * time.Second)
	if r := f.do(t, lease.Unlock, "r", "a", 0, lease.Ephemeral); r.Status != lease.Unlocked {
		t.Fatalf("a's Unlock: %+v", r)
	}
	b := <-wb
	if b.Status != lease.Locked {
		t.Fatalf("b after a's release: %+v", b)
	}
	f.sync(t, "r")
	select {
	case extra := <-f.timers:
		t.Fatalf("a timer set (%v) on a hand-off to a holder that expires later", extra.d)
	default:
	}
	f.clock.Advance(time.Minute - 10*time.Second + time.Millisecond) // past a's expiry, not b's
	first.fire()
	f.sync(t, "r")
	if r := f.do(t, lease.Get, "r", "", 0, lease.Ephemeral); r.Status != lease.Got || string(r.Owner) != "b" {
		t.Fatalf("after the timer of a's expiry: %+v (owner %q), want b's", r, r.Owner)
	}
	renewed := <-f.timers
	if renewed.d <= 9*time.Second || renewed.d > 10*time.Second {
		t.Fatalf("timer set again for %v, want b's expiry (10 s on)", renewed.d)
	}
	f.clock.Advance(10 * time.Second)
	renewed.fire()
	if r := <-wc; r.Status != lease.Locked || r.Token <= b.Token {
		t.Fatalf("c after b's expiry: %+v, want Locked with a token over b's %d", r, b.Token)
	}
}

func TestWaiterLeavesOnCancel(t *testing.T) {
	f := newFixture(t, 1, 100)
	f.do(t, lease.TryLock, "r", "a", time.Minute, lease.Persistent)
	ctx, cancel := context.WithCancel(context.Background())
	w := f.waitFor(t, ctx, "r", "gone", lease.WaitForever, lease.Persistent)
	cancel()
	if r := <-w; r.Status != lease.Status(-1) {
		t.Fatalf("cancelled waiter: %+v, want ctx's error", r)
	}
	f.sync(t, "r") // the leave message was sent before Do returned
	if s := f.ring.Stats(); s.Waiters != 0 {
		t.Fatalf("waiters after cancel = %d, want 0", s.Waiters)
	}
	f.do(t, lease.Unlock, "r", "a", 0, lease.Persistent)
	if r := f.do(t, lease.Get, "r", "", 0, lease.Persistent); r.Status != lease.LockDoesNotExist {
		t.Fatalf("after release: %+v: the gone waiter was granted", r)
	}
}

// TestLeavingWaiterNeverHoldsUnseen: a waiting caller that leaves (its
// ctx ends) while a release is on its way to the actor gets the grant if
// the release came first (unless a persistent hand-off to it is still in
// flight: its outcome is then unknown), or else leaves the queue before
// the release is decided; once it returns, a clean-up it sends leaves the
// lock to no one. Releases
// jump the mailbox queue, and the leave with them: behind them, a release
// sent after the leave would hand the lock to the caller that left.
func TestLeavingWaiterNeverHoldsUnseen(t *testing.T) {
	for _, d := range []lease.Durability{lease.Ephemeral, lease.Persistent} {
		for _, releaseFirst := range []bool{true, false} {
			t.Run(fmt.Sprintf("%v/release-first=%v", d, releaseFirst), func(t *testing.T) {
				left := make(chan string, 1)
				f := newFixture(t, 1, 100, func(c *Config) { c.onLeave = func(r string) { left <- r } })
				f.blockActor()
				f.do(t, lease.TryLock, "r", "a", time.Minute, d)
				ctx, cancel := context.WithCancel(context.Background())
				w := f.waitFor(t, ctx, "r", "gone", lease.WaitForever, d)
				blocked := f.async(lease.TryLock, "block", "x", lease.Persistent)
				<-f.backend.proposeEntered // the only actor is busy: what follows queues in its mailbox
				release := func() <-chan Response {
					c := f.ring.calls.Get().(*call)
					c.req = Request{Request: lease.Request{Op: lease.Unlock, Resource: "r", Owner: []byte("a"), Durability: d}, Partition: 1}
					f.ring.system.Root.Send(f.ring.route("r"), c) // queued when Send returns
					return c.reply
				}
				var released <-chan Response
				if releaseFirst {
					released = release()
				}
				cancel()
				<-left
				if !releaseFirst {
					released = release()
				}
				close(f.backend.proposeRelease)
				<-blocked
				if r := <-released; r.Status != lease.Unlocked {
					t.Fatalf("release: %+v", r)
				}
				got := <-w
				switch {
				case releaseFirst && d == lease.Ephemeral && got.Status != lease.Locked:
					// (A persistent hand-off may still be in flight as the
					// waiter leaves: its outcome is then unknown.)
					t.Fatalf("the waiter that left after the release: %+v, want its grant", got)
				case !releaseFirst && got.Status != lease.Status(-1):
					t.Fatalf("the waiter that left before the release: %+v, want ctx's error", got)
				case got.Status == lease.Locked:
					if held := f.do(t, lease.Get, "r", "", 0, d); held.Status != lease.Got || string(held.Owner) != "gone" || held.Token != got.Token {
						t.Fatalf("granted %+v, but the lock is %+v", got, held)
					}
				default:
					// Not told of a grant: the caller's clean-up, sent now,
					// leaves the lock to no one.
					f.do(t, lease.Unlock, "r", "gone", 0, d)
					if held := f.do(t, lease.Get, "r", "", 0, d); held.Status == lease.Got {
						t.Fatalf("the waiter left with %+v and cleaned up, but the lock is held by %q", got, held.Owner)
					}
				}
			})
		}
	}
}

// A waiter that leaves while it sits behind an in-flight write (not yet in
// the wait queue) is dropped when the write completes.
func TestWaiterLeavingBehindWriteIsDropped(t *testing.T) {
	f := newFixture(t, 1, 100)
	f.do(t, lease.TryLock, "r", "a", time.Minute, lease.Persistent)
	f.backend.setHold("r", true)
	ext := f.doAsync(longerExtend("r", "a"))
	p := <-f.backend.held
	ctx, cancel := context.WithCancel(context.Background())
	w := f.startWait(ctx, "r", "gone", lease.WaitForever, lease.Persistent)
	<-f.queued
	cancel()
	<-w
	f.backend.setHold("r", false)
	p.c.Committed(f.backend.apply(p.rec))
	if r := <-ext; r.Status != lease.Extended {
		t.Fatalf("extend: %+v", r)
	}
	f.sync(t, "r")
	if s := f.ring.Stats(); s.Waiters != 0 {
		t.Fatalf("waiters = %d, want 0", s.Waiters)
	}
}

func TestWaitEndsBusy(t *testing.T) {
	f := newFixture(t, 1, 100)
	f.do(t, lease.TryLock, "r", "a", time.Minute, lease.Ephemeral)
	w := f.waitFor(t, context.Background(), "r", "w", 20*time.Millisecond, lease.Ephemeral)
	if r := <-w; r.Status != lease.Busy {
		t.Fatalf("wait over: %+v, want Busy", r)
	}
	f.sync(t, "r")
	if s := f.ring.Stats(); s.Waiters != 0 {
		t.Fatalf("waiters = %d, want 0", s.Waiters)
	}
}

func TestFullQueueAnswersBusyAtOnce(t *testing.T) {
	f := newFixture(t, 1, 100)
	f.do(t, lease.TryLock, "r", "a", time.Minute, lease.Ephemeral)
	ctx, cancel := context.WithCancel(context.Background())
	var ws []<-chan Response
	for i := range lease.MaxWaiters {
		ws = append(ws, f.startWait(ctx, "r", fmt.Sprint("w", i), lease.WaitForever, lease.Ephemeral))
	}
	for range lease.MaxWaiters {
		<-f.waiting
	}
	extra := f.startWait(context.Background(), "r", "late", lease.WaitForever, lease.Ephemeral)
	if r := <-extra; r.Status != lease.Busy {
		t.Fatalf("waiter over the bound: %+v, want Busy", r)
	}
	if s := f.ring.Stats(); s.Waiters != lease.MaxWaiters {
		t.Fatalf("waiters = %d", s.Waiters)
	}
	cancel()
	for _, w := range ws {
		<-w
	}
	f.sync(t, "r")
	if s := f.ring.Stats(); s.Waiters != 0 {
		t.Fatalf("waiters after cancel = %d", s.Waiters)
	}
}

func TestDropPartitionAnswersWaitersMustRetry(t *testing.T) {
	f := newFixture(t, 2, 100)
	f.do(t, lease.TryLock, "r", "a", time.Minute, lease.Persistent)
	f.do(t, lease.TryLock, "e", "a", time.Minute, lease.Ephemeral)
	ws := []<-chan Response{
		f.waitFor(t, context.Background(), "r", "w1", lease.WaitForever, lease.Persistent),
		f.waitFor(t, context.Background(), "r", "w2", lease.WaitForever, lease.Persistent),
		f.waitFor(t, context.Background(), "e", "w3", time.Hour, lease.Ephemeral),
	}
	if err := f.ring.DropPartition(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	for i, w := range ws {
		if r := <-w; r.Status != lease.MustRetry {
			t.Fatalf("waiter %d after drop: %+v, want MustRetry", i, r)
		}
	}
	if s := f.ring.Stats(); s.Waiters != 0 {
		t.Fatalf("waiters = %d", s.Waiters)
	}
}

// A node that stops serving answers its waiters MustRetry at the next
// decision, a timer's included.
func TestNotServingAnswersWaitersMustRetry(t *testing.T) {
	f := newFixture(t, 1, 100)
	f.do(t, lease.TryLock, "r", "a", time.Minute, lease.Ephemeral)
	w := f.waitFor(t, context.Background(), "r", "w", lease.WaitForever, lease.Ephemeral)
	timer := <-f.timers
	f.serving[1].Store(false)
	f.clock.Advance(2 * time.Minute)
	timer.fire()
	if r := <-w; r.Status != lease.MustRetry {
		t.Fatalf("waiter: %+v, want MustRetry", r)
	}
}

// A failed hand-off record (certainly not committed) leaves everything as
// it was: the unlocker is told MustRetry and the waiter keeps its place.
func TestPersistentHandOffNotCommittedKeepsHead(t *testing.T) {
	f := newFixture(t, 1, 100)
	f.do(t, lease.TryLock, "r", "a", time.Minute, lease.Persistent)
	w := f.waitFor(t, context.Background(), "r", "w", lease.WaitForever, lease.Persistent)
	w2 := f.waitFor(t, context.Background(), "r", "w2", lease.WaitForever, lease.Persistent)
	f.backend.setHold("r", true)
	unlock := f.async(lease.Unlock, "r", "a", lease.Persistent)
	p := <-f.backend.held
	if string(p.rec.Owner) != "w" || p.rec.Token != 1 || !p.rec.Locked {
		t.Fatalf("hand-off record %+v, want w's grant", p.rec)
	}
	p.c.Committed(0, durability.ErrRetry)
	if r := <-unlock; r.Status != lease.MustRetry {
		t.Fatalf("unlock: %+v", r)
	}
	f.backend.setHold("r", false)
	f.sync(t, "r") // the actor publishes its sizes after the message that answered unlock
	if s := f.ring.Stats(); s.Waiters != 2 {
		t.Fatalf("waiters = %d, want 2", s.Waiters)
	}
	if r := f.do(t, lease.Unlock, "r", "a", 0, lease.Persistent); r.Status != lease.Unlocked {
		t.Fatalf("unlock again: %+v", r)
	}
	if r := <-w; r.Status != lease.Locked || r.Token != 1 {
		t.Fatalf("head: %+v", r)
	}
	f.sync(t, "r")
	if s := f.ring.Stats(); s.Waiters != 1 {
		t.Fatalf("waiters = %d, want 1 (w2 still queued)", s.Waiters)
	}
	f.do(t, lease.Unlock, "r", "w", 0, lease.Persistent)
	if r := <-w2; r.Status != lease.Locked || r.Token != 2 {
		t.Fatalf("w2: %+v", r)
	}
}

func TestSameOwnerWaitingTryLockKeepsGrant(t *testing.T) {
	f := newFixture(t, 1, 100)
	f.do(t, lease.TryLock, "r", "a", time.Minute, lease.Ephemeral)
	f.clock.Advance(time.Second)
	w := f.startWait(context.Background(), "r", "a", time.Hour, lease.Ephemeral)
	if r := <-w; r.Status != lease.Locked || r.Token != 0 {
		t.Fatalf("same owner: %+v, want Locked token 0", r)
	}
	r := f.do(t, lease.Get, "r", "", 0, lease.Ephemeral)
	if want := f.clock.Now().Add(59 * time.Second); !r.Expires.Equal(want) {
		t.Fatalf("expiry %v, want %v (not refreshed)", r.Expires, want)
	}
}

// One name, one lock: a holder of either kind blocks the other kind, and
// Extend, Unlock and Get see the lock whatever durability they name.
func TestOneNameOneLock(t *testing.T) {
	for _, first := range []lease.Durability{lease.Ephemeral, lease.Persistent} {
		other := 1 - first
		t.Run(first.String(), func(t *testing.T) {
			f := newFixture(t, 1, 100)
			if r := f.do(t, lease.TryLock, "r", "a", time.Minute, first); r.Status != lease.Locked {
				t.Fatalf("grant: %+v", r)
			}
			if r := f.do(t, lease.TryLock, "r", "b", time.Minute, other); r.Status != lease.Busy {
				t.Fatalf("other kind by another owner: %+v, want Busy", r)
			}
			for _, d := range []lease.Durability{first, other} {
				if r := f.do(t, lease.Get, "r", "", 0, d); r.Status != lease.Got || string(r.Owner) != "a" {
					t.Fatalf("get(%v): %+v", d, r)
				}
			}
			if r := f.do(t, lease.Extend, "r", "a", time.Minute, other); r.Status != lease.Extended {
				t.Fatalf("extend naming the other kind: %+v", r)
			}
			if r := f.do(t, lease.Unlock, "r", "a", 0, other); r.Status != lease.Unlocked {
				t.Fatalf("unlock naming the other kind: %+v", r)
			}
			_, stored := f.backend.store["r"]
			if stored != (first == lease.Persistent) {
				t.Fatalf("stored record present = %v for a %v lock", stored, first)
			}
			if r := f.do(t, lease.TryLock, "r", "b", time.Minute, other); r.Status != lease.Locked || r.Token != 1 {
				t.Fatalf("next grant: %+v, want token 1", r)
			}
		})
	}
}

// The token rule when durabilities mix: one count; a drop (leader change)
// falls back to the stored token, a persistent holder is seen by an
// ephemeral request after a reload.
func TestMixedDurabilityTokens(t *testing.T) {
	f := newFixture(t, 1, 100)
	grant := func(owner string, d lease.Durability, want int64) {
		t.Helper()
		if r := f.do(t, lease.TryLock, "r", owner, time.Minute, d); r.Status != lease.Locked || r.Token != want {
			t.Fatalf("%s (%v): %+v, want Locked token %d", owner, d, r, want)
		}
		if r := f.do(t, lease.Unlock, "r", owner, 0, d); r.Status != lease.Unlocked {
			t.Fatalf("unlock %s: %+v", owner, r)
		}
	}
	grant("p0", lease.Persistent, 0)
	grant("e1", lease.Ephemeral, 1)
	grant("e2", lease.Ephemeral, 2)
	grant("p3", lease.Persistent, 3) // above the ephemeral grants on this leader
	grant("e4", lease.Ephemeral, 4)
	if err := f.ring.DropPartition(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	grant("e5", lease.Ephemeral, 4) // back to the stored floor (3): e4's token repeats, as documented
	if err := f.ring.DropPartition(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	grant("p", lease.Persistent, 4)
	// A stored live persistent lock, reloaded, blocks an ephemeral request.
	f.do(t, lease.TryLock, "r", "holder", time.Minute, lease.Persistent)
	if err := f.ring.DropPartition(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if r := f.do(t, lease.TryLock, "r", "b", time.Minute, lease.Ephemeral); r.Status != lease.Busy {
		t.Fatalf("ephemeral on a stored live lock after reload: %+v, want Busy", r)
	}
}

// Waiters of either kind queue on the one lock: a persistent release hands
// off to an ephemeral waiter after its record commits, an ephemeral release
// to a persistent waiter through a record of the grant.
func TestHandOffAcrossDurabilities(t *testing.T) {
	f := newFixture(t, 1, 100)
	f.do(t, lease.TryLock, "r", "p", time.Minute, lease.Persistent)
	we := f.waitFor(t, context.Background(), "r", "e", lease.WaitForever, lease.Ephemeral)
	wp := f.waitFor(t, context.Background(), "r", "q", lease.WaitForever, lease.Persistent)
	if r := f.do(t, lease.Unlock, "r", "p", 0, lease.Persistent); r.Status != lease.Unlocked {
		t.Fatalf("unlock: %+v", r)
	}
	if r := <-we; r.Status != lease.Locked || r.Token != 1 {
		t.Fatalf("ephemeral waiter: %+v", r)
	}
	if rec := f.backend.store["r"]; rec.Locked {
		t.Fatalf("stored %+v, want released", rec)
	}
	if r := f.do(t, lease.Unlock, "r", "e", 0, lease.Ephemeral); r.Status != lease.Unlocked {
		t.Fatalf("unlock e: %+v", r)
	}
	if r := <-wp; r.Status != lease.Locked || r.Token != 2 {
		t.Fatalf("persistent waiter: %+v", r)
	}
	if rec := f.backend.store["r"]; !rec.Locked || string(rec.Owner) != "q" || rec.Token != 2 {
		t.Fatalf("stored %+v", rec)
	}
}

// A waiter that leaves while its hand-off record is in flight is not put
// back in the queue when the record fails.
func TestWaiterLeavingDuringFailedHandOffIsDropped(t *testing.T) {
	f := newFixture(t, 1, 100)
	f.do(t, lease.TryLock, "r", "a", time.Minute, lease.Persistent)
	ctx, cancel := context.WithCancel(context.Background())
	w := f.waitFor(t, ctx, "r", "gone", lease.WaitForever, lease.Persistent)
	f.backend.setHold("r", true)
	unlock := f.async(lease.Unlock, "r", "a", lease.Persistent)
	p := <-f.backend.held // the hand-off to "gone" is in flight
	cancel()
	<-w
	get := f.async(lease.Get, "r", "", lease.Persistent)
	<-f.queued // the Get, sent after the leave, waits behind the write: the leave was handled
	p.c.Committed(0, durability.ErrRetry)
	if r := <-unlock; r.Status != lease.MustRetry {
		t.Fatalf("unlock: %+v", r)
	}
	f.backend.setHold("r", false)
	if r := <-get; r.Status != lease.Got || string(r.Owner) != "a" {
		t.Fatalf("get: %+v", r)
	}
	f.sync(t, "r") // Stats is published after each message: one more
	if s := f.ring.Stats(); s.Waiters != 0 {
		t.Fatalf("waiters = %d, want 0: the gone waiter was put back", s.Waiters)
	}
}

// TestHandOffUnknownButCommittedKeepsEarliestWait: a hand-off record whose
// outcome is unknown did commit; the waiter is answered later, as the
// holder the reload shows. Its Waited must be the wait up to the hand-off
// decision, when its lease began, not up to the answer: a later one would
// make its handle believe the lease started, and ends, later than it does.
func TestHandOffUnknownButCommittedKeepsEarliestWait(t *testing.T) {
	f := newFixture(t, 1, 100)
	f.do(t, lease.TryLock, "r", "a", time.Minute, lease.Persistent)
	w := f.waitFor(t, context.Background(), "r", "w", lease.WaitForever, lease.Persistent)
	f.clock.Advance(2 * time.Second) // w waits 2 s
	f.backend.setHold("r", true)
	unlock := f.async(lease.Unlock, "r", "a", lease.Persistent)
	p := <-f.backend.held
	if _, err := f.backend.apply(p.rec); err != nil { // it commits...
		t.Fatal(err)
	}
	f.clock.Advance(5 * time.Second)
	p.c.Committed(0, durability.ErrUnknownOutcome) // ...but the proposer cannot tell
	if r := <-unlock; r.Status != lease.Errored {
		t.Fatalf("unlock: %+v, want Errored", r)
	}
	f.backend.setHold("r", false)
	r := <-w
	if r.Status != lease.Locked || r.Token != 1 {
		t.Fatalf("w: %+v, want Locked token 1 (its hand-off committed)", r)
	}
	if r.Waited != 2*time.Second {
		t.Fatalf("w waited %v, want 2s: its lease began at the hand-off decision", r.Waited)
	}
}

// handOffUnknown makes a's Unlock hand r to the waiter w (wait 1 min) in
// a record that commits while its proposer is told the outcome is unknown;
// before that is known, end (if not nil) runs. It returns w's channel.
func handOffUnknown(t *testing.T, f *fixture, end func(w *call)) <-chan Response {
	t.Helper()
	f.do(t, lease.TryLock, "r", "a", time.Minute, lease.Persistent)
	w := f.waitFor(t, context.Background(), "r", "w", time.Minute, lease.Persistent)
	f.backend.setHold("r", true)
	unlock := f.async(lease.Unlock, "r", "a", lease.Persistent)
	p := <-f.backend.held
	if _, err := f.backend.apply(p.rec); err != nil { // the hand-off commits...
		t.Fatal(err)
	}
	if end != nil {
		end(p.c.(*call).handoff)
	}
	p.c.Committed(0, durability.ErrUnknownOutcome) // ...and the proposer cannot tell
	if r := <-unlock; r.Status != lease.Errored {
		t.Fatalf("unlock: %+v, want Errored", r)
	}
	return w
}

// A waiter granted by a hand-off whose outcome is unknown may hold the
// lock: whatever ends its wait, it is never told Busy or MustRetry
// (certainly not granted), only Locked (the reload shows it) or Errored.
func TestHandOffUnknownNeverAnsweredNotGranted(t *testing.T) {
	t.Run("wait over before the outcome", func(t *testing.T) {
		f := newFixture(t, 1, 100)
		w := handOffUnknown(t, f, func(h *call) { h.waitOver = true }) // as leave would mark it
		if r := <-w; r.Status != lease.Errored && r.Status != lease.Locked {
			t.Fatalf("waiter: %+v, want Errored or Locked: its grant committed", r)
		}
	})
	t.Run("node stops serving", func(t *testing.T) {
		f := newFixture(t, 1, 100)
		w := handOffUnknown(t, f, func(*call) { f.serving[1].Store(false) })
		if r := <-w; r.Status != lease.Errored {
			t.Fatalf("waiter: %+v, want Errored: its grant committed, and this node no longer serves", r)
		}
	})
}

// TestHandOffUnknownThenRegrantFenced: a hand-off to w whose outcome is
// unknown is decided again from the reloaded (stale) record, which shows
// the old holder's lease lapsed, so w is granted a second time; then the
// first record commits and the second is refused by the fence. w holds
// the lock from the first: it must not be told MustRetry ("certainly not
// applied"), nor have its Waited measured from the second grant.
func TestHandOffUnknownThenRegrantFenced(t *testing.T) {
	f, first, r := handOffUnknownThenRegrantFenced(t)
	switch {
	case r.Status == lease.Locked && r.Token == first.Token && r.Waited == 100*time.Millisecond:
	case r.Status == lease.Errored:
	default:
		t.Fatalf("w: %+v; it holds token %d since the hand-off (waited 100ms): want Locked so, or Errored", r, first.Token)
	}
	if got := f.do(t, lease.Get, "r", "", 0, lease.Persistent); got.Status != lease.Got || string(got.Owner) != "w" {
		t.Fatalf("get: %+v, want w holding", got)
	}
}

// TestUnsafeUnsureNotGranted: the negative control's switch brings the old
// answer back (the fault suite's unsure-handoff-not-granted).
func TestUnsafeUnsureNotGranted(t *testing.T) {
	_, first, r := handOffUnknownThenRegrantFenced(t, func(c *Config) { c.UnsafeUnsureNotGranted = true })
	if r.Status != lease.MustRetry {
		t.Fatalf("w: %+v, want MustRetry (it holds token %d since the hand-off)", r, first.Token)
	}
}

// handOffUnknownThenRegrantFenced plays TestHandOffUnknownThenRegrantFenced's
// scenario and returns w's answer and the hand-off's record.
func handOffUnknownThenRegrantFenced(t *testing.T, tune ...func(*Config)) (*fixture, durability.Record, Response) {
	f := newFixture(t, 1, 100, tune...)
	f.do(t, lease.TryLock, "r", "a", 800*time.Millisecond, lease.Persistent)
	w := f.waitFor(t, context.Background(), "r", "w", lease.WaitForever, lease.Persistent)
	f.clock.Advance(100 * time.Millisecond) // w waits 100 ms before the hand-off
	f.backend.setHold("r", true)
	unlock := f.async(lease.Unlock, "r", "a", lease.Persistent)
	first := <-f.backend.held
	if string(first.rec.Owner) != "w" {
		t.Fatalf("hand-off record %+v, want w's grant", first.rec)
	}
	f.clock.Advance(time.Second) // a's lease lapses: the stale record no longer holds w off
	first.c.Committed(0, durability.ErrUnknownOutcome)
	if r := <-unlock; r.Status != lease.Errored {
		t.Fatalf("unlock: %+v, want Errored", r)
	}
	second := <-f.backend.held // w granted again from the stale reload
	if string(second.rec.Owner) != "w" || second.rec.Base != first.rec.Base {
		t.Fatalf("second record %+v, want w's grant from the same base", second.rec)
	}
	if _, err := f.backend.apply(first.rec); err != nil { // the hand-off commits late
		t.Fatal(err)
	}
	_, err := f.backend.apply(second.rec)
	if !errors.Is(err, durability.ErrFenced) {
		t.Fatalf("second record: %v, want fenced", err)
	}
	second.c.Committed(0, err)
	f.backend.setHold("r", false)
	return f, first.rec, <-w
}

// StopWaiting ends the waits under way and those that come after it with
// ErrClosed and leaves no waiter queued, while other calls are served.
func TestStopWaitingEndsWaits(t *testing.T) {
	f := newFixture(t, 2, 100)
	if r := f.do(t, lease.TryLock, "r", "holder", time.Minute, lease.Ephemeral); r.Status != lease.Locked {
		t.Fatalf("holder: %+v", r)
	}
	wait := func() <-chan error {
		errs := make(chan error, 1)
		f.waitCall(context.Background(), Request{Request: lease.Request{Op: lease.TryLock, Resource: "r", Owner: []byte("w"), TTL: time.Minute, Durability: lease.Ephemeral, Wait: lease.WaitForever}, Partition: 1},
			func(_ Response, err error) { errs <- err })
		return errs
	}
	ended := func(what string, errs <-chan error) {
		t.Helper()
		select {
		case err := <-errs:
			if !errors.Is(err, ErrClosed) {
				t.Fatalf("%s: %v, want ErrClosed", what, err)
			}
		case <-time.After(10 * time.Second): // a liveness check, not a speed one
			t.Fatalf("%s: still waiting 10 s after StopWaiting", what)
		}
	}
	under := wait()
	<-f.waiting
	f.ring.StopWaiting()
	ended("a wait under way", under)
	ended("a wait after StopWaiting", wait())
	// The waits' leave messages are handled before a Get sent after them
	// (an Unlock would overtake them: releases are served first).
	f.sync(t, "r")
	if s := f.stats(t); s.Waiters != 0 {
		t.Fatalf("waiters = %d, want 0", s.Waiters)
	}
	if r := f.do(t, lease.Unlock, "r", "holder", 0, lease.Ephemeral); r.Status != lease.Unlocked {
		t.Fatalf("unlock after StopWaiting: %+v", r)
	}
	if r := f.do(t, lease.Get, "r", "", 0, lease.Ephemeral); r.Status != lease.LockDoesNotExist {
		t.Fatalf("after the release: %+v, want free (no waiter was left to take it)", r)
	}
}

// slowRaise is a token window whose TTL bound is raised only when the test
// says so.
type slowRaise struct {
	ttl    atomic.Int64 // the bound, in nanoseconds
	asked  chan struct{}
	raised chan struct{}
}

func (*slowRaise) TokenBase(int) int64 { return 0 }
func (w *slowRaise) TokenWindow(int, uint64) (lease.Window, bool) {
	return lease.Window{Limit: math.MaxInt64, Soon: math.MaxInt64, TTL: time.Duration(w.ttl.Load())}, true
}
func (w *slowRaise) RaiseTokens(int, uint64, int64) <-chan struct{} { return w.raised }
func (w *slowRaise) RaiseTTL(int, uint64, time.Duration) <-chan struct{} {
	w.asked <- struct{}{}
	return w.raised
}

// StopWaiting ends waits for the lock, not a call that waits for its
// partition's window to be raised: that one is served once the raise is
// done.
func TestStopWaitingLeavesRaises(t *testing.T) {
	w := &slowRaise{asked: make(chan struct{}, 1), raised: make(chan struct{})}
	w.ttl.Store(int64(time.Second))
	f := newFixture(t, 1, 100, func(c *Config) { c.Tokens = w })
	got := make(chan error, 1)
	go func() {
		r, err := f.ring.Do(context.Background(), Request{Request: lease.Request{Op: lease.TryLock, Resource: "r", Owner: []byte("a"), TTL: time.Minute, Durability: lease.Ephemeral}, Partition: 1})
		if err == nil && r.Status != lease.Locked {
			err = fmt.Errorf("answered %v, want Locked", r.Status)
		}
		got <- err
	}()
	<-w.asked // the TryLock waits for a raise of the TTL bound
	f.ring.StopWaiting()
	w.ttl.Store(int64(time.Hour))
	close(w.raised)
	if err := <-got; err != nil {
		t.Fatalf("a TryLock waiting for a raise when StopWaiting was called: %v", err)
	}
}
