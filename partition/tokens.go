package partition

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
)

// Ephemeral fencing tokens live only in a leader's memory, yet they must
// never go backwards for a name, across leader changes included. Each
// partition has a replicated reach, above every ephemeral token any of its
// leaders granted: a leader reads it after its fence (its base: every
// earlier reign's tokens are below it), and grants ephemeral tokens only
// below a limit it raised through Raft in its own epoch. A deposed leader's
// raise cannot apply after the next leader's fence, so the next base is
// above all it granted. The raise costs a Raft write per window, not per
// grant: each window doubles the last, at least minTokenWindow wide.

// minTokenWindow is the least a raise adds to the reach.
const minTokenWindow = 1024

// tokenWindow is a reign's range of ephemeral tokens.
type tokenWindow struct {
	term  uint64
	base  int64        // the reach read after the fence
	limit atomic.Int64 // tokens below it may be granted
	soon  atomic.Int64 // a grant at or past it raises the limit in the background

	mu        sync.Mutex
	raising   chan struct{} // closed when the raise in flight ends; nil: none
	raisingTo int64
}

// TokenBase is the base of p's latest window (0 if none): above every
// ephemeral token of p granted in an earlier reign, so a first grant of a
// name this node has no entry of takes at least that. Bases only grow.
func (l *Leadership) TokenBase(p int) int64 {
	if w := l.windows[p].Load(); w != nil {
		return w.base
	}
	return 0
}

// TokenWindow returns p's window in term: an ephemeral grant needs a token
// below limit; one at or past soon should raise it (RaiseTokens). ok is
// false if this node has no window for p in term.
func (l *Leadership) TokenWindow(p int, term uint64) (limit, soon int64, ok bool) {
	w := l.windows[p].Load()
	if w == nil || w.term != term {
		return 0, 0, false
	}
	return w.limit.Load(), w.soon.Load(), true
}

// RaiseTokens raises the limit of p's ephemeral tokens in term above want
// (a token the caller is about to grant, plus one) in the background, if
// want is at or past soon and no raise is under way. The returned
// channel is closed when the raise ends, whether it succeeded or not (the
// caller looks at Tokens again).
func (l *Leadership) RaiseTokens(p int, term uint64, want int64) <-chan struct{} {
	w := l.windows[p].Load()
	if w == nil || w.term != term || l.reacher == nil {
		return closedChan
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.raising != nil {
		return w.raising
	}
	if want < w.soon.Load() {
		return closedChan // raised meanwhile
	}
	limit := w.limit.Load()
	step := max(limit-w.base, minTokenWindow)
	to := max(want, limit) + step
	if to < want { // overflow: the reach cannot grow further
		to = math.MaxInt64
	}
	done := make(chan struct{})
	w.raising, w.raisingTo = done, to
	go func() {
		ctx, cancel := context.WithTimeout(l.life, fenceTimeout)
		err := l.reacher.RaiseReach(ctx, p, term, to)
		cancel()
		w.mu.Lock()
		if err == nil && to > w.limit.Load() {
			w.limit.Store(to)
			w.soon.Store(to - (to-w.base)/4) // raise again with a quarter of the window left
		}
		w.raising = nil
		w.mu.Unlock()
		close(done)
		if err != nil {
			l.logger.Debug("raising the ephemeral token reach failed", "partition", p, "term", term, "to", to, "err", err)
		}
	}()
	return done
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// openWindow starts p's window of term at base, with no room yet: the
// first ephemeral grant raises it.
func (l *Leadership) openWindow(p int, term uint64, base int64) {
	w := &tokenWindow{term: term, base: base}
	w.limit.Store(base)
	w.soon.Store(base)
	l.windows[p].Store(w)
}
