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

// permitAct is one act of a permit holder on its slot: done between two
// checks that the Permit's Context was live, on this process's monotonic
// clock.
type permitAct struct {
	holder     int // which Permit (a fresh one per grant)
	slot       int
	token      int64
	start, end time.Time
}

// semaphoreFindings checks acts against the semaphore's promises: at no
// instant more than limit holders act, and a slot's token names one grant
// (two holders never act with one token) and only rises (nobody acts with
// a token below one that already acted on the slot).
func semaphoreFindings(acts []permitAct, limit int) []string {
	var out []string
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, a := range acts {
		edges = append(edges, edge{a.start, +1}, edge{a.end, -1})
	}
	slices.SortFunc(edges, func(x, y edge) int {
		if c := x.at.Compare(y.at); c != 0 {
			return c
		}
		return x.delta - y.delta // an end before a start at one instant
	})
	acting, most := 0, 0
	for _, e := range edges {
		acting += e.delta
		most = max(most, acting)
	}
	if most > limit {
		out = append(out, fmt.Sprintf("%d holders acted at once, over the limit of %d", most, limit))
	}
	byToken := map[[2]int64]int{}
	for _, a := range acts {
		k := [2]int64{int64(a.slot), a.token}
		if h, ok := byToken[k]; ok && h != a.holder {
			out = append(out, fmt.Sprintf("slot %d token %d granted to two holders", a.slot, a.token))
			break
		}
		byToken[k] = a.holder
	}
	sorted := slices.Clone(acts)
	slices.SortFunc(sorted, func(x, y permitAct) int { return x.start.Compare(y.start) })
	high := map[int]permitAct{}
	for _, a := range sorted {
		if h, ok := high[a.slot]; ok && a.token < h.token && a.start.After(h.end) {
			out = append(out, fmt.Sprintf("slot %d: token %d acted after token %d had", a.slot, a.token, h.token))
			break
		}
		if a.token > high[a.slot].token {
			high[a.slot] = a
		}
	}
	return out
}

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
func runPermitHolders(t *testing.T, cfg kahuna.Config, limit, holders int, d time.Duration) (acts []permitAct, grants, abandoned int) {
	n := openNode(t, cfg)
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
					acts = append(acts, permitAct{holder: holder, slot: g.Slot, token: g.Token, start: start, end: end})
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
	const limit = 2
	acts, grants, abandoned := runPermitHolders(t, kahuna.Config{}, limit, 5, 1500*time.Millisecond)
	if grants < 20 || abandoned < 2 || len(acts) < 20 {
		t.Fatalf("tested too little: %d grants, %d abandoned, %d acts", grants, abandoned, len(acts))
	}
	if f := semaphoreFindings(acts, limit); len(f) > 0 {
		t.Fatalf("%d grants, %d acts: %v", grants, len(acts), f)
	}
	t.Logf("%d grants (%d after an abandoned permit's lease), %d acts: no finding", grants, abandoned, len(acts))

	for _, c := range []struct {
		name string
		cfg  kahuna.Config
		want string
	}{
		{"overcommit", testknobs.WithPermitOvercommit(kahuna.Config{}), "over the limit"},
		{"token-repeat", testknobs.WithTokenRepeat(kahuna.Config{}), "granted to two holders"},
	} {
		t.Run("negative-control/"+c.name, func(t *testing.T) {
			acts, _, _ := runPermitHolders(t, c.cfg, limit, 5, 1500*time.Millisecond)
			f := semaphoreFindings(acts, limit)
			if !slices.ContainsFunc(f, func(s string) bool { return strings.Contains(s, c.want) }) {
				t.Fatalf("the broken node was not caught (%q wanted): %v", c.want, f)
			}
			t.Logf("caught: %v", f)
		})
	}
}
