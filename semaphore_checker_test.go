package kahuna_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/checker"
	"github.com/kahunago/kahuna/internal/testknobs"
)

// actWhileHeld keeps lk alive and acts one to four times under it (each
// act a few milliseconds), recording an act only if lk's Context was live
// before and after it: a holder cannot vouch for more. Then it releases
// lk, or one time in five abandons it to its lease, and says so.
func actWhileHeld(ctx context.Context, lk *kahuna.Lock, rng *rand.Rand, record func(start, end time.Time)) (abandoned bool) {
	alive, stop := context.WithCancel(ctx)
	defer stop()
	lk.KeepAlive(alive, 0)
	for range 1 + rng.IntN(4) {
		if lk.Context().Err() != nil {
			break
		}
		start := time.Now()
		time.Sleep(time.Duration(1+rng.IntN(3)) * time.Millisecond) // the act itself
		end := time.Now()
		if lk.Context().Err() != nil {
			break
		}
		record(start, end)
	}
	stop()
	if rng.IntN(5) == 0 {
		return true // its lease ends by itself
	}
	_ = lk.Unlock(context.Background())
	return false
}

// runPermitHolders runs holders on one semaphore of limit permits for d:
// each waits for a permit with a short lease kept alive, acts a few times,
// and releases it, or abandons it (stops renewing; the slot is granted
// again once its lease ends). It returns the acts and how many grants
// were made, and how many of them after an abandoned permit.
func runPermitHolders(t *testing.T, cfg kahuna.Config, limit, holders int, d time.Duration) (acts []checker.Act, grants, abandoned int) {
	n := openNode(t, cfg)
	base := time.Now()
	sem := kahuna.NewSemaphore(n, "checked", limit)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := 0
	for w := range holders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for ctx.Err() == nil {
				p, err := sem.Acquire(ctx, 1, kahuna.WithTTL(150*time.Millisecond))
				if err != nil {
					continue
				}
				mu.Lock()
				holder := next
				next++
				grants++
				mu.Unlock()
				g := p.Grants()[0]
				left := actWhileHeld(ctx, p.Lock, rng, func(start, end time.Time) {
					mu.Lock()
					acts = append(acts, checker.Act{Holder: holder, Slot: g.Slot, Token: g.Token, Start: start.Sub(base), End: end.Sub(base)})
					mu.Unlock()
				})
				if left {
					mu.Lock()
					abandoned++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return acts, grants, abandoned
}

// The semaphore checker over an embedded node: five holders on two
// permits, releasing or abandoning them; its negative controls are a node
// that grants live permits again and one that repeats a slot's token.
func TestSemaphoreChecker(t *testing.T) {
	t.Parallel()
	const limit = 2
	acts, grants, abandoned := runPermitHolders(t, kahuna.Config{}, limit, 5, 1500*time.Millisecond)
	if grants < 20 || abandoned < 2 || len(acts) < 20 {
		t.Fatalf("tested too little: %d grants, %d abandoned, %d acts", grants, abandoned, len(acts))
	}
	if f := checker.CheckPermits(acts, limit); len(f) > 0 {
		t.Fatalf("%d grants, %d acts: %v", grants, len(acts), f)
	}
	t.Logf("%d grants (%d after an abandoned permit's lease), %d acts: no finding", grants, abandoned, len(acts))

	for _, c := range []struct {
		name string
		cfg  kahuna.Config
		want string
	}{
		{"overcommit", testknobs.WithPermitOvercommit(kahuna.Config{}), "over-limit"},
		{"token-repeat", testknobs.WithTokenRepeat(kahuna.Config{}), "token-twice"},
	} {
		t.Run("negative-control/"+c.name, func(t *testing.T) {
			acts, _, _ := runPermitHolders(t, c.cfg, limit, 5, 1500*time.Millisecond)
			f := checker.CheckPermits(acts, limit)
			if !slices.ContainsFunc(f, func(v checker.Violation) bool { return v.Kind == c.want }) {
				t.Fatalf("the broken node was not caught (%q wanted): %v", c.want, f)
			}
			t.Logf("caught: %v", f)
		})
	}
}
