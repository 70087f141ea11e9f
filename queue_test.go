package kahuna_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/internal/testcluster"
)

// waiters waits until n waiting Lock calls are queued on node (the queue
// reports its length through Stats; there is no other signal).
func waiters(t *testing.T, node *kahuna.Node, n int) {
	t.Helper()
	testcluster.Eventually(t, fmt.Sprintf("%d waiters", n), func() bool { return node.Stats().Waiters == n })
}

type lockAnswer struct {
	r   kahuna.Result
	err error
}

func lockAsync(ctx context.Context, n *kahuna.Node, res, owner string, wait time.Duration, d kahuna.Durability) <-chan lockAnswer {
	ch := make(chan lockAnswer, 1)
	go func() {
		r, err := n.Lock(ctx, res, []byte(owner), time.Minute, wait, d)
		ch <- lockAnswer{r, err}
	}()
	return ch
}

func TestNodeLockGrantsInFIFOOrder(t *testing.T) {
	n := openNode(t, kahuna.Config{})
	for _, d := range durabilities {
		t.Run(d.String(), func(t *testing.T) {
			// Waiters left by a failure leave with the subtest, so the
			// next one counts only its own.
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			res := "fifo/" + d.String()
			if r, _ := n.TryLock(ctx, res, []byte("holder"), time.Minute, d); r.Status != kahuna.Locked {
				t.Fatalf("holder: %+v", r)
			}
			const count = 6
			var ws []<-chan lockAnswer
			for i := range count {
				ws = append(ws, lockAsync(ctx, n, res, fmt.Sprint("w", i), kahuna.WaitForever, d))
				waiters(t, n, i+1) // queued one after the other: a known order
			}
			prev := "holder"
			for i, w := range ws {
				if r, _ := n.Unlock(ctx, res, []byte(prev), d); r.Status != kahuna.Unlocked {
					t.Fatalf("unlock %s: %+v", prev, r)
				}
				a := <-w // granted by the release: no request of its own
				if a.err != nil || a.r.Status != kahuna.Locked || a.r.FencingToken != int64(i+1) {
					t.Fatalf("waiter %d: %+v %v, want Locked token %d", i, a.r, a.err, i+1)
				}
				// The actor publishes its queue's length after it answers.
				waiters(t, n, count-i-1)
				prev = fmt.Sprint("w", i)
			}
			n.Unlock(ctx, res, []byte(prev), d)
		})
	}
}

func TestNodeLockWaitEndsBusyAndBadWaits(t *testing.T) {
	n := openNode(t, kahuna.Config{})
	ctx := context.Background()
	n.TryLock(ctx, "busy", []byte("a"), time.Minute, kahuna.Persistent)
	if r, err := n.Lock(ctx, "busy", []byte("b"), time.Minute, 30*time.Millisecond, kahuna.Ephemeral); err != nil || r.Status != kahuna.Busy {
		t.Fatalf("wait over: %+v %v, want Busy", r, err)
	}
	if r, _ := n.Lock(ctx, "busy", []byte("b"), time.Minute, 0, kahuna.Persistent); r.Status != kahuna.Busy {
		t.Fatalf("wait 0: %+v, want Busy as TryLock", r)
	}
	for _, wait := range []time.Duration{-2, -time.Second, kahuna.MaxWait + time.Millisecond} {
		if r, err := n.Lock(ctx, "free", []byte("b"), time.Minute, wait, kahuna.Persistent); err != nil || r.Status != kahuna.InvalidInput {
			t.Fatalf("wait %v: %+v %v, want InvalidInput", wait, r, err)
		}
		if _, err := kahuna.Acquire(ctx, n, "free", kahuna.WithWait(wait)); !isStatus(err, kahuna.InvalidInput) {
			t.Fatalf("Acquire WithWait(%v): %v, want InvalidInput", wait, err)
		}
	}
	if _, r, _ := n.Get(ctx, "free", kahuna.Persistent); r.Status != kahuna.LockDoesNotExist {
		t.Fatalf("bad waits changed something: %+v", r)
	}
	if got := n.Stats().Waiters; got != 0 {
		t.Fatalf("waiters left: %d", got)
	}
}

func isStatus(err error, st kahuna.Status) bool {
	var se *kahuna.StatusError
	return errors.As(err, &se) && se.Status == st
}

// A holder that vanishes (never unlocks) is noticed by the actor's timer:
// the waiter is granted at the holder's expiry with no request.
func TestNodeLockExpiredHolderWakesWaiter(t *testing.T) {
	n := openNode(t, kahuna.Config{})
	ctx := context.Background()
	n.TryLock(ctx, "crashed", []byte("gone"), 50*time.Millisecond, kahuna.Persistent)
	a := <-lockAsync(ctx, n, "crashed", "next", 10*time.Second, kahuna.Persistent)
	if a.err != nil || a.r.Status != kahuna.Locked || a.r.FencingToken != 1 {
		t.Fatalf("waiter: %+v %v", a.r, a.err)
	}
}

