package kahuna_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kahunago/kahuna"
)

// Embedded: a node inside the program (here in memory; give Config a
// DataDir to keep persistent locks on disk), and a lock taken on it.
func ExampleOpen() {
	ctx := context.Background()
	node, err := kahuna.Open(kahuna.Config{}) // DataDir "": in memory
	if err != nil {
		fmt.Println(err)
		return
	}
	defer node.Close()

	lock, err := kahuna.Acquire(ctx, node, "jobs/nightly-export", kahuna.WithTTL(30*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("locked", lock.Resource(), "token", lock.FencingToken())

	// Another owner is refused while the lease lasts.
	_, err = kahuna.Acquire(ctx, node, "jobs/nightly-export")
	fmt.Println("second owner busy:", errors.Is(err, kahuna.ErrBusy))

	if err := lock.Unlock(ctx); err != nil {
		fmt.Println(err)
		return
	}
	again, err := kahuna.Acquire(ctx, node, "jobs/nightly-export")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer again.Unlock(ctx)
	fmt.Println("after the release, token", again.FencingToken())
	// Output:
	// locked jobs/nightly-export token 0
	// second owner busy: true
	// after the release, token 1
}

// Remote: a Client on the nodes' URLs is a Locker like a Node, so the same
// Acquire works over the network (gRPC by default, WithREST for REST).
func ExampleDial() {
	ctx := context.Background()
	// A node serving the wire API on a free port, standing in for a
	// running kahuna at http://10.0.0.1:2070.
	node, err := kahuna.Open(kahuna.Config{ListenAddress: "127.0.0.1:0"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer node.Close()

	client, err := kahuna.Dial(ctx, []string{"http://" + node.ListenAddress()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()

	lock, err := kahuna.Acquire(ctx, client, "jobs/nightly-export", kahuna.WithWait(5*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	info, r, err := client.Get(ctx, "jobs/nightly-export", kahuna.Persistent)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(r.Status, "owned by the lock's owner:", string(info.Owner) == string(lock.Owner()))
	if err := lock.Unlock(ctx); err != nil {
		fmt.Println(err)
		return
	}
	_, r, _ = client.Get(ctx, "jobs/nightly-export", kahuna.Persistent)
	fmt.Println("after Unlock:", r.Status)
	// Output:
	// Got owned by the lock's owner: true
	// after Unlock: LockDoesNotExist
}

// KeepAlive extends the lease in the background, so work may run longer
// than the TTL; run it under the lock's Context, which ends if the lock
// is lost.
func ExampleLock_KeepAlive() {
	ctx := context.Background()
	node, err := kahuna.Open(kahuna.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer node.Close()

	lock, err := kahuna.Acquire(ctx, node, "jobs/reindex", kahuna.WithTTL(300*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lock.Unlock(ctx)
	lock.KeepAlive(ctx, 0) // every third of the TTL

	// Work for three TTLs, stopping early if the lock is lost.
	work := lock.Context()
	select {
	case <-time.After(900 * time.Millisecond):
		fmt.Println("work done, lock still held:", work.Err() == nil)
	case <-work.Done():
		fmt.Println("lock lost:", context.Cause(work))
	}
	// Output:
	// work done, lock still held: true
}

// tokenCheckedStore is what a lock protects: it remembers the highest fencing
// token it has seen and refuses writes that carry a lower one.
type tokenCheckedStore struct {
	mu      sync.Mutex
	highest int64
	value   string
}

func (s *tokenCheckedStore) Write(token int64, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.highest {
		return fmt.Errorf("stale token %d (seen %d)", token, s.highest)
	}
	s.highest, s.value = token, value
	return nil
}

// Fencing: a holder that lost its lease without noticing (a pause, a slow
// network) may still try to write. Every grant carries a larger token than
// the one before, so the protected store refuses the stale holder's write.
func ExampleLock_FencingToken() {
	ctx := context.Background()
	node, err := kahuna.Open(kahuna.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer node.Close()
	store := &tokenCheckedStore{}

	first, err := kahuna.Acquire(ctx, node, "reports/daily", kahuna.WithTTL(200*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	// The first holder stalls past its lease (no KeepAlive)...
	<-first.Lost()

	// ...and a second holder takes over, with a larger token.
	second, err := kahuna.Acquire(ctx, node, "reports/daily", kahuna.WithWait(5*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer second.Unlock(ctx)
	fmt.Println("second holder writes:", store.Write(second.FencingToken(), "from the second holder"))

	// The first holder wakes up and writes with its old token.
	fmt.Println("first holder writes:", store.Write(first.FencingToken(), "from the first holder"))
	fmt.Println("store holds:", store.value)
	// Output:
	// second holder writes: <nil>
	// first holder writes: stale token 0 (seen 1)
	// store holds: from the second holder
}

// Waiting on the server for a busy lock, and watching its changes: a
// worker waits in the lock's FIFO queue (no polling) while a watcher sees
// the hand-off.
func ExampleNode_Watch() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	node, err := kahuna.Open(kahuna.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer node.Close()

	first, err := kahuna.Acquire(ctx, node, "jobs/report", kahuna.WithOwner([]byte("first")))
	if err != nil {
		fmt.Println(err)
		return
	}
	events := make(chan kahuna.WatchEvent)
	go func() {
		for ev, err := range node.Watch(ctx, "jobs/report") {
			if err != nil {
				return
			}
			events <- ev
		}
	}()
	ev := <-events // the state the watch starts from
	fmt.Printf("now: %s by %s, token %d\n", ev.Kind, ev.Owner, ev.FencingToken)

	second := make(chan *kahuna.Lock)
	go func() {
		// Waits on the server, in the lock's queue, until first lets go.
		l, err := kahuna.Acquire(ctx, node, "jobs/report", kahuna.WithOwner([]byte("second")), kahuna.WithWait(time.Minute))
		if err != nil {
			fmt.Println(err)
		}
		second <- l
	}()
	for node.Stats().Waiters == 0 { // in the queue before the release
		time.Sleep(time.Millisecond)
	}
	_ = first.Unlock(ctx) // hands the lock to the head of the queue, in the same step
	for range 2 {
		ev := <-events
		if ev.Kind == kahuna.EventReleased {
			fmt.Printf("then: released, token %d\n", ev.FencingToken)
			continue
		}
		fmt.Printf("then: %s by %s, token %d\n", ev.Kind, ev.Owner, ev.FencingToken)
	}
	l := <-second
	fmt.Println("second holds it with token", l.FencingToken())
	_ = l.Unlock(ctx)
	// Output:
	// now: acquired by first, token 0
	// then: released, token 0
	// then: acquired by second, token 1
	// second holds it with token 1
}
