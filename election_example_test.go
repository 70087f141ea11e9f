package kahuna_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kahunago/kahuna"
)

// A singleton worker: every replica campaigns; the one elected works
// under the leadership's Context, which ends before any other replica
// can be elected, and resigns when done, handing over at once.
func ExampleCampaign() {
	ctx := context.Background()
	node, err := kahuna.Open(kahuna.Config{}) // or kahuna.Dial(ctx, endpoints)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer node.Close()

	ld, err := kahuna.Campaign(ctx, node, "nightly-export", []byte("replica-a"), kahuna.WithTTL(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("leading with epoch", ld.Epoch())
	work := ld.Context() // ends when the leadership does: stop the work then
	select {
	case <-work.Done():
		fmt.Println("lost:", context.Cause(work))
	default:
		// ... the export, passing ld.Epoch() to what it writes ...
	}
	if err := ld.Resign(ctx); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("resigned:", errors.Is(context.Cause(work), kahuna.ErrResigned))
	// Output:
	// leading with epoch 0
	// resigned: true
}

// A leader fences its writes with its epoch: the store keeps the highest
// epoch it has seen and refuses a lower one, so a deposed leader that
// still runs (paused past its lease, then woken) cannot overwrite its
// successor's work. The fence module does this for SQL, HTTP and files.
func ExampleLeadership_Epoch() {
	ctx := context.Background()
	node, err := kahuna.Open(kahuna.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer node.Close()

	store := &epochStore{}
	old, _ := kahuna.Campaign(ctx, node, "scheduler", []byte("a"), kahuna.WithTTL(time.Second))
	_ = old.Resign(ctx) // say it was deposed while it slept
	next, _ := kahuna.Campaign(ctx, node, "scheduler", []byte("b"))
	defer next.Resign(ctx)

	fmt.Println("new leader writes:", store.write(next.Epoch(), "plan B"))
	fmt.Println("old leader writes:", store.write(old.Epoch(), "plan A"))
	// Output:
	// new leader writes: <nil>
	// old leader writes: epoch 0 is older than epoch 1
}

// epochStore is a resource that keeps the highest epoch it has seen.
type epochStore struct {
	mu    sync.Mutex
	epoch int64
	value string
}

func (s *epochStore) write(epoch int64, v string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if epoch < s.epoch {
		return fmt.Errorf("epoch %d is older than epoch %d", epoch, s.epoch)
	}
	s.epoch, s.value = epoch, v
	return nil
}

// An observer follows who leads: the current state first, then each new
// term and each vacancy.
func ExampleObserve() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	node, err := kahuna.Open(kahuna.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer node.Close()

	events := kahuna.Observe(ctx, node, "scheduler")
	var ld *kahuna.Leadership
	for ev, err := range events {
		if err != nil {
			fmt.Println(err)
			return
		}
		switch ev.Kind {
		case kahuna.Elected:
			fmt.Printf("elected %s, epoch %d\n", ev.Value, ev.Epoch)
			// The leader moves to another address in the same term.
			if err := ld.Proclaim(ctx, []byte("10.0.0.7:9000")); err != nil {
				fmt.Println(err)
				return
			}
		case kahuna.Proclaimed:
			fmt.Printf("proclaimed %s, epoch %d\n", ev.Value, ev.Epoch)
			return
		case kahuna.Vacant:
			fmt.Println("vacant")
			// The current state: no leader yet. A candidate publishes
			// where it serves as its value.
			ld, err = kahuna.Campaign(ctx, node, "scheduler", []byte("10.0.0.5:9000"))
			if err != nil {
				fmt.Println(err)
				return
			}
			defer ld.Resign(ctx)
		}
	}
	// Output:
	// vacant
	// elected 10.0.0.5:9000, epoch 0
	// proclaimed 10.0.0.7:9000, epoch 0
}

// A session holds several locks under one lease: one renewal loop, one
// Context for all, one Close to release them; a restarted process takes
// it back by ID and gets its names back with the same tokens.
func ExampleNewSession() {
	ctx := context.Background()
	node, err := kahuna.Open(kahuna.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer node.Close()

	s, err := kahuna.NewSession(ctx, node, kahuna.WithTTL(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	from, _ := kahuna.Acquire(ctx, node, "accounts/17", kahuna.WithSession(s))
	to, _ := kahuna.Acquire(ctx, node, "accounts/42", kahuna.WithSession(s))
	fmt.Println("tokens", from.FencingToken(), to.FencingToken())

	// The process stops renewing (as if it restarted) and takes the
	// session back by its ID.
	s.Orphan()
	again, err := kahuna.ResumeSession(ctx, node, s.ID(), kahuna.WithTTL(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	back, _ := kahuna.Acquire(ctx, node, "accounts/17", kahuna.WithSession(again))
	fmt.Println("taken back with token", back.FencingToken())
	if err := again.Close(ctx); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("closed:", errors.Is(context.Cause(back.Context()), kahuna.ErrSessionClosed))
	// Output:
	// tokens 0 0
	// taken back with token 0
	// closed: true
}