func TestNodeLockCancelLeavesNothing(t *testing.T) {
	n := openNode(t, kahuna.Config{})
	ctx := context.Background()
	n.TryLock(ctx, "c", []byte("a"), time.Minute, kahuna.Ephemeral)
	cctx, cancel := context.WithCancel(ctx)
	w := lockAsync(cctx, n, "c", "b", kahuna.WaitForever, kahuna.Ephemeral)
	waiters(t, n, 1)
	cancel()
	if a := <-w; !errors.Is(a.err, context.Canceled) {
		t.Fatalf("cancelled: %+v %v", a.r, a.err)
	}
	waiters(t, n, 0)
	n.Unlock(ctx, "c", []byte("a"), kahuna.Ephemeral)
	if _, r, _ := n.Get(ctx, "c", kahuna.Ephemeral); r.Status != kahuna.LockDoesNotExist {
		t.Fatalf("after release: %+v: the cancelled waiter got it", r)
	}
}

// Close does not wait for waiters: they get ErrClosed at once, so the
// calls in flight drain without Close giving up on them (which it logs).
func TestNodeCloseEndsWaiters(t *testing.T) {
	logs := &warnings{}
	n, err := kahuna.Open(kahuna.Config{Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	n.TryLock(ctx, "x", []byte("a"), time.Minute, kahuna.Ephemeral)
	w := lockAsync(ctx, n, "x", "b", kahuna.WaitForever, kahuna.Ephemeral)
	waiters(t, n, 1)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if a := <-w; !errors.Is(a.err, kahuna.ErrClosed) {
		t.Fatalf("waiter at close: %+v %v, want ErrClosed", a.r, a.err)
	}
	if got := logs.messages(); slices.ContainsFunc(got, func(m string) bool { return strings.Contains(m, "in flight") }) {
		t.Fatalf("Close warned %q: it waited for the waiter instead of ending its wait", got)
	}
}

// warnings is a slog.Handler keeping the messages of warnings and errors.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler           { return w }
func (w *warnings) WithGroup(string) slog.Handler                { return w }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, r.Message)
	return nil
}

func (w *warnings) messages() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.msgs)
}

