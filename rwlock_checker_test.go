package kahuna_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/internal/testknobs"
)

// rwAct is one act of a read/write lock's holder, done between two checks
// that its Lock's Context was live.
type rwAct struct {
	holder     int
	write      bool
	epoch      int64
	start, end time.Time
}

// rwFindings checks acts against the read/write lock's promises: a writer
// never acts while another holder does; two writers never hold one epoch;
// nobody acts under an epoch older than that of a write that already
// acted (a fenced resource would refuse it).
func rwFindings(acts []rwAct) []string {
	var out []string
	sorted := slices.Clone(acts)
	slices.SortFunc(sorted, func(x, y rwAct) int { return x.start.Compare(y.start) })
	for i, a := range sorted {
		for _, b := range sorted[i+1:] {
			if !b.start.Before(a.end) {
				break
			}
			if (a.write || b.write) && a.holder != b.holder {
				out = append(out, fmt.Sprintf("a writer acted beside another holder (epochs %d and %d)", a.epoch, b.epoch))
				break
			}
		}
		if len(out) > 0 {
			break
		}
	}
	writers := map[int64]int{}
	var last rwAct // the write with the highest epoch that has acted
	for _, a := range sorted {
		if a.write {
			if h, ok := writers[a.epoch]; ok && h != a.holder {
				out = append(out, fmt.Sprintf("epoch %d held by two writers", a.epoch))
				break
			}
			writers[a.epoch] = a.holder
		}
		if last.write && a.epoch < last.epoch && a.start.After(last.end) {
			out = append(out, fmt.Sprintf("an act under epoch %d after a write of epoch %d", a.epoch, last.epoch))
			break
		}
		if a.write && a.epoch > last.epoch {
			last = a
		}
	}
	return out
}

// runRWHolders runs holders on one read/write lock for d: a third write,
// the rest read, each with a short lease kept alive; they act a few times
// and release, or one time in five abandon the lock to its lease.
func runRWHolders(t *testing.T, cfg kahuna.Config, holders int, d time.Duration) (acts []rwAct, writes, reads int) {
	n := openNode(t, cfg)
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
					acts = append(acts, rwAct{holder: holder, write: write, epoch: lk.FencingToken(), start: start, end: end})
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
	acts, writes, reads := runRWHolders(t, kahuna.Config{}, 6, 1500*time.Millisecond)
	shared := 0
	for i, a := range acts {
		for _, b := range acts[i+1:] {
			if !a.write && !b.write && a.holder != b.holder && a.start.Before(b.end) && b.start.Before(a.end) {
				shared++
			}
		}
	}
	if writes < 5 || reads < 10 || shared == 0 {
		t.Fatalf("tested too little: %d writes, %d reads, %d pairs of reads at once", writes, reads, shared)
	}
	if f := rwFindings(acts); len(f) > 0 {
		t.Fatalf("%d writes, %d reads, %d acts: %v", writes, reads, len(acts), f)
	}
	t.Logf("%d writes, %d reads (%d pairs of reads at once), %d acts: no finding", writes, reads, shared, len(acts))

	for _, c := range []struct {
		name string
		cfg  kahuna.Config
		want string
	}{
		{"overcommit", testknobs.WithPermitOvercommit(kahuna.Config{}), "beside another holder"},
		{"token-repeat", testknobs.WithTokenRepeat(kahuna.Config{}), "held by two writers"},
	} {
		t.Run("negative-control/"+c.name, func(t *testing.T) {
			acts, _, _ := runRWHolders(t, c.cfg, 6, 1500*time.Millisecond)
			f := rwFindings(acts)
			if !slices.ContainsFunc(f, func(s string) bool { return strings.Contains(s, c.want) }) {
				t.Fatalf("the broken node was not caught (%q wanted): %v", c.want, f)
			}
			t.Logf("caught: %v", f)
		})
	}
}
