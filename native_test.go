package kahuna_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/internal/testcluster"
	"github.com/kahunago/kahuna/internal/testknobs"
	"github.com/kahunago/kahuna/internal/testrun"
	"github.com/kahunago/kahuna/lease"
	"github.com/kahunago/kahuna/transport"
	v1 "github.com/kahunago/kahuna/transport/kahunav1pb"
)

// serveCounted serves l on a loopback gRPC listener of its own, counting
// the lock requests that reach it (ServerOptions.Observe) by op.
func serveCounted(t *testing.T, l lease.Locker) (endpoint string, tries, others *atomic.Int64) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tries, others = new(atomic.Int64), new(atomic.Int64)
	srv := transport.NewServer(l, transport.ServerOptions{Logger: slog.New(slog.DiscardHandler), Observe: func(op lease.Op, _ lease.Status) {
		if op == lease.TryLock {
			tries.Add(1)
		} else {
			others.Add(1)
		}
	}})
	go func() { _ = srv.ServeGRPC(lis) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + lis.Addr().String(), tries, others
}

func dial(t *testing.T, endpoint string) *kahuna.Client {
	t.Helper()
	c, err := kahuna.Dial(context.Background(), []string{endpoint})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func lockOn(ctx context.Context, c kahuna.WaitLocker, res, owner string, wait time.Duration) <-chan lockAnswer {
	ch := make(chan lockAnswer, 1)
	go func() {
		r, err := c.Lock(ctx, res, []byte(owner), time.Minute, wait, kahuna.Ephemeral)
		ch <- lockAnswer{r, err}
	}()
	return ch
}

// Two remote waiters are granted in the order they queued; a wait that
// ends answers Busy; a caller that cancels leaves the queue.
func TestNativeLockOverTheWire(t *testing.T) {
	n := openNode(t, kahuna.Config{ListenAddress: "127.0.0.1:0"})
	c := dial(t, "http://"+n.ListenAddress())
	ctx := context.Background()
	if r, err := c.TryLock(ctx, "nat/r", []byte("holder"), time.Minute, kahuna.Ephemeral); err != nil || r.Status != kahuna.Locked {
		t.Fatalf("holder: %v %v", r, err)
	}
	first := lockOn(ctx, c, "nat/r", "first", kahuna.WaitForever)
	waiters(t, n, 1)
	second := lockOn(ctx, c, "nat/r", "second", 30*time.Second)
	waiters(t, n, 2)

	// A bounded wait that ends with the lock held: Busy, and it left.
	if r, err := c.Lock(ctx, "nat/r", []byte("late"), time.Minute, 50*time.Millisecond, kahuna.Ephemeral); err != nil || r.Status != kahuna.Busy {
		t.Fatalf("bounded wait: %v %v, want Busy", r, err)
	}
	waiters(t, n, 2)
	// A caller that gives up leaves the queue.
	cctx, cancel := context.WithCancel(ctx)
	gone := lockOn(cctx, c, "nat/r", "gone", kahuna.WaitForever)
	waiters(t, n, 3)
	cancel()
	if a := <-gone; !errors.Is(a.err, context.Canceled) {
		t.Fatalf("cancelled wait: %v %v", a.r, a.err)
	}
	waiters(t, n, 2)

	if r, _ := c.Unlock(ctx, "nat/r", []byte("holder"), kahuna.Ephemeral); r.Status != kahuna.Unlocked {
		t.Fatalf("unlock: %v", r)
	}
	a := <-first
	if a.err != nil || a.r.Status != kahuna.Locked || a.r.FencingToken != 1 || a.r.Waited <= 0 {
		t.Fatalf("first waiter: %+v %v, want Locked token 1 after a wait", a.r, a.err)
	}
	waiters(t, n, 1) // second still waits: FIFO
	if r, _ := c.Unlock(ctx, "nat/r", []byte("first"), kahuna.Ephemeral); r.Status != kahuna.Unlocked {
		t.Fatalf("unlock first: %v", r)
	}
	if a := <-second; a.err != nil || a.r.Status != kahuna.Locked || a.r.FencingToken != 2 {
		t.Fatalf("second waiter: %+v %v, want Locked token 2", a.r, a.err)
	}
	if native, known := transportNative(c); !known || !native {
		t.Fatalf("native service not detected")
	}
}

func transportNative(c *kahuna.Client) (bool, bool) { return testknobs.ClientNative(c) }

// Bad input answers InvalidInput with a reason on the native service.
func TestNativeLockInvalidInputReason(t *testing.T) {
	n := openNode(t, kahuna.Config{ListenAddress: "127.0.0.1:0"})
	conn, err := grpc.NewClient(n.ListenAddress(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	k := v1.NewKahunaClient(conn)
	for _, tc := range []struct {
		req  *v1.LockRequest
		want string
	}{
		{&v1.LockRequest{Owner: []byte("o"), TtlMs: 1000}, "resource is empty"},
		{&v1.LockRequest{Resource: "r", Owner: []byte("o"), TtlMs: 1000, WaitMs: -5}, "wait_ms"},
		{&v1.LockRequest{Resource: "r", TtlMs: 1000}, "owner is empty"},
		{&v1.LockRequest{Resource: "r", Owner: []byte("o")}, "ttl 0s is not positive"},
	} {
		resp, err := k.Lock(context.Background(), tc.req)
		if err != nil || resp.GetStatus() != v1.Status_STATUS_INVALID_INPUT || !strings.Contains(resp.GetReason(), tc.want) {
			t.Errorf("%v: %v %v, want InvalidInput with %q", tc.req, resp, err, tc.want)
		}
	}
	// Kahuna's own service answers as before, without a reason.
	c := dial(t, "http://"+n.ListenAddress())
	if r, err := c.TryLock(context.Background(), "", []byte("o"), time.Second, kahuna.Ephemeral); err != nil || r.Status != kahuna.InvalidInput {
		t.Fatalf("TryLock empty: %v %v", r, err)
	}
	// A watch of an empty name: InvalidInput with a reason.
	for _, err := range c.Watch(context.Background(), "") {
		var we *kahuna.WatchError
		if !errors.As(err, &we) || we.Status != kahuna.InvalidInput || we.Reason == "" {
			t.Fatalf("watch of an empty name: %v", err)
		}
	}
}

// askedWaits is a node that records the wait each Lock asks it for.
type askedWaits struct {
	*kahuna.Node
	mu    sync.Mutex
	waits []time.Duration
}

func (a *askedWaits) Lock(ctx context.Context, resource string, owner []byte, ttl, wait time.Duration, d kahuna.Durability) (kahuna.Result, error) {
	a.mu.Lock()
	a.waits = append(a.waits, wait)
	a.mu.Unlock()
	return a.Node.Lock(ctx, resource, owner, ttl, wait, d)
}

// Do records the wait of a request sent whole (the server sends a Doer's
// Lock requests so).
func (a *askedWaits) Do(ctx context.Context, req lease.Checked) (kahuna.LockInfo, kahuna.Result, error) {
	if r := req.Request(); r.Op == lease.TryLock && r.Wait != 0 {
		a.mu.Lock()
		a.waits = append(a.waits, r.Wait)
		a.mu.Unlock()
	}
	return a.Node.Do(ctx, req)
}

// Acquire with a wait over a Client makes one request: the server waits.
// The request asks the server for the whole rest of the Acquire's wait, so
// the client has nothing left to poll for, and it is the only request
// until the grant (counted by the server's Observe).
func TestAcquireOverClientDoesNotPoll(t *testing.T) {
	n := openNode(t, kahuna.Config{})
	asked := &askedWaits{Node: n}
	endpoint, tries, _ := serveCounted(t, asked)
	c := dial(t, endpoint)
	ctx := context.Background()
	if r, _ := n.TryLock(ctx, "np/r", []byte("holder"), time.Minute, kahuna.Persistent); r.Status != kahuna.Locked {
		t.Fatal(r)
	}
	const wait = 20 * time.Second
	got := make(chan error, 1)
	start := time.Now()
	go func() {
		l, err := kahuna.Acquire(ctx, c, "np/r", kahuna.WithWait(wait))
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	waiters(t, n, 1)
	// The client asked at most elapsed after start, for what was left of
	// its wait then (less the wire's millisecond rounding).
	elapsed := time.Since(start)
	asked.mu.Lock()
	waits := slices.Clone(asked.waits)
	asked.mu.Unlock()
	if len(waits) != 1 || waits[0] < wait-elapsed-time.Millisecond {
		t.Fatalf("Lock requests asked the server to wait %v, %v into an Acquire waiting %v: want one, for the rest of its wait", waits, elapsed, wait)
	}
	if r, _ := n.Unlock(ctx, "np/r", []byte("holder"), kahuna.Persistent); r.Status != kahuna.Unlocked {
		t.Fatal(r)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if got := tries.Load(); got != 1 {
		t.Fatalf("%d lock requests reached the node for one waiting Acquire, want 1", got)
	}
}

// plainLocker hides the node's Lock and WatchLock: a server for it is a
// plain Kahuna server, without the native service.
type plainLocker struct{ lease.Locker }

func TestClientFallsBackWithoutNativeService(t *testing.T) {
	n := openNode(t, kahuna.Config{})
	endpoint, tries, _ := serveCounted(t, plainLocker{n})
	c := dial(t, endpoint)
	ctx := context.Background()
	if r, _ := n.TryLock(ctx, "fb/r", []byte("holder"), time.Minute, kahuna.Persistent); r.Status != kahuna.Locked {
		t.Fatal(r)
	}
	got := make(chan error, 1)
	go func() {
		l, err := kahuna.Acquire(ctx, c, "fb/r", kahuna.WithWait(20*time.Second))
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	testcluster.Eventually(t, "polling TryLocks", func() bool { return tries.Load() >= 3 })
	if r, _ := n.Unlock(ctx, "fb/r", []byte("holder"), kahuna.Persistent); r.Status != kahuna.Unlocked {
		t.Fatal(r)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if native, known := transportNative(c); !known || native {
		t.Fatalf("native = %v, known = %v: want a plain server detected", native, known)
	}
	// A bounded wait still ends Busy by polling.
	n.TryLock(ctx, "fb/r", []byte("holder"), time.Minute, kahuna.Persistent)
	if r, err := c.Lock(ctx, "fb/r", []byte("other"), time.Minute, 30*time.Millisecond, kahuna.Persistent); err != nil || r.Status != kahuna.Busy {
		t.Fatalf("bounded wait on a plain server: %v %v", r, err)
	}
	for _, err := range c.Watch(ctx, "fb/r") {
		if !errors.Is(err, transport.ErrNoNative) {
			t.Fatalf("watch on a plain server: %v", err)
		}
	}
}

func nextEvent(t *testing.T, next func() (kahuna.WatchEvent, error, bool)) kahuna.WatchEvent {
	t.Helper()
	ev, err, ok := next()
	if !ok || err != nil {
		t.Fatalf("watch ended: %v", err)
	}
	return ev
}

func wantEvent(t *testing.T, ev kahuna.WatchEvent, kind kahuna.EventKind, owner string) {
	t.Helper()
	if ev.Kind != kind || string(ev.Owner) != owner {
		t.Fatalf("event %v %q (rev %d, token %d), want %v %q", ev.Kind, ev.Owner, ev.Revision, ev.FencingToken, kind, owner)
	}
}

// acquire → release → acquire by another → expiry, over the wire.
func TestWatchOverTheWire(t *testing.T) {
	n := openNode(t, kahuna.Config{ListenAddress: "127.0.0.1:0"})
	c := dial(t, "http://"+n.ListenAddress())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	next, stop := pull(c.Watch(ctx, "w/r"))
	defer stop()
	if ev := nextEvent(t, next); !ev.Current || ev.Kind != kahuna.EventReleased {
		t.Fatalf("first event %+v, want the current state (free)", ev)
	}
	c.TryLock(ctx, "w/r", []byte("a"), time.Minute, kahuna.Persistent)
	ev := nextEvent(t, next)
	wantEvent(t, ev, kahuna.EventAcquired, "a")
	if ev.FencingToken != 0 || ev.Durability != kahuna.Persistent || ev.ServedFrom == "" {
		t.Fatalf("acquired %+v", ev)
	}
	c.Unlock(ctx, "w/r", []byte("a"), kahuna.Persistent)
	wantEvent(t, nextEvent(t, next), kahuna.EventReleased, "")
	c.TryLock(ctx, "w/r", []byte("b"), 300*time.Millisecond, kahuna.Ephemeral)
	ev = nextEvent(t, next)
	wantEvent(t, ev, kahuna.EventAcquired, "b")
	if ev.FencingToken != 1 {
		t.Fatalf("b's token %d, want 1", ev.FencingToken)
	}
	exp := nextEvent(t, next) // noticed by the actor's timer, with no request
	wantEvent(t, exp, kahuna.EventExpired, "b")
	if exp.Revision != ev.Revision || exp.FencingToken != 1 {
		t.Fatalf("expired %+v after %+v", exp, ev)
	}
}

// pull is iter.Pull2 for a watch.
func pull(seq func(func(kahuna.WatchEvent, error) bool)) (func() (kahuna.WatchEvent, error, bool), func()) {
	return iterPull2(seq)
}

func iterPull2(seq func(func(kahuna.WatchEvent, error) bool)) (func() (kahuna.WatchEvent, error, bool), func()) {
	return iter.Pull2(iter.Seq2[kahuna.WatchEvent, error](seq))
}

// Many callers of one Client lock at once over the native LockStream,
// half of them contending for a few locks (they wait in the node's queue),
// half on locks of their own (granted at once, so their Locks follow each
// other closely on the stream): every grant a caller gets is its own (the
// node names its owner as the holder, with its token), and its release is
// accepted. With request ids shared between concurrent Locks a caller took
// another's grant, and another waited forever.
func TestConcurrentWaitingLocksOverOneClient(t *testing.T) {
	t.Parallel()
	n := openNode(t, kahuna.Config{ListenAddress: "127.0.0.1:0"})
	c := dial(t, "http://"+n.ListenAddress())
	const (
		shared  = 4
		callers = 32
		each    = 100
	)
	err := testrun.Callers(callers, 2*time.Minute, func(i int) error {
		res, owner := fmt.Sprintf("many/own-%d", i), fmt.Sprintf("owner-%d", i)
		if i%2 == 1 {
			res = fmt.Sprintf("many/shared-%d", i%shared)
		}
		for range each {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := holdOnce(ctx, c, res, owner)
			cancel()
			if err != nil {
				return fmt.Errorf("%s on %s: %w", owner, res, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// On a LockStream (kahuna's framing, or gRPC), a waiting Lock the node
// serves waits in its lock actor's queue with no goroutine of the node's
// parked on it (no worker in actors' Ring.wait), is granted in its turn
// and leaves when its caller does. Called on the node in process, each
// Lock parks its caller there: the control, which shows the count below
// sees parked waits.
func TestWaitingLocksOnALockStreamParkNoGoroutine(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   []kahuna.ClientOption // nil: the node itself
		parked bool
	}{
		{"framing", []kahuna.ClientOption{}, false},
		{"grpc", []kahuna.ClientOption{kahuna.WithGRPCOnly()}, false},
		{"in-process", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := openNode(t, kahuna.Config{ListenAddress: "127.0.0.1:0"})
			var c kahuna.WaitLocker = n
			if tc.opts != nil {
				client, err := kahuna.Dial(context.Background(), []string{"http://" + n.ListenAddress()}, tc.opts...)
				if err != nil {
					t.Fatal(err)
				}
				defer client.Close()
				c = client
			}
			ctx := context.Background()
			if r, err := c.TryLock(ctx, "park/r", []byte("holder"), time.Minute, kahuna.Ephemeral); err != nil || r.Status != kahuna.Locked {
				t.Fatalf("holder: %+v, %v", r, err)
			}
			const waiters = 32
			before := goroutinesIn("actors.(*Ring).wait(") // an earlier test's, if any still ends
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			type answer struct {
				owner string
				lockAnswer
			}
			answers := make(chan answer, waiters)
			for i := range waiters {
				owner := fmt.Sprint("w", i)
				go func() {
					r, err := c.Lock(wctx, "park/r", []byte(owner), time.Minute, kahuna.WaitForever, kahuna.Ephemeral)
					answers <- answer{owner, lockAnswer{r, err}}
				}()
			}
			for deadline := time.Now().Add(10 * time.Second); n.Stats().Waiters < waiters; {
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d Locks waiting after 10 s", n.Stats().Waiters, waiters)
				}
				time.Sleep(time.Millisecond)
			}
			parked := goroutinesIn("actors.(*Ring).wait(") - before
			if tc.parked && parked < waiters || !tc.parked && parked > 0 {
				t.Fatalf("%d goroutines parked in the lock actors' wait for %d waiting Locks", parked, waiters)
			}
			if u, err := c.Unlock(ctx, "park/r", []byte("holder"), kahuna.Ephemeral); err != nil || u.Status != kahuna.Unlocked {
				t.Fatalf("unlock: %+v, %v", u, err)
			}
			first := <-answers
			if first.err != nil || first.r.Status != kahuna.Locked {
				t.Fatalf("the first answer once the lock was released: %+v, %v; want a grant", first.r, first.err)
			}
			cancel()
			for range waiters - 1 {
				if got := <-answers; got.err == nil {
					t.Fatalf("%s, its caller gone: %+v, want its context's error", got.owner, got.r)
				}
			}
			for deadline := time.Now().Add(10 * time.Second); n.Stats().Waiters != 0; {
				if time.Now().After(deadline) {
					t.Fatalf("%d Locks still queued 10 s after their callers left", n.Stats().Waiters)
				}
				time.Sleep(time.Millisecond)
			}
			if info, g, err := c.Get(ctx, "park/r", kahuna.Ephemeral); err != nil || g.Status != kahuna.Got || string(info.Owner) != first.owner || info.FencingToken != first.r.FencingToken {
				t.Fatalf("the lock after the others left: %+v (%s, token %d), %v; want held by %s with token %d", g, info.Owner, info.FencingToken, err, first.owner, first.r.FencingToken)
			}
		})
	}
}

// goroutinesIn counts the goroutines whose stack has fn in it.
func goroutinesIn(fn string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, fn) {
			count++
		}
	}
	return count
}

// holdOnce waits for res, checks with Get that the node holds it for
// owner with the granted token, and releases it.
func holdOnce(ctx context.Context, c *kahuna.Client, res, owner string) error {
	r, err := c.Lock(ctx, res, []byte(owner), time.Minute, 5*time.Second, kahuna.Ephemeral)
	if err != nil || r.Status != kahuna.Locked {
		return fmt.Errorf("Lock: %+v, %v", r, err)
	}
	info, g, err := c.Get(ctx, res, kahuna.Ephemeral)
	if err != nil || g.Status != kahuna.Got || string(info.Owner) != owner || info.FencingToken != r.FencingToken {
		return fmt.Errorf("granted token %d, but the node says %+v (%s, token %d), %v", r.FencingToken, g, info.Owner, info.FencingToken, err)
	}
	if u, err := c.Unlock(ctx, res, []byte(owner), kahuna.Ephemeral); err != nil || u.Status != kahuna.Unlocked {
		return fmt.Errorf("Unlock: %+v, %v", u, err)
	}
	return nil
}