// A persistent hand-off is one committed grant: tokens keep growing, and
// the new holder survives a restart.
func TestNodePersistentHandOffSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	n, err := kahuna.Open(kahuna.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	n.TryLock(ctx, "h", []byte("a"), time.Hour, kahuna.Persistent)
	w := lockAsync(ctx, n, "h", "b", kahuna.WaitForever, kahuna.Persistent)
	waiters(t, n, 1)
	before := n.Stats().RaftRecords
	if r, _ := n.Unlock(ctx, "h", []byte("a"), kahuna.Persistent); r.Status != kahuna.Unlocked {
		t.Fatalf("unlock: %+v", r)
	}
	if a := <-w; a.r.Status != kahuna.Locked || a.r.FencingToken != 1 {
		t.Fatalf("waiter: %+v %v", a.r, a.err)
	}
	if got := n.Stats().RaftRecords - before; got != 1 {
		t.Fatalf("release + hand-off committed %d records, want 1", got)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n = openNode(t, kahuna.Config{DataDir: dir})
	info, r, _ := n.Get(ctx, "h", kahuna.Ephemeral) // one lock: either durability sees it
	if r.Status != kahuna.Got || string(info.Owner) != "b" || info.FencingToken != 1 {
		t.Fatalf("after restart: %+v %+v", r, info)
	}
	if r, _ := n.TryLock(ctx, "h", []byte("c"), time.Hour, kahuna.Ephemeral); r.Status != kahuna.Busy {
		t.Fatalf("ephemeral TryLock on the stored holder: %+v", r)
	}
	n.Unlock(ctx, "h", []byte("b"), kahuna.Persistent)
	if r, _ := n.TryLock(ctx, "h", []byte("c"), time.Hour, kahuna.Persistent); r.Status != kahuna.Locked || r.FencingToken != 2 {
		t.Fatalf("next grant: %+v, want token 2", r)
	}
}

// One name is one lock on kahuna.Open, and the token count is shared:
// persistent tokens stay monotonic across a restart; ephemeral grants
// fall back to the stored floor after one.
func TestNodeOneNameOneLock(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	n, err := kahuna.Open(kahuna.Config{DataDir: dir, EphemeralFencingOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	expect := func(what string, r kahuna.Result, st kahuna.Status, token int64) {
		t.Helper()
		if r.Status != st || r.FencingToken != token {
			t.Fatalf("%s: %+v, want %v token %d", what, r, st, token)
		}
	}
	r, _ := n.TryLock(ctx, "one", []byte("e"), time.Hour, kahuna.Ephemeral)
	expect("ephemeral grant", r, kahuna.Locked, 0)
	r, _ = n.TryLock(ctx, "one", []byte("p"), time.Hour, kahuna.Persistent)
	expect("persistent TryLock while ephemeral held", r, kahuna.Busy, 0)
	r, _ = n.Unlock(ctx, "one", []byte("e"), kahuna.Persistent) // the one lock, named either way
	expect("unlock", r, kahuna.Unlocked, 0)
	r, _ = n.TryLock(ctx, "one", []byte("p"), time.Hour, kahuna.Persistent)
	expect("persistent grant after ephemeral", r, kahuna.Locked, 1)
	r, _ = n.TryLock(ctx, "one", []byte("e2"), time.Hour, kahuna.Ephemeral)
	expect("ephemeral TryLock while persistent held", r, kahuna.Busy, 0)
	n.Unlock(ctx, "one", []byte("p"), kahuna.Persistent)
	r, _ = n.TryLock(ctx, "one", []byte("e2"), time.Hour, kahuna.Ephemeral)
	expect("ephemeral grant after persistent", r, kahuna.Locked, 2)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n = openNode(t, kahuna.Config{DataDir: dir, EphemeralFencingOnly: true})
	// e2's ephemeral grant is gone, its token is not: the next grant is
	// above it (at the partition's ephemeral token reach).
	r, _ = n.TryLock(ctx, "one", []byte("e3"), time.Hour, kahuna.Ephemeral)
	if r.Status != kahuna.Locked || r.FencingToken <= 2 {
		t.Fatalf("ephemeral grant after restart: %+v, want Locked above token 2", r)
	}
	n.Unlock(ctx, "one", []byte("e3"), kahuna.Ephemeral)
	after := r.FencingToken
	r, _ = n.TryLock(ctx, "one", []byte("p2"), time.Hour, kahuna.Persistent)
	expect("persistent grant after restart", r, kahuna.Locked, after+1)
}

// waitCounter counts the calls a WaitLocker gets.
type waitCounter struct {
	*kahuna.Node
	tries, locks atomic.Int64
}

func (w *waitCounter) TryLock(ctx context.Context, res string, owner []byte, ttl time.Duration, d kahuna.Durability) (kahuna.Result, error) {
	w.tries.Add(1)
	return w.Node.TryLock(ctx, res, owner, ttl, d)
}

func (w *waitCounter) Lock(ctx context.Context, res string, owner []byte, ttl, wait time.Duration, d kahuna.Durability) (kahuna.Result, error) {
	w.locks.Add(1)
	return w.Node.Lock(ctx, res, owner, ttl, wait, d)
}

func TestAcquireWaitsOnServer(t *testing.T) {
	n := openNode(t, kahuna.Config{})
	ctx := context.Background()
	for _, opt := range []kahuna.AcquireOption{kahuna.WithWait(10 * time.Second), kahuna.WithWaitForever()} {
		first, err := kahuna.Acquire(ctx, n, "acq")
		if err != nil {
			t.Fatal(err)
		}
		wc := &waitCounter{Node: n}
		got := make(chan error, 1)
		var second *kahuna.Lock
		go func() {
			var err error
			second, err = kahuna.Acquire(ctx, wc, "acq", opt)
			got <- err
		}()
		waiters(t, n, 1)
		// Not a synchronisation: a wait long enough that a deadline
		// counted from the send (not the grant) would show.
		time.Sleep(200 * time.Millisecond)
		released := time.Now()
		if err := first.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		if second.FencingToken() <= first.FencingToken() {
			t.Fatalf("tokens %d then %d", first.FencingToken(), second.FencingToken())
		}
		if wc.tries.Load() != 0 || wc.locks.Load() != 1 {
			t.Fatalf("%d TryLocks and %d Locks, want one Lock and no polling", wc.tries.Load(), wc.locks.Load())
		}
		// The deadline counts from the grant (after the release), not from
		// the start of the wait: 30 s less the default margin (302 ms) and
		// 1 % of the wait.
		if d := second.Expires().Sub(released); d < 30*time.Second-302*time.Millisecond-10*time.Millisecond {
			t.Fatalf("deadline %v after the release, want at least 29.688 s", d)
		}
		if err := second.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAcquireWaitForeverEndsWithCtx(t *testing.T) {
	n := openNode(t, kahuna.Config{})
	ctx := context.Background()
	held, err := kahuna.Acquire(ctx, n, "forever")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(ctx)
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := kahuna.Acquire(cctx, n, "forever", kahuna.WithWaitForever())
		errc <- err
	}()
	waiters(t, n, 1)
	cancel()
	if err := <-errc; err != context.Canceled {
		t.Fatalf("got %v, want context.Canceled unchanged", err)
	}
	waiters(t, n, 0)
}

// In a cluster: a waiting Lock on a node that does not lead the partition
// polls the leader until granted; one name is one lock across nodes; and
// a leadership move answers the leader's waiters MustRetry.
func TestClusterWaitingLock(t *testing.T) {
	// Leadership moves only where the test moves it.
	// Fencing-only: the move need not wait out the ephemeral lease.
	c := startCluster(t, 4, func(_ uint64, cfg *kahuna.Config) {
		cfg.LeaderBalanceCooldown = -1
		cfg.EphemeralFencingOnly = true
	})
	ctx := context.Background()
	n1, n2, n3 := c.Node(1), c.Node(2), c.Node(3)
	res := ""
	for i := 0; res == ""; i++ {
		if name := fmt.Sprintf("cq%d/r", i); n1.Partition(name)%3 == 0 { // led by node 1
			res = name
		}
	}
	p := n1.Partition(res)
	if r := testcluster.Settled(t, func() (kahuna.Result, error) { return n1.TryLock(ctx, res, []byte("a"), time.Minute, kahuna.Ephemeral) }); r.Status != kahuna.Locked {
		t.Fatalf("holder: %+v", r)
	}
	// One lock across kinds and nodes.
	if r := testcluster.Settled(t, func() (kahuna.Result, error) {
		return n2.TryLock(ctx, res, []byte("b"), time.Minute, kahuna.Persistent)
	}); r.Status != kahuna.Busy {
		t.Fatalf("persistent TryLock via node 2 on an ephemeral holder: %+v", r)
	}
	// A forwarded wait may meet an election (MustRetry: nothing applied):
	// the waiter asks again, as every client does.
	remote := make(chan lockAnswer, 1)
	go func() {
		for {
			r, err := n2.Lock(ctx, res, []byte("b"), time.Minute, 20*time.Second, kahuna.Persistent)
			if err != nil || r.Status != kahuna.MustRetry {
				remote <- lockAnswer{r, err}
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	if r := testcluster.Settled(t, func() (kahuna.Result, error) { return n3.Unlock(ctx, res, []byte("a"), kahuna.Persistent) }); r.Status != kahuna.Unlocked {
		t.Fatalf("unlock via node 3: %+v", r)
	}
	if a := <-remote; a.err != nil || a.r.Status != kahuna.Locked || a.r.FencingToken != 1 {
		t.Fatalf("remote waiter: %+v %v", a.r, a.err)
	}
	// A waiter queued on the leader is told MustRetry when the partition
	// moves. (Under a loaded test run an election may have moved p since
	// the start, or move it before the wait arrives: the wait then queues
	// on the leader it was forwarded to, which is the one to move from.)
	c.Transfer(p, 1)
	// A wait that meets an election before it queues is answered
	// MustRetry (nothing applied): it asks again, as every client does.
	var (
		local <-chan lockAnswer
		queue uint64
	)
	testcluster.Eventually(t, "a waiter on some node", func() bool {
		if local == nil {
			local = lockAsync(ctx, n1, res, "c", kahuna.WaitForever, kahuna.Persistent)
		}
		select {
		case a := <-local:
			if a.err != nil || a.r.Status != kahuna.MustRetry {
				t.Fatalf("waiter before the move: %+v %v, want it queued", a.r, a.err)
			}
			local = nil
			return false
		default:
		}
		for id := uint64(1); id <= 3; id++ {
			if c.Node(id).Stats().Waiters == 1 {
				queue = id
				return true
			}
		}
		return false
	})
	if queue != 1 {
		t.Logf("partition %d moved to node %d before the wait arrived: the wait queued there", p, queue)
	}
	to := uint64(2)
	if queue == to {
		to = 3
	}
	c.Transfer(p, to)
	if a := <-local; a.err != nil || a.r.Status != kahuna.MustRetry {
		t.Fatalf("waiter after the move: %+v %v, want MustRetry", a.r, a.err)
	}
	waiters(t, c.Node(queue), 0)
	// The persistent holder moved with the partition; its token is the floor.
	if r := testcluster.Settled(t, func() (kahuna.Result, error) { return n3.Unlock(ctx, res, []byte("b"), kahuna.Persistent) }); r.Status != kahuna.Unlocked {
		t.Fatalf("unlock after the move: %+v", r)
	}
	if r := testcluster.Settled(t, func() (kahuna.Result, error) { return n1.TryLock(ctx, res, []byte("d"), time.Minute, kahuna.Ephemeral) }); r.Status != kahuna.Locked || r.FencingToken < 2 {
		t.Fatalf("grant after the move: %+v, want a token above b's 1", r)
	}
}
