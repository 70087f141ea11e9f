package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kahunago/kahuna/internal/testrun"
	"github.com/kahunago/kahuna/lease"
	v1 "github.com/kahunago/kahuna/transport/kahunav1pb"
)

// waitingFake is a WaitLocker whose Lock on "wait/…" waits until its
// context ends (it reports the call's arrival and its end), and on any
// other resource is TryLock.
type waitingFake struct {
	*fakeLocker
	arrived, left chan struct{}
	locks         atomic.Int64
}

func newWaitingFake() *waitingFake {
	return &waitingFake{fakeLocker: newFake(), arrived: make(chan struct{}, 8), left: make(chan struct{}, 8)}
}

func (w *waitingFake) Lock(ctx context.Context, r string, o []byte, ttl, wait time.Duration, d lease.Durability) (lease.Result, error) {
	w.locks.Add(1)
	if len(r) < 5 || r[:5] != "wait/" {
		return w.TryLock(ctx, r, o, ttl, d)
	}
	w.arrived <- struct{}{}
	<-ctx.Done()
	w.left <- struct{}{}
	return lease.Result{}, ctx.Err()
}

// asyncWaitingFake is a waitingFake that starts a waiting Lock on
// "wait/…" as the node does (asyncLocker), with no goroutine waiting for
// it: it ends when the stream withdraws it, answered the withdrawal's
// reason (which it reports), or when its context, the stream's, ends.
type asyncWaitingFake struct {
	*waitingFake
	reasons chan error
}

func newAsyncWaitingFake() *asyncWaitingFake {
	return &asyncWaitingFake{waitingFake: newWaitingFake(), reasons: make(chan error, 8)}
}

var _ asyncLocker = (*asyncWaitingFake)(nil)

// DoNowEach starts nothing: DoAsync takes every request.
func (a *asyncWaitingFake) DoNowEach(_ context.Context, cs []lease.Checked, answers []NowAnswer, _ func(int) Outcome) {
	clear(answers[:len(cs)])
}

func (a *asyncWaitingFake) DoAsync(ctx context.Context, c lease.Checked, out Outcome) (Withdrawer, bool) {
	r := c.Request()
	if r.Op != lease.TryLock || !strings.HasPrefix(r.Resource, "wait/") {
		return nil, false
	}
	a.locks.Add(1)
	w := &fakeWait{fake: a, out: out}
	w.stop = context.AfterFunc(ctx, func() { w.end(ctx.Err()) })
	a.arrived <- struct{}{}
	return w, true
}

// fakeWait is a waiting Lock of an asyncWaitingFake.
type fakeWait struct {
	fake *asyncWaitingFake
	out  Outcome
	stop func() bool
	once sync.Once
}

func (w *fakeWait) Withdraw(err error) {
	w.fake.reasons <- err
	w.end(err)
}

func (w *fakeWait) end(err error) {
	w.once.Do(func() {
		w.stop()
		w.fake.left <- struct{}{}
		w.out.Outcome(lease.LockInfo{}, lease.Result{}, err)
	})
}

// waitingFakes runs test with a waitingFake, whose waiting Locks run on
// the stream's workers, and with an asyncWaitingFake, whose waiting Locks
// are started and withdrawn (reasons is nil for the first).
func waitingFakes(t *testing.T, test func(t *testing.T, l lease.Locker, w *waitingFake, reasons <-chan error)) {
	t.Run("workers", func(t *testing.T) {
		w := newWaitingFake()
		test(t, w, w, nil)
	})
	t.Run("started", func(t *testing.T) {
		a := newAsyncWaitingFake()
		test(t, a, a.waitingFake, a.reasons)
	})
}

