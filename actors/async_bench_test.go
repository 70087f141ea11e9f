package actors

import (
	"context"
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
		f.ring.DoAsync(ctx, lock, done)
		if r := <-answers; r.Status != lease.Locked {
			b.Fatalf("TryLock = %+v", r)
		}
		f.ring.DoAsync(ctx, unlock, done)
		if r := <-answers; r.Status != lease.Unlocked {
			b.Fatalf("Unlock = %+v", r)
		}
	}
}
