package kahuna

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestSessionErrAtALockDeadlineBeforeTimer: the session's Context.Err
// reports the session's end as soon as a lock it holds has passed its
// deadline (here earlier than the session's, whose renewal went through),
// before that lock's timer fires.
func TestSessionErrAtALockDeadlineBeforeTimer(t *testing.T) {
	clk := newFakeClock()
	f := &fakeLocker{clk: clk}
	ctx := context.Background()
	s, err := NewSession(ctx, f, withClock(clk), WithTTL(testTTL))
	if err != nil {
		t.Fatal(err)
	}
	lk, err := Acquire(ctx, f, "r", WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	clk.mu.Lock()
	clk.now = clk.now.Add(time.Millisecond)
	clk.mu.Unlock()
	if err := s.lease.Extend(ctx, testTTL); err != nil { // the session's renewal; the lock's did not get through
		t.Fatal(err)
	}
	if !lk.Expires().Before(s.Expires()) {
		t.Fatalf("the lock's deadline %v is not before the session's %v", lk.Expires(), s.Expires())
	}
	clk.mu.Lock()
	clk.now = lk.Expires() // the lock's timer has not fired
	clk.mu.Unlock()
	if err := s.Context().Err(); err == nil {
		t.Fatal("the session's Context().Err() is nil at its lock's deadline, before the timer fired")
	}
	if cause := context.Cause(s.Context()); !errors.Is(cause, ErrSessionLost) {
		t.Fatalf("session's cause %v, want ErrSessionLost", cause)
	}
	if !errors.Is(context.Cause(lk.Context()), ErrLockLost) {
		t.Fatalf("lock's cause %v, want ErrLockLost", context.Cause(lk.Context()))
	}
}
