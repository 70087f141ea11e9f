package kahuna_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/kahunago/kahuna"
)

// At most two builds at once: each build takes a permit, works under its
// Context, and passes its slot's fencing token to what it writes, so a
// builder that paused past its lease cannot overwrite the slot's next
// holder's work.
func ExampleSemaphore() {
	ctx := context.Background()
	node, err := kahuna.Open(kahuna.Config{}) // or kahuna.Dial(ctx, endpoints): gRPC carries permits
	if err != nil {
		fmt.Println(err)
		return
	}
	defer node.Close()

	runners := kahuna.NewSemaphore(node, "runners", 2)
	a, err := runners.Acquire(ctx, 1) // waits its turn
	if err != nil {
		fmt.Println(err)
		return
	}
	b, err := runners.Acquire(ctx, 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, p := range []*kahuna.Permit{a, b} {
		g := p.Grants()[0]
		fmt.Printf("building in %s with token %d\n", p.FenceName(g), g.Token)
	}
	_, err = runners.TryAcquire(ctx, 1)
	fmt.Println("a third build:", errors.Is(err, kahuna.ErrBusy))
	_, err = kahuna.NewSemaphore(node, "runners", 3).TryAcquire(ctx, 1)
	fmt.Println(err)
	info, _, err := node.Get(ctx, kahuna.SemaphorePrefix+"runners", kahuna.Persistent) // who holds what
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, h := range info.Holders {
		fmt.Printf("slot %d held, token %d\n", h.Slot, h.FencingToken)
	}

	a.Unlock(ctx)
	c, err := runners.TryAcquire(ctx, 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("slot %d again, token %d\n", c.Grants()[0].Slot, c.FencingToken())
	// Output:
	// building in semaphore:runners/0 with token 1
	// building in semaphore:runners/1 with token 1
	// a third build: true
	// kahuna: acquire permits runners: invalid input: semaphore limit is 2; this request states 3
	// slot 0 held, token 1
	// slot 1 held, token 1
	// slot 0 again, token 2
}

// Readers share the epoch of the last write; a writer takes the next one.
// A store that keeps the highest epoch it has seen refuses a write from a
// superseded epoch, whether by a writer or derived from a read.
func ExampleRWLock() {
	ctx := context.Background()
	node, err := kahuna.Open(kahuna.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer node.Close()

	index := kahuna.NewRWLock(node, "search-index")
	r1, _ := index.RLock(ctx)
	r2, _ := index.RLock(ctx)
	fmt.Println("two readers, epochs", r1.FencingToken(), r2.FencingToken())
	_, err = index.TryLock(ctx)
	fmt.Println("a writer meanwhile:", errors.Is(err, kahuna.ErrBusy))
	r1.Unlock(ctx)
	r2.Unlock(ctx)

	w, err := index.Lock(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("the writer's epoch", w.FencingToken())
	w.Unlock(ctx)
	r3, _ := index.RLock(ctx)
	fmt.Println("the next reader's epoch", r3.FencingToken())
	// Output:
	// two readers, epochs 0 0
	// a writer meanwhile: true
	// the writer's epoch 1
	// the next reader's epoch 1
}

// Two accounts locked together, in one session: every name or none. They
// share the partition key "accounts", so one request grants both in one
// replicated step, and nobody sees one held without the other; two
// transfers between the same accounts in opposite directions cannot
// deadlock.
func ExampleAcquireAll() {
	ctx := context.Background()
	node, err := kahuna.Open(kahuna.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer node.Close()

	s, err := kahuna.NewSession(ctx, node)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(ctx)
	locks, err := kahuna.AcquireAll(ctx, node, []string{"accounts/42", "accounts/17"}, kahuna.WithSession(s))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, lk := range locks {
		fmt.Println(lk.Resource(), "token", lk.FencingToken())
	}
	// Output:
	// accounts/42 token 0
	// accounts/17 token 0
}
