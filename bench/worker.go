package bench

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kahunago/kahuna/internal/backoff"
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
	failed   bool            // the current operation failed: back off before the next
	backoff  time.Duration   // the wait after the last failure; 0 after a success
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
	if w.runCtx.Err() != nil {
		return
	}
	w.failed = true
	timeout := isTimeout(ctx, err)
	msg := call + ": " + errorKind(err)
	if timeout {
		msg = call + ": timed out"
	}
	w.rec.failure(w.stripe, rowIdx, msg, timeout, w.measured)
}

// failStatus records an answer the workload cannot use (MustRetry, an
// InvalidOwner on our own lock, …): an error, named by its status.
func (w *worker) failStatus(rowIdx int, call string, s lease.Status) {
	w.failed = true
	w.rec.failure(w.stripe, rowIdx, call+" answered "+s.String(), false, w.measured)
}

// Backoff after a failed operation: a dead or refusing target is asked
// again after 1 ms, then twice as long after each failure in a row, up to
// 250 ms, so it is not flooded with calls that fail at once, and the
// report counts failures of a working target's size rather than of a
// tight loop's.
const (
	minBackoff = time.Millisecond
	maxBackoff = 250 * time.Millisecond
)

// pause waits after a failed operation (a random part of the backoff, so
// the workers do not come back in step), and forgets the backoff after a
// success. It returns early when the run ends.
func (w *worker) pause() {
	if !w.failed {
		w.backoff = 0
		return
	}
	w.failed = false
	w.backoff = min(max(2*w.backoff, minBackoff), maxBackoff)
	_ = backoff.Sleep(w.runCtx, w.backoff/2+time.Duration(w.rng.Int64N(int64(w.backoff/2)+1))) // ends early with the run
}

// localAddress is the client's side of a connection in a Go network
// error ("read tcp 127.0.0.1:53412->127.0.0.1:2072: …"): its port differs
// per connection, so it would make every error of one kind a kind of its
// own.
var localAddress = regexp.MustCompile(`(\d{1,3}(\.\d{1,3}){3}|\[[0-9A-Za-z:.%]*\]):\d+->`)

// errorKind is err's message as the breakdown groups it: on one line,
// bounded, without the client's local address.
func errorKind(err error) string {
	return oneLine(localAddress.ReplaceAllString(err.Error(), ""))
}

// oneLine keeps an error message on one line and bounded, for the breakdown.
func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", "; ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
