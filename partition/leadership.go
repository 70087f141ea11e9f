package partition

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kahunago/kahuna/durability"
)

// Barrier waits until everything committed in a partition is applied locally.
type Barrier interface {
	Barrier(ctx context.Context, p int) error
}

// Purger forgets every cached entry of a partition.
type Purger interface {
	DropPartition(ctx context.Context, p int) error
}

// barrierTimeout bounds one read-barrier attempt; a failed one is retried
// while this node is still the leader.
const barrierTimeout = 5 * time.Second

// Leadership tracks which partitions this node serves. It is fed Raft
// leader events and turns "I became leader" into "I serve" only after a read
// barrier (every entry committed before this term is applied) and a purge of
// the actors' cached entries of the partition (they may be stale). Losing
// leadership stops serving at once.
type Leadership struct {
	serving []atomic.Bool
	logger  *slog.Logger

	mu      sync.Mutex
	latest  []durability.LeaderEvent // newest event per partition
	dirty   []bool                   // events not yet acted upon
	changed chan struct{}            // closed and replaced on every event and serving change
	kick    chan struct{}

	cancel context.CancelFunc
	done   chan struct{}

	// Test hook (kahuna.PauseNode): while frozen, events are held in held
	// instead of being acted upon.
	frozen bool
	held   []durability.LeaderEvent
}

// NewLeadership tracks n partitions. Events observed before Start are kept
// and acted upon once it runs.
func NewLeadership(n int, logger *slog.Logger) *Leadership {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Leadership{
		serving: make([]atomic.Bool, n),
		logger:  logger,
		latest:  make([]durability.LeaderEvent, n),
		dirty:   make([]bool, n),
		changed: make(chan struct{}),
		kick:    make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
}

// Serving reports whether this node may serve partition p now.
func (l *Leadership) Serving(p int) bool { return l.serving[p].Load() }

// LeaderOf returns the last known leader of p (0 if none) and whether it is
// this node.
func (l *Leadership) LeaderOf(p int) (leaderID uint64, self bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ev := l.latest[p]
	return ev.LeaderID, ev.IsSelf
}

// Observe records a leader event. It never blocks, so it may be called from
// Raft's event goroutine.
func (l *Leadership) Observe(ev durability.LeaderEvent) {
	if ev.Partition < 0 || ev.Partition >= len(l.serving) {
		return
	}
	l.mu.Lock()
	if l.frozen {
		l.held = append(l.held, ev)
		l.mu.Unlock()
		return
	}
	prev := l.latest[ev.Partition]
	l.latest[ev.Partition] = ev
	l.dirty[ev.Partition] = true
	if !ev.IsSelf || prev.Term != ev.Term {
		l.setServing(ev.Partition, false)
	}
	l.notify()
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// Freeze holds every later event back until Thaw, as a paused process
// would not see them: a test hook for process-pause faults.
func (l *Leadership) Freeze() {
	l.mu.Lock()
	l.frozen = true
	l.mu.Unlock()
}

// Thaw delivers the events held since Freeze, in order.
func (l *Leadership) Thaw() {
	l.mu.Lock()
	held := l.held
	l.frozen, l.held = false, nil
	l.mu.Unlock()
	for _, ev := range held {
		l.Observe(ev)
	}
}

// setServing must be called with mu held.
func (l *Leadership) setServing(p int, on bool) {
	if l.serving[p].Swap(on) != on {
		l.notify()
	}
}

// notify wakes WaitReady; it must be called with mu held.
func (l *Leadership) notify() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// Start acts on leader events until Close: barrier and purge on gaining
// leadership, purge on losing it.
func (l *Leadership) Start(b Barrier, purge Purger) {
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	go l.run(ctx, b, purge)
}

func (l *Leadership) run(ctx context.Context, b Barrier, purge Purger) {
	defer close(l.done)
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.kick:
		case <-retry.C:
		}
		again := false
		for p := range l.serving {
			l.mu.Lock()
			ev, dirty := l.latest[p], l.dirty[p]
			l.dirty[p] = false
			l.mu.Unlock()
			if !dirty {
				continue
			}
			if err := l.takeOver(ctx, ev, b, purge); err != nil {
				if ctx.Err() != nil {
					return
				}
				l.logger.Warn("partition not served yet, retrying", "partition", p, "term", ev.Term, "err", err)
				l.mu.Lock()
				if l.latest[p] == ev {
					l.dirty[p] = true
					again = true
				}
				l.mu.Unlock()
			}
		}
		if again {
			retry.Reset(50 * time.Millisecond)
		}
	}
}

// takeOver applies one event. For a loss it purges; for a gain it runs the
// barrier and the purge, then serves if nothing changed meanwhile.
func (l *Leadership) takeOver(ctx context.Context, ev durability.LeaderEvent, b Barrier, purge Purger) error {
	if !ev.IsSelf {
		// Ephemeral locks of p lived here; the new leader starts afresh.
		return purge.DropPartition(ctx, ev.Partition)
	}
	bctx, cancel := context.WithTimeout(ctx, barrierTimeout)
	defer cancel()
	if err := b.Barrier(bctx, ev.Partition); err != nil {
		return err
	}
	if err := purge.DropPartition(ctx, ev.Partition); err != nil {
		return err
	}
	l.mu.Lock()
	if l.latest[ev.Partition] == ev {
		l.setServing(ev.Partition, true)
		l.logger.Info("serving partition", "partition", ev.Partition, "term", ev.Term)
	}
	l.mu.Unlock()
	return nil
}

// WaitReady waits until every partition has a known leader and this node
// serves each partition it leads, or ctx ends. A single node then serves
// them all.
func (l *Leadership) WaitReady(ctx context.Context) error {
	for {
		l.mu.Lock()
		all := true
		for p := range l.serving {
			ev := l.latest[p]
			if ev.LeaderID == 0 || ev.IsSelf && !l.serving[p].Load() {
				all = false
				break
			}
		}
		changed := l.changed
		l.mu.Unlock()
		if all {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// WaitNotSelf waits until partition p has a leader other than this node,
// or ctx ends.
func (l *Leadership) WaitNotSelf(ctx context.Context, p int) error {
	for {
		l.mu.Lock()
		ev, changed := l.latest[p], l.changed
		l.mu.Unlock()
		if ev.LeaderID != 0 && !ev.IsSelf {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close stops acting on events and stops serving every partition.
func (l *Leadership) Close() {
	l.mu.Lock()
	for p := range l.serving {
		l.setServing(p, false)
	}
	l.mu.Unlock()
	if l.cancel != nil {
		l.cancel()
		<-l.done
	}
}