// withdrawnFor checks the reason a started Lock was withdrawn for.
func withdrawnFor(t *testing.T, reasons <-chan error, want error) {
	t.Helper()
	if reasons == nil {
		return
	}
	select {
	case err := <-reasons:
		if err != want {
			t.Fatalf("withdrawn for %v, want %v", err, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("not withdrawn in 10 s (want %v)", want)
	}
}

func recvWithin(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not seen in 10 s", what)
	}
}

// Locks go on the LockStream: many at once on one stream, answered while
// others wait; a caller that gives up is withdrawn from the server at once.
func TestLockStreamCarriesLocks(t *testing.T) {
	waitingFakes(t, func(t *testing.T, l lease.Locker, w *waitingFake, reasons <-chan error) {
		srv := startServer(t, l, ServerOptions{})
		c := dial(t, []string{"http://" + srv.native}, WithStreamsPerEndpoint(1))
		ctx := testCtx(t)

		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, err := c.Lock(cctx, "wait/a", []byte("o"), time.Minute, lease.WaitForever, lease.Ephemeral)
			done <- err
		}()
		recvWithin(t, w.arrived, "the waiting Lock at the server")
		// The stream serves other Locks while one waits.
		for i := range 3 {
			if r, err := c.Lock(ctx, "free", []byte("o"), time.Minute, time.Second, lease.Ephemeral); err != nil || r.Status != lease.Locked {
				t.Fatalf("Lock %d beside a waiting one: %v %v", i, r, err)
			}
		}
		bs := c.endpoints[0].streams[0]
		bs.locks.mu.Lock()
		st, off := bs.locks.cur, bs.locks.off
		bs.locks.mu.Unlock()
		if st == nil || off {
			t.Fatalf("no open lock stream (off %v): the Locks did not use it", off)
		}
		cancel()
		if err := <-done; err != context.Canceled {
			t.Fatalf("cancelled Lock: %v", err)
		}
		recvWithin(t, w.left, "the withdrawn Lock leaving the server")
		withdrawnFor(t, reasons, errWithdrawn)
	})
}

// A client that goes away (Close, a dropped connection) leaves the
// server's queue: its waiting Lock's context ends there.
func TestLockStreamClientGoneLeavesTheQueue(t *testing.T) {
	waitingFakes(t, func(t *testing.T, l lease.Locker, w *waitingFake, reasons <-chan error) {
		srv := startServer(t, l, ServerOptions{})
		c := dial(t, []string{"http://" + srv.native})
		done := make(chan error, 1)
		go func() {
			_, err := c.Lock(context.Background(), "wait/b", []byte("o"), time.Minute, lease.WaitForever, lease.Ephemeral)
			done <- err
		}()
		recvWithin(t, w.arrived, "the waiting Lock at the server")
		c.Close()
		recvWithin(t, w.left, "the Lock of a closed client leaving the server")
		if err := <-done; err == nil {
			t.Fatal("Lock of a closed client returned no error")
		}
		if len(reasons) > 0 {
			t.Fatalf("withdrawn for %v: the stream's end, not a withdrawal, ends it", <-reasons)
		}
	})
}

// A graceful shutdown answers a waiting Lock (Errored: its wait was cut short) and
// ends the stream cleanly.
func TestLockStreamShutdownAnswersWaiters(t *testing.T) {
	waitingFakes(t, func(t *testing.T, l lease.Locker, w *waitingFake, reasons <-chan error) {
		srv := startServer(t, l, ServerOptions{})
		c := dial(t, []string{"http://" + srv.native})
		type answer struct {
			r   lease.Result
			err error
		}
		done := make(chan answer, 1)
		go func() {
			r, err := c.Lock(context.Background(), "wait/c", []byte("o"), time.Minute, lease.WaitForever, lease.Ephemeral)
			done <- answer{r, err}
		}()
		recvWithin(t, w.arrived, "the waiting Lock at the server")
		closed := make(chan error, 1)
		go func() { closed <- srv.Shutdown(testCtx(t)) }()
		a := <-done
		if a.err != nil || a.r.Status != lease.Errored {
			t.Fatalf("waiting Lock at shutdown: %v %v, want Errored", a.r, a.err)
		}
		withdrawnFor(t, reasons, errWaitDrained)
		if err := <-closed; err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	})
}

// startOlderKahuna serves l as a kahuna from before LockStream and Batch
// did (its native service answers them UNIMPLEMENTED) and returns its
// native gRPC address.
func startOlderKahuna(t *testing.T, l lease.Locker) string {
	srv := NewServer(l, ServerOptions{Logger: slog.New(slog.DiscardHandler)})
	srv.noLockStream = true
	srv.native, srv.mixed = srv.newGRPCServer(), srv.newGRPCServer()
	old := listen(t)
	served := make(chan error, 1)
	go func() { served <- srv.ServeGRPC(old) }()
	t.Cleanup(func() {
		srv.Close()
		<-served
	})
	return old.Addr().String()
}

