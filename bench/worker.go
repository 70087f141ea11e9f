package bench

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// worker is one caller: its Locker, owner, random source and stripe. Only
// its own goroutine touches it, except opStart (read by the live line and
// the watchdog) and cancel (called by the watchdog, under mu).
type worker struct {
	id       int
	l        lease.Locker
	owner    []byte
	rng      *rand.Rand
	keys     []string
	ttl      time.Duration
	dur      lease.Durability
	rec      *recorder
	stripe   *stripe
	handoff  *handoffs       // hot and hot-wait workloads only
	runCtx   context.Context // ended = the run was interrupted
	timer    *time.Timer     // open loop: waits for the next start, reused
	measured bool            // the current operation started after warmup
	started  int64           // operations started, warmup included
	ops      int64           // measured operations started
	grants   int64           // hot-wait: measured grants

	// The operation's context, reused until the watchdog cancels it
	// (see timeout.go).
	ctx     context.Context
	mu      sync.Mutex
	cancel  context.CancelCauseFunc
	opStart atomic.Int64 // when the operation in flight began, ns after the run's base; 0 idle
	_       [64]byte     // keep neighbouring workers' opStart apart
}

func newWorker(id int, l lease.Locker, seed uint64, keys []string, c *Config, rec *recorder, runCtx context.Context) *worker {
	w := &worker{
		id:     id,
		l:      l,
		owner:  newOwner(id),
		rng:    rand.New(rand.NewPCG(seed, uint64(id))),
		keys:   keys,
		ttl:    c.TTL,
		dur:    c.Durability,
		rec:    rec,
		stripe: rec.stripeFor(id),
		runCtx: runCtx,
	}
	w.ctx, w.cancel = context.WithCancelCause(runCtx)
	return w
}

// newOwner is a fresh random owner per worker and run, so a run never
// meets a lease left behind by an earlier one as its own.
func newOwner(id int) []byte {
	var b [8]byte
	_, _ = crand.Read(b[:])
	return []byte("bench-" + hex.EncodeToString(b[:]) + "-" + strconv.Itoa(id))
}

// pick chooses a key uniformly; its index serves the handoff tracker.
func (w *worker) pick() (int, string) {
	if len(w.keys) == 1 {
		return 0, w.keys[0]
	}
	i := w.rng.IntN(len(w.keys))
	return i, w.keys[i]
}

func (w *worker) success(rowIdx int, d time.Duration) {
	w.rec.success(w.stripe, rowIdx, d, w.measured)
}

func (w *worker) miss(rowIdx int) {
	if w.measured {
		w.rec.miss(w.stripe, rowIdx)
	}
}

// fail records a call that returned an error. The watchdog's cancel (or a
// deadline of the target's own) is a timeout; the whole run being
// interrupted is nothing.
func (w *worker) fail(ctx context.Context, rowIdx int, call string, err error) {
	if !w.measured || w.runCtx.Err() != nil {
		return
	}
	timeout := isTimeout(ctx, err)
	msg := call + ": " + oneLine(err.Error())
	if timeout {
		msg = call + ": timed out"
	}
	w.rec.failure(w.stripe, rowIdx, msg, timeout)
}

// failStatus records an answer the workload cannot use (MustRetry, an
// InvalidOwner on our own lock, …): an error, named by its status.
func (w *worker) failStatus(rowIdx int, call string, s lease.Status) {
	if w.measured {
		w.rec.failure(w.stripe, rowIdx, call+" answered "+s.String(), false)
	}
}

// oneLine keeps an error message on one line and bounded, for the breakdown.
func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", "; ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
