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

// runRWHolders runs holders on one read/write lock for d: a third write,
// the rest read, each with a short lease kept alive; they act a few times
// and release, or one time in five abandon the lock to its lease.
func runRWHolders(t *testing.T, cfg kahuna.Config, holders int, d time.Duration) (acts []checker.Act, writes, reads int) {
	n := openNode(t, cfg)
	base := time.Now()
	rw := kahuna.NewRWLock(n, "checked")
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := 0
	for w := range holders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			for ctx.Err() == nil {
				write := rng.IntN(3) == 0
				var lk *kahuna.Lock
				var err error
				if write {
					lk, err = rw.Lock(ctx, kahuna.WithTTL(150*time.Millisecond))
				} else {
					lk, err = rw.RLock(ctx, kahuna.WithTTL(150*time.Millisecond))
				}
				if err != nil {
					continue
				}
				mu.Lock()
				holder := next
				next++
				if write {
					writes++
				} else {
					reads++
				}
				mu.Unlock()
				actWhileHeld(ctx, lk, rng, func(start, end time.Time) { // semaphore_checker_test.go
					mu.Lock()
					acts = append(acts, checker.Act{Holder: holder, Write: write, Token: lk.FencingToken(), Start: start.Sub(base), End: end.Sub(base)})
					mu.Unlock()
				})
			}
		}()
	}
	wg.Wait()
	return acts, writes, reads
}

// The read/write lock checker over an embedded node: six holders reading
// and writing; its negative controls are a node that grants over live
// holders and one whose writes take no new epoch.
func TestRWLockChecker(t *testing.T) {
	t.Parallel()
	acts, writes, reads := runRWHolders(t, kahuna.Config{}, 6, 1500*time.Millisecond)
	shared := 0
	for i, a := range acts {
		for _, b := range acts[i+1:] {
			if !a.Write && !b.Write && a.Holder != b.Holder && a.Start < b.End && b.Start < a.End {
				shared++
			}
		}
	}
	if writes < 5 || reads < 10 || shared == 0 {
		t.Fatalf("tested too little: %d writes, %d reads, %d pairs of reads at once", writes, reads, shared)
	}
	if f := checker.CheckRWLock(acts); len(f) > 0 {
		t.Fatalf("%d writes, %d reads, %d acts: %v", writes, reads, len(acts), f)
	}
	t.Logf("%d writes, %d reads (%d pairs of reads at once), %d acts: no finding", writes, reads, shared, len(acts))

	for _, c := range []struct {
		name string
		cfg  kahuna.Config
		want string
	}{
		{"overcommit", testknobs.WithPermitOvercommit(kahuna.Config{}), "writer-beside-holder"},
		{"token-repeat", testknobs.WithTokenRepeat(kahuna.Config{}), "epoch-two-writers"},
	} {
		t.Run("negative-control/"+c.name, func(t *testing.T) {
			acts, _, _ := runRWHolders(t, c.cfg, 6, 1500*time.Millisecond)
			f := checker.CheckRWLock(acts)
			if !slices.ContainsFunc(f, func(v checker.Violation) bool { return v.Kind == c.want }) {
				t.Fatalf("the broken node was not caught (%q wanted): %v", c.want, f)
			}
			t.Logf("caught: %v", f)
		})
	}
}