// Against a kahuna from before LockStream (its native service answers
// the stream UNIMPLEMENTED) the Client takes the unary Lock, remembers
// it, and the Lock still waits on the server.
func TestLockFallsBackToUnaryWithoutLockStream(t *testing.T) {
	w := newWaitingFake()
	c := dial(t, []string{"http://" + startOlderKahuna(t, w)}, WithStreamsPerEndpoint(1))
	ctx := testCtx(t)
	for i := range 2 {
		if r, err := c.Lock(ctx, "free", []byte("o"), time.Minute, time.Second, lease.Ephemeral); err != nil || r.Status != lease.Locked {
			t.Fatalf("Lock %d: %v %v", i, r, err)
		}
	}
	if n := w.locks.Load(); n != 2 {
		t.Fatalf("the server's Locker saw %d Locks, want 2", n)
	}
	bs := c.endpoints[0].streams[0]
	bs.locks.mu.Lock()
	off := bs.locks.off
	bs.locks.mu.Unlock()
	if !off {
		t.Fatal("the Client did not remember that the server has no LockStream")
	}
	if native, known := c.Native(); !native || !known {
		t.Fatalf("native = %v, known = %v: the unary Lock is native", native, known)
	}
}

// Bad messages on a LockStream get InvalidInput with a reason, and the
// stream goes on serving.
func TestLockStreamBadMessages(t *testing.T) {
	w := newWaitingFake()
	srv := startServer(t, w, ServerOptions{})
	conn, err := grpc.NewClient(srv.native, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := v1.NewKahunaClient(conn).LockStream(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	waiting := &v1.LockRequest{Resource: "wait/d", Owner: []byte("o"), TtlMs: 60_000, WaitMs: -1}
	for i, m := range []*v1.LockStreamRequest{
		{RequestId: 1, Lock: waiting},
		{RequestId: 2},                // neither a lock nor a cancel
		{RequestId: 1, Lock: waiting}, // an id already waiting
		{RequestId: 3, Lock: &v1.LockRequest{Owner: []byte("o"), TtlMs: 1000}}, // no resource
		{RequestId: 4, Lock: &v1.LockRequest{Resource: "free", Owner: []byte("o"), TtlMs: 1000}},
	} {
		if err := st.Send(m); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			recvWithin(t, w.arrived, "the first Lock waiting")
		}
	}
	// Four answers: the bad messages and the free lock; the waiting one
	// answers nothing until it is withdrawn.
	want := map[int64]lease.Status{2: lease.InvalidInput, 1: lease.InvalidInput, 3: lease.InvalidInput, 4: lease.Locked}
	for range 4 {
		a, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		id, got := a.GetRequestId(), lease.Status(a.GetLock().GetStatus())
		w, ok := want[id]
		if !ok || got != w || (got == lease.InvalidInput && a.GetLock().GetReason() == "") {
			t.Fatalf("answer to %d: %v %q, want %v with a reason (answers still due: %v)", id, got, a.GetLock().GetReason(), w, want)
		}
		delete(want, id)
	}
	// Withdraw the waiting one: it leaves, and then the withdrawal is
	// answered (the client cleans up after this answer).
	if err := st.Send(&v1.LockStreamRequest{RequestId: 1, Cancel: true}); err != nil {
		t.Fatal(err)
	}
	recvWithin(t, w.left, "the withdrawn Lock leaving the server")
	a, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if a.GetRequestId() != 1 || lease.Status(a.GetLock().GetStatus()) != lease.Aborted || a.GetLock().GetReason() == "" {
		t.Fatalf("answer to the withdrawal: %d %v %q, want 1 Aborted with a reason", a.GetRequestId(), lease.Status(a.GetLock().GetStatus()), a.GetLock().GetReason())
	}
}

// The LockStream is behind the client tokens: a wrong one is refused and
// nothing reaches the Locker; a listed one is served.
func TestLockStreamNeedsAToken(t *testing.T) {
	tk, _ := NewTokens("alpha")
	w := newWaitingFake()
	srv := startServer(t, w, ServerOptions{Tokens: tk})
	bad := dial(t, []string{"http://" + srv.native}, WithToken("wrong"))
	if _, err := bad.Lock(testCtx(t), "free", []byte("o"), time.Minute, time.Second, lease.Ephemeral); !errors.Is(err, lease.ErrUnauthenticated) {
		t.Fatalf("Lock with a wrong token: %v, want ErrUnauthenticated", err)
	}
	if n := w.locks.Load(); n != 0 {
		t.Fatalf("%d Locks of a refused client reached the Locker", n)
	}
	good := dial(t, []string{"http://" + srv.native}, WithToken("alpha"))
	if r, err := good.Lock(testCtx(t), "free", []byte("o"), time.Minute, time.Second, lease.Ephemeral); err != nil || r.Status != lease.Locked {
		t.Fatalf("Lock with a listed token: %v %v", r, err)
	}
	open := false
	for _, bs := range good.endpoints[0].streams {
		bs.locks.mu.Lock()
		open = open || bs.locks.cur != nil
		bs.locks.mu.Unlock()
	}
	if !open {
		t.Fatal("the listed client's Lock did not go on a LockStream")
	}
}

// tokenByResource is a WaitLocker whose Lock and TryLock grant resource
// "r/N" at once with fencing token N, so each answer says which request it
// is for.
type tokenByResource struct{ *fakeLocker }

func (tokenByResource) Lock(_ context.Context, r string, _ []byte, _, _ time.Duration, _ lease.Durability) (lease.Result, error) {
	return grantByName(r), nil
}

func (tokenByResource) TryLock(_ context.Context, r string, _ []byte, _ time.Duration, _ lease.Durability) (lease.Result, error) {
	return grantByName(r), nil
}

func grantByName(r string) lease.Result {
	n, err := strconv.ParseInt(strings.TrimPrefix(r, "r/"), 10, 64)
	if err != nil {
		return lease.Result{Status: lease.InvalidInput, Reason: err.Error()}
	}
	return lease.Result{Status: lease.Locked, FencingToken: n}
}

// Concurrent Locks on one LockStream each get their own answer: request
// ids are taken under the lock that registers them, so two callers never
// send the same id (one would take the other's grant, and the other
// would wait for an answer that never comes, its context's end included).
func TestLockStreamConcurrentLocksGetTheirOwnAnswers(t *testing.T) {
	srv := startServer(t, tokenByResource{newFake()}, ServerOptions{})
	c := dial(t, []string{"http://" + srv.native}, WithStreamsPerEndpoint(1))
	concurrentOwnAnswers(t, func(ctx context.Context, r string) (lease.Result, error) {
		return c.Lock(ctx, r, []byte("o"), time.Minute, time.Second, lease.Ephemeral)
	})
}

// So do concurrent TryLocks on one Batch stream, and over REST.
func TestBatchStreamConcurrentCallsGetTheirOwnAnswers(t *testing.T) {
	srv := startServer(t, tokenByResource{newFake()}, ServerOptions{})
	c := dial(t, []string{"http://" + srv.native}, WithStreamsPerEndpoint(1))
	concurrentOwnAnswers(t, func(ctx context.Context, r string) (lease.Result, error) {
		return c.TryLock(ctx, r, []byte("o"), time.Minute, lease.Ephemeral)
	})
}

func TestRESTConcurrentCallsGetTheirOwnAnswers(t *testing.T) {
	srv := startServer(t, tokenByResource{newFake()}, ServerOptions{})
	rc, err := DialREST([]string{"http://" + srv.mixed})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	concurrentOwnAnswers(t, func(ctx context.Context, r string) (lease.Result, error) {
		return rc.TryLock(ctx, r, []byte("o"), time.Minute, lease.Ephemeral)
	})
}

// concurrentOwnAnswers runs many callers at once, each granting its own
// "r/N" through call, and fails on an answer that is not the caller's or
// a call that does not return.
func concurrentOwnAnswers(t *testing.T, call func(ctx context.Context, resource string) (lease.Result, error)) {
	t.Helper()
	const (
		callers = 16
		each    = 1000
	)
	err := testrun.Callers(callers, time.Minute, func(i int) error {
		for range each {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			r, err := call(ctx, fmt.Sprintf("r/%d", i))
			cancel()
			if err != nil || r.Status != lease.Locked || r.FencingToken != int64(i) {
				return fmt.Errorf("caller %d: %+v, %v; want Locked with token %d", i, r, err, i)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
