// Package fencetest drives the concurrency test every fence helper runs:
// many writers with interleaved tokens write one fenced value, and the
// result is held to the rule.
package fencetest

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kahunago/kahuna/fence"
)

// Outcome is one fenced write: the token it carried and what it returned.
type Outcome struct {
	Token uint64
	Err   error
}

// Hammer runs writers goroutines of perWriter writes each, all released at
// once. A shared counter plays the lock service: before a write, one time
// in four a writer takes the next token (a new grant); half of the writes
// carry the latest token, the others one 1 to 3 behind (a holder that
// slept through later grants). So tokens repeat (a holder's second write),
// writers overtake one another, and some are stale. write does one fenced
// write; Hammer returns every outcome.
func Hammer(ctx context.Context, writers, perWriter int, seed uint64, write func(ctx context.Context, tok uint64) error) []Outcome {
	var issued atomic.Uint64
	out := make([][]Outcome, writers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		r := rand.New(rand.NewPCG(seed, uint64(w)))
		wg.Go(func() {
			<-start
			for range perWriter {
				tok := issued.Load()
				if r.Uint64N(4) == 0 {
					tok = issued.Add(1)
				}
				if lag := r.Uint64N(6); lag > 2 {
					tok -= min(tok, lag-2)
				}
				out[w] = append(out[w], Outcome{Token: tok, Err: write(ctx, tok)})
			}
		})
	}
	close(start)
	wg.Wait()
	var all []Outcome
	for _, o := range out {
		all = append(all, o...)
	}
	return all
}

// Check holds a run to the rule. landed is the value's history: the tokens
// of the writes that landed, in the order they landed (read back from the
// resource itself). It checks that landed never goes down; that every
// accepted write is in it once and nothing else is; and that every
// rejected write got a *fence.StaleError whose winning token is above its
// own and is a token that landed (so no current writer was rejected).
func Check(t testing.TB, landed []uint64, outcomes []Outcome) {
	t.Helper()
	for i := 1; i < len(landed); i++ {
		if landed[i] < landed[i-1] {
			t.Fatalf("token %d landed after %d (position %d of %v)", landed[i], landed[i-1], i, landed)
		}
	}
	inLanded := make(map[uint64]int)
	for _, tok := range landed {
		inLanded[tok]++
	}
	accepted := make(map[uint64]int)
	var nAccepted, nStale int
	for _, o := range outcomes {
		if o.Err == nil {
			accepted[o.Token]++
			nAccepted++
			continue
		}
		var stale *fence.StaleError
		if !errors.As(o.Err, &stale) || !errors.Is(o.Err, fence.ErrStale) {
			t.Fatalf("write with token %d: %v, want nil or a *fence.StaleError", o.Token, o.Err)
		}
		nStale++
		if stale.Current <= o.Token {
			t.Fatalf("write with token %d rejected by mark %d: a current writer was rejected", o.Token, stale.Current)
		}
		if inLanded[stale.Current] == 0 {
			t.Fatalf("write with token %d rejected by mark %d, which never landed", o.Token, stale.Current)
		}
		if stale.Token.Value != o.Token {
			t.Fatalf("StaleError names token %d, the write carried %d", stale.Token.Value, o.Token)
		}
	}
	if len(landed) != nAccepted {
		t.Fatalf("%d writes landed, %d were accepted", len(landed), nAccepted)
	}
	for tok, n := range accepted {
		if inLanded[tok] != n {
			t.Fatalf("token %d: %d writes accepted, %d landed", tok, n, inLanded[tok])
		}
	}
	if nStale == 0 || nAccepted == 0 {
		t.Fatalf("%d accepted, %d stale: the run did not exercise both sides", nAccepted, nStale)
	}
	t.Logf("%d writes: %d landed, %d rejected as stale", len(outcomes), nAccepted, nStale)
}
