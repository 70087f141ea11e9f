// Package sweep removes the persistent records of locks nobody has held for
// a while, so the store of a workload of unique names (a lock per job ID)
// levels off instead of growing with every name ever locked.
//
// The leader of a partition scans its stored records for free ones (Unlocked,
// or Locked with the lease ended) whose last change is older than the
// retention, and asks the lock actor of each to remove it (actors.Ring.Forget).
// The actor removes a record only if it is still the one the scan saw, its
// lease has ended in the actor's memory too (a renewal kept in memory moves
// a persistent lease past its stored expiry) and nothing waits on it. Each
// pass goes on from the last record the previous one was given, so records
// that stay do not keep those after them from being swept. The removal is a fenced Raft record like any write,
// and raises the partition's token floor, so the name's next grant still
// gets a larger token than any it had.
package sweep

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kahunago/kahuna/durability"
)

// Store finds removal candidates (durability.Raft).
type Store interface {
	Released(p int, cutoffMs int64, after string, limit int, fn func(durability.Record) bool) error
}

// Forgetter removes one record if it is still free (actors.Ring).
type Forgetter interface {
	Forget(ctx context.Context, p int, resource string, index uint64) (bool, error)
}

// Config tunes a Sweeper.
type Config struct {
	Partitions int
	// Retention is how long a free record is kept after its last change.
	Retention time.Duration
	// Every is the pause between passes (default Retention/10, between 1 s
	// and 1 min).
	Every time.Duration
	// Batch caps the records removed per partition per pass (default
	// 1024), so a backlog is worked off without starving lock traffic.
	Batch int
	// Parallel is how many removals are in flight at once (default 64).
	Parallel int
	// Serving reports whether this node leads and serves p now: only the
	// leader sweeps.
	Serving func(p int) bool
	Now     func() time.Time // wall clock (default time.Now)
	Logger  *slog.Logger
}

// Sweeper runs passes until its context ends.
type Sweeper struct {
	cfg     Config
	store   Store
	forget  Forgetter
	removed atomic.Uint64

	mu    sync.Mutex
	after map[int]string // by partition: where the next pass goes on from ("": the start)
}

// New returns a Sweeper; Run starts it.
func New(cfg Config, store Store, forget Forgetter) *Sweeper {
	if cfg.Every <= 0 {
		cfg.Every = min(max(cfg.Retention/10, time.Second), time.Minute)
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 1024
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 64
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Sweeper{cfg: cfg, store: store, forget: forget, after: make(map[int]string)}
}

// Removed counts the records this node removed since it started.
func (s *Sweeper) Removed() uint64 { return s.removed.Load() }

// Run sweeps every Config.Every until ctx ends.
func (s *Sweeper) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.Pass(ctx)
	}
}

// Pass sweeps each partition this node serves once, and returns how many
// records it removed.
func (s *Sweeper) Pass(ctx context.Context) int {
	total := 0
	for p := range s.cfg.Partitions {
		if ctx.Err() != nil {
			break
		}
		if !s.cfg.Serving(p) {
			continue
		}
		n, err := s.partition(ctx, p)
		total += n
		if err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("sweep of released records stopped early", "partition", p, "removed", n, "err", err)
		}
	}
	if total > 0 {
		s.cfg.Logger.Debug("swept released records", "removed", total)
	}
	return total
}

// partition removes up to Batch free records of p.
func (s *Sweeper) partition(ctx context.Context, p int) (int, error) {
	type candidate struct {
		resource string
		index    uint64
	}
	var found []candidate
	cutoff := s.cfg.Now().Add(-s.cfg.Retention).UnixMilli()
	// Collected first: the actors' removals must not run inside the scan's
	// read transaction.
	s.mu.Lock()
	after := s.after[p]
	s.mu.Unlock()
	err := s.store.Released(p, cutoff, after, s.cfg.Batch, func(r durability.Record) bool {
		found = append(found, candidate{r.Resource, r.Index})
		return true
	})
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	if len(found) < s.cfg.Batch {
		delete(s.after, p) // the scan reached the end: the next starts over
	} else {
		s.after[p] = found[len(found)-1].resource
	}
	s.mu.Unlock()
	// Many removals in flight at once, so they share Raft entries and
	// fsyncs (one at a time, a sweep removes about a thousand a second).
	var (
		n, next  atomic.Int64
		wg       sync.WaitGroup
		firstErr atomic.Pointer[error]
	)
	for range min(s.cfg.Parallel, len(found)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(found) || firstErr.Load() != nil {
					return
				}
				ok, err := s.forget.Forget(ctx, p, found[i].resource, found[i].index)
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				if ok {
					n.Add(1)
					s.removed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if err := firstErr.Load(); err != nil {
		return int(n.Load()), *err
	}
	return int(n.Load()), nil
}
