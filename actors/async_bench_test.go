package actors

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// BenchmarkDoAsync: a persistent TryLock and its Unlock through DoAsync on
// an idle actor, on a context that can end (as a stream's), each answered
// through its function; the backend commits at once. It reports the
// allocations a lock op costs around the actor's decision.
func BenchmarkDoAsync(b *testing.B) {
	f := newFixture(b, 1, 100, func(c *Config) {
		c.afterFunc = func(time.Duration, func()) stopper { return &fakeTimer{} }
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	answers := make(chan Response, 1)
	done := func(resp Response, err error) {
		if err != nil {
			b.Errorf("DoAsync: %v", err)
		}
		answers <- resp
	}
	lock := asyncReq(lease.TryLock, "r", "a", lease.Persistent)
	unlock := asyncReq(lease.Unlock, "r", "a", lease.Persistent)
	b.ReportAllocs()
	for b.Loop() {
		f.ring.DoAsync(ctx, lock, AnswerFunc(done))
		if r := <-answers; r.Status != lease.Locked {
			b.Fatalf("TryLock = %+v", r)
		}
		f.ring.DoAsync(ctx, unlock, AnswerFunc(done))
		if r := <-answers; r.Status != lease.Unlocked {
			b.Fatalf("Unlock = %+v", r)
		}
	}
}

// BenchmarkDoAsyncHandOff: one ephemeral lock handed on among eight
// owners, as on a hot lock over a LockStream: seven wait in its queue
// (each TryLock on the stream's context, withdrawable on its own, as a
// LockStream's Lock is, with an end-of-wait timer), and each op is the holder's Unlock, which grants
// the head of the queue, and the holder's next waiting TryLock behind the
// others. It reports what a hand-off costs in the lock actors, its
// allocations included.
func BenchmarkDoAsyncHandOff(b *testing.B) {
	f := newFixture(b, 1, 100, func(c *Config) {
		c.afterFunc = func(time.Duration, func()) stopper { return &fakeTimer{} }
		c.onQueued, c.onWait = nil, nil
	})
	stream, cancel := context.WithCancel(context.Background())
	defer cancel()
	const owners = 8
	granted := make(chan int, owners)
	unlocked := make(chan Response, 1)
	var over atomic.Bool // the waits left when it ends are answered errors
	wait := func(owner int) {
		req := asyncReq(lease.TryLock, "r", fmt.Sprint(owner), lease.Ephemeral)
		req.Wait = time.Minute
		f.ring.DoAsync(stream, req, AnswerFunc(func(resp Response, err error) {
			if over.Load() {
				return
			}
			if err != nil || resp.Status != lease.Locked {
				b.Errorf("waiting TryLock = %+v, %v", resp, err)
			}
			granted <- owner
		}))
	}
	for o := range owners {
		wait(o)
	}
	holder := <-granted
	unlocks := make([]Request, owners)
	for o := range unlocks {
		unlocks[o] = asyncReq(lease.Unlock, "r", fmt.Sprint(o), lease.Ephemeral)
	}
	onUnlock := func(resp Response, err error) {
		if err != nil {
			b.Errorf("Unlock: %v", err)
		}
		unlocked <- resp
	}
	b.ReportAllocs()
	for b.Loop() {
		f.ring.DoAsync(stream, unlocks[holder], AnswerFunc(onUnlock))
		if r := <-unlocked; r.Status != lease.Unlocked {
			b.Fatalf("Unlock = %+v", r)
		}
		wait(holder)
		holder = <-granted
	}
	over.Store(true)
}
