package kahuna_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kahunago/kahuna"
)

// Acquire a lock, keep it alive while working under its Context, and
// release it. The Context's deadline is the holder's end of the lease: the
// send time of the request that granted (or last extended) it, plus the
// TTL, minus the safety margin.
func ExampleAcquire() {
	ctx := context.Background()
	node, err := kahuna.Open(kahuna.Config{}) // one node, in memory
	if err != nil {
		fmt.Println(err)
		return
	}
	defer node.Close()

	before := time.Now()
	lock, err := kahuna.Acquire(ctx, node, "jobs/nightly-export",
		kahuna.WithTTL(30*time.Second), kahuna.WithWait(5*time.Second))
	if errors.Is(err, kahuna.ErrBusy) {
		return // someone else is on it
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lock.Unlock(ctx)
	lock.KeepAlive(ctx, 10*time.Second)

	work := lock.Context()
	deadline, _ := work.Deadline()
	// The default margin is 1 % of the TTL plus 2 ms.
	fmt.Println("deadline within the lease:", !deadline.Before(before.Add(30*time.Second-302*time.Millisecond)) &&
		deadline.Before(time.Now().Add(30*time.Second)))
	fmt.Println("token:", lock.FencingToken()) // hand it to what the lock protects

	if err := lock.Unlock(ctx); err != nil {
		fmt.Println(err)
		return
	}
	<-work.Done()
	fmt.Println("released:", errors.Is(context.Cause(work), kahuna.ErrReleased))
	// Output:
	// deadline within the lease: true
	// token: 0
	// released: true
}

// Without KeepAlive or Extend, a lock is lost at its deadline: Lost closes
// and the Context ends with a cause matching ErrLockLost.
func ExampleLock_Lost() {
	ctx := context.Background()
	node, err := kahuna.Open(kahuna.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer node.Close()

	lock, err := kahuna.Acquire(ctx, node, "jobs/short", kahuna.WithTTL(50*time.Millisecond),
		kahuna.WithDurability(kahuna.Ephemeral))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lock.Unlock(ctx)
	<-lock.Lost()
	// The lock's Context ends just after Lost closes, caused by ErrLockLost.
	<-lock.Context().Done()
	fmt.Println("lost:", errors.Is(context.Cause(lock.Context()), kahuna.ErrLockLost))
	fmt.Println("past the deadline:", !time.Now().Before(lock.Expires()))
	// Output:
	// lost: true
	// past the deadline: true
}
