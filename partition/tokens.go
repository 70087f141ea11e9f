package partition

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kahunago/kahuna/lease"
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

// The same window bounds the reign's ephemeral TTLs, unless the node runs
// fencing-only: a new leader waits out every ephemeral lease an earlier one
// may have granted (their grace), and an earlier one's are no longer than
// the bound it raised through Raft, in its own epoch, before granting or
// extending a lease that long (RaiseTTL).

// tokenWindow is a reign's range of ephemeral tokens and TTLs.
type tokenWindow struct {
	term  uint64
	base  int64        // the reach read after the fence
	limit atomic.Int64 // tokens below it may be granted
	soon  atomic.Int64 // a grant at or past it raises the limit in the background
	// ttl bounds the reign's ephemeral TTLs (ns); MaxInt64 when fencing-only.
	ttl atomic.Int64
	// grace: the reign waits out earlier leaders' ephemeral leases.
	grace bool
	// sealed: the reign handed its leases over (Seal); the next raise
	// through Raft voids that hand-over and unseals it.
	sealed atomic.Bool

	mu         sync.Mutex
	raising    chan struct{} // closed when the reach raise in flight ends; nil: none
	raisingTTL chan struct{} // likewise for the TTL bound
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

// TokenWindow returns p's window in term (lease.Window): an ephemeral
// grant needs a token below its limit (one at or past soon should raise
// it, RaiseTokens) and a TTL within its bound (RaiseTTL). ok is false if
// this node has no window for p in term.
func (l *Leadership) TokenWindow(p int, term uint64) (lease.Window, bool) {
	w := l.windows[p].Load()
	if w == nil || w.term != term {
		return lease.Window{}, false
	}
	return lease.Window{Limit: w.limit.Load(), Soon: w.soon.Load(), TTL: time.Duration(w.ttl.Load()), Sealed: w.sealed.Load()}, true
}

// RaiseTokens raises the limit of p's ephemeral tokens in term above want
// (a token the caller is about to grant, plus one) in the background, if
// want is at or past soon and no raise is under way. The returned
// channel is closed when the raise ends, whether it succeeded or not (the
// caller looks at TokenWindow again).
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
	w.raising = done
	go func() {
		ctx, cancel := context.WithTimeout(l.life, fenceTimeout)
		err := l.reacher.RaiseReach(ctx, p, term, to)
		cancel()
		w.mu.Lock()
		if err == nil && to > w.limit.Load() {
			w.limit.Store(to)
			w.soon.Store(to - (to-w.base)/4) // raise again with a quarter of the window left
		}
		if err == nil {
			w.sealed.Store(false) // applied after the hand-over: it voided it
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

// RaiseTTL raises the bound on ephemeral TTLs of p in term to at least
// ttl (to the next power of two milliseconds, so that a few raises cover
// any mix of TTLs), in the background, unless one is under way. The
// channel is closed when the raise ends, whether it succeeded or not.
func (l *Leadership) RaiseTTL(p int, term uint64, ttl time.Duration) <-chan struct{} {
	w := l.windows[p].Load()
	if w == nil || w.term != term || l.reacher == nil {
		return closedChan
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.raisingTTL != nil {
		return w.raisingTTL
	}
	if ttl <= time.Duration(w.ttl.Load()) && !w.sealed.Load() {
		return closedChan
	}
	to := time.Millisecond
	for to < ttl && to < lease.MaxTTL {
		to *= 2
	}
	to = min(to, lease.MaxTTL)
	done := make(chan struct{})
	w.raisingTTL = done
	go func() {
		err := l.raiseTTL(p, term, to)
		w.mu.Lock()
		if err == nil && int64(to) > w.ttl.Load() {
			w.ttl.Store(int64(to))
		}
		if err == nil {
			w.sealed.Store(false) // applied after the hand-over: it voided it
		}
		w.raisingTTL = nil
		w.mu.Unlock()
		close(done)
		if err != nil {
			l.logger.Debug("raising the ephemeral TTL bound failed", "partition", p, "term", term, "to", to, "err", err)
		}
	}()
	return done
}

func (l *Leadership) raiseTTL(p int, term uint64, to time.Duration) error {
	ctx, cancel := context.WithTimeout(l.life, fenceTimeout)
	defer cancel()
	return l.reacher.RaiseEphemeralTTL(ctx, p, term, to)
}

// LowerTTL lowers the bound on ephemeral TTLs of p in term to ttl, once a
// raise under way has ended (it would lift the bound again). Called when
// this node no longer decides for p (it retired it) and is about to
// record that its leases there run at most ttl more (SetEphemeralGrace):
// should it serve p again in term, a longer lease raises the bound, and
// the stored one, again.
func (l *Leadership) LowerTTL(ctx context.Context, p int, term uint64, ttl time.Duration) error {
	w := l.windows[p].Load()
	if w == nil || w.term != term || l.opts.EphemeralFencingOnly {
		return nil
	}
	for {
		w.mu.Lock()
		raising := w.raisingTTL
		if raising == nil {
			if int64(ttl) < w.ttl.Load() {
				w.ttl.Store(int64(ttl))
			}
			w.mu.Unlock()
			return nil
		}
		w.mu.Unlock()
		select {
		case <-raising:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Seal closes p's window of term, once this node no longer decides for p
// (it relinquished or retired it) and before it hands its live ephemeral
// leases over (durability.Raft.HandOver): should it serve p again in term,
// its first ephemeral change (a grant, an extension or a release) waits
// for a raise of the window through Raft, and that entry voids the
// hand-over, which no longer holds what this node's leases are. Raises
// under way end first (they were proposed before the hand-over, so they
// cannot void it).
func (l *Leadership) Seal(ctx context.Context, p int, term uint64) error {
	w := l.windows[p].Load()
	if w == nil || w.term != term {
		return nil
	}
	for {
		w.mu.Lock()
		raising := w.raising
		if raising == nil {
			raising = w.raisingTTL
		}
		if raising == nil {
			w.sealed.Store(true)
			w.mu.Unlock()
			return nil
		}
		w.mu.Unlock()
		select {
		case <-raising:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// BoundsEphemeral reports whether p's reign of term raised a bound on its
// ephemeral TTLs, which the next leader would wait out without a
// hand-over (never when fencing-only).
func (l *Leadership) BoundsEphemeral(p int, term uint64) bool {
	w := l.windows[p].Load()
	return w != nil && w.term == term && !l.opts.EphemeralFencingOnly && w.ttl.Load() > 0
}

// openWindow starts p's window of term at base, with no room yet: the
// first ephemeral grant raises it, and its TTL bound. A grace the reign
// waits out is cleared in the store once it is over (endGrace).
func (l *Leadership) openWindow(p int, term uint64, base int64, grace bool) {
	w := &tokenWindow{term: term, base: base}
	w.limit.Store(base)
	w.soon.Store(base)
	if l.opts.EphemeralFencingOnly {
		w.ttl.Store(math.MaxInt64)
	}
	w.grace = grace
	l.windows[p].Store(w)
}

// inGrace reports whether p's reign of term waits out earlier leaders'
// ephemeral leases (or did: it is then serving).
func (l *Leadership) inGrace(p int, term uint64) bool {
	w := l.windows[p].Load()
	return w != nil && w.term == term && w.grace
}

// endGrace clears the grace of p that this node waited out in term, so
// that the next leader does not wait it out again; best effort (a failed
// clear costs the next leader that wait).
func (l *Leadership) endGrace(p int, term uint64) {
	if !l.inGrace(p, term) || l.reacher == nil {
		return
	}
	go func() {
		if err := l.raiseTTL(p, term, 0); err != nil {
			l.logger.Debug("clearing the ephemeral grace failed", "partition", p, "term", term, "err", err)
		}
	}()
}
