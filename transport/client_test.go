package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna/internal/testport"
	"github.com/kahunago/kahuna/lease"
)

const (
	eph  = lease.Ephemeral
	pers = lease.Persistent
)

// TestClientContract walks every row of the semantics table (docs/semantics.md) through Dial over h2c.
func TestClientContract(t *testing.T) {
	f := newFake()
	srv := startServer(t, f, ServerOptions{NodeName: "n1"})
	c := dial(t, []string{"http://" + srv.mixed})
	here := "http://" + srv.mixed
	ctx := testCtx(t)
	A, B := []byte("owner-A"), []byte("owner-B")
	sec := time.Second

	check := func(what string, r lease.Result, err error, st lease.Status, token int64) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if r.Status != st || r.FencingToken != token {
			t.Fatalf("%s = (%v, %d), want (%v, %d)", what, r.Status, r.FencingToken, st, token)
		}
	}
	get := func(res string, d lease.Durability) (lease.LockInfo, lease.Result) {
		t.Helper()
		info, r, err := c.Get(ctx, res, d)
		if err != nil {
			t.Fatalf("Get(%s): %v", res, err)
		}
		return info, r
	}

	// Bad input.
	big := strings.Repeat("x", lease.MaxResourceBytes+1)
	bigOwner := bytes.Repeat([]byte("o"), lease.MaxOwnerBytes+1)
	for _, tc := range []struct {
		name string
		call func() (lease.Result, error)
	}{
		{"TryLock empty resource", func() (lease.Result, error) { return c.TryLock(ctx, "", A, sec, pers) }},
		{"TryLock empty owner", func() (lease.Result, error) { return c.TryLock(ctx, "r", nil, sec, pers) }},
		{"TryLock ttl 0", func() (lease.Result, error) { return c.TryLock(ctx, "r", A, 0, pers) }},
		{"TryLock ttl < 0", func() (lease.Result, error) { return c.TryLock(ctx, "r", A, -sec, pers) }},
		{"TryLock ttl over MaxTTL", func() (lease.Result, error) { return c.TryLock(ctx, "r", A, lease.MaxTTL+time.Millisecond, pers) }},
		{"Extend empty owner", func() (lease.Result, error) { return c.Extend(ctx, "r", []byte{}, sec, pers) }},
		{"Extend ttl 0", func() (lease.Result, error) { return c.Extend(ctx, "r", A, 0, pers) }},
		{"Unlock empty resource", func() (lease.Result, error) { return c.Unlock(ctx, "", A, pers) }},
		{"Unlock empty owner", func() (lease.Result, error) { return c.Unlock(ctx, "r", nil, pers) }},
		{"Get empty resource", func() (lease.Result, error) { _, r, err := c.Get(ctx, "", pers); return r, err }},
		{"durability 2", func() (lease.Result, error) { return c.TryLock(ctx, "r", A, sec, 2) }},
		{"durability -1", func() (lease.Result, error) { _, r, err := c.Get(ctx, "r", -1); return r, err }},
		{"resource over limit", func() (lease.Result, error) { return c.TryLock(ctx, big, A, sec, pers) }},
		{"owner over limit", func() (lease.Result, error) { return c.TryLock(ctx, "r", bigOwner, sec, pers) }},
		{"resource not UTF-8", func() (lease.Result, error) { return c.TryLock(ctx, "r\xff", A, sec, pers) }},
	} {
		r, err := tc.call()
		check(tc.name, r, err, lease.InvalidInput, 0)
	}
	if n := f.served.Load(); n != 0 {
		t.Fatalf("%d invalid requests reached the Locker", n)
	}

	for _, d := range []lease.Durability{eph, pers} {
		res := "contract/" + d.String()

		// TryLock rows.
		r, err := c.TryLock(ctx, res, A, 10*sec, d)
		check("TryLock new", r, err, lease.Locked, 0)
		// Served by the node called: the wire says "", the client
		// names the endpoint.
		if r.ServedFrom != here {
			t.Fatalf("ServedFrom = %q, want %s", r.ServedFrom, here)
		}
		r, err = c.TryLock(ctx, res, B, 10*sec, d)
		check("TryLock other owner, live", r, err, lease.Busy, 0)
		info0, _ := get(res, d)
		f.advance(2 * sec)
		r, err = c.TryLock(ctx, res, A, 30*sec, d)
		check("TryLock same owner, live", r, err, lease.Locked, 0)
		if info, _ := get(res, d); !info.Expires.Equal(info0.Expires) {
			t.Fatalf("same-owner TryLock moved expiry %v -> %v", info0.Expires, info.Expires)
		}
		f.advance(9 * sec) // past the 10 s lease
		r, err = c.TryLock(ctx, res, B, 10*sec, d)
		check("TryLock after expiry", r, err, lease.Locked, 1)

		// Extend rows.
		r, err = c.Extend(ctx, res+"/none", A, sec, d)
		check("Extend unknown", r, err, lease.LockDoesNotExist, 0)
		r, err = c.Extend(ctx, res, A, sec, d)
		check("Extend non-owner, live", r, err, lease.InvalidOwner, 0)
		r, err = c.Extend(ctx, res, B, 3*sec, d)
		check("Extend owner", r, err, lease.Extended, 1)
		if info, _ := get(res, d); !info.Expires.Equal(f.clock().Add(3 * sec)) {
			t.Fatalf("Extend set expiry %v, want now+3s = %v", info.Expires, f.clock().Add(3*sec))
		}
		f.advance(4 * sec)
		r, err = c.Extend(ctx, res, A, sec, d)
		check("Extend non-owner, expired (expiry first)", r, err, lease.LockDoesNotExist, 0)
		r, err = c.Extend(ctx, res, B, sec, d)
		check("Extend owner, expired", r, err, lease.LockDoesNotExist, 0)

		// Unlock rows (the lease of B has lapsed, nobody retook it).
		r, err = c.Unlock(ctx, res, A, d)
		check("Unlock non-owner, expired", r, err, lease.InvalidOwner, 0)
		r, err = c.Unlock(ctx, res, B, d)
		check("Unlock owner, expired", r, err, lease.Unlocked, 0)
		r, err = c.Unlock(ctx, res, B, d)
		check("Unlock already unlocked", r, err, lease.LockDoesNotExist, 0)
		r, err = c.Unlock(ctx, res+"/none", B, d)
		check("Unlock unknown", r, err, lease.LockDoesNotExist, 0)
		r, err = c.TryLock(ctx, res, A, 10*sec, d)
		check("TryLock after unlock", r, err, lease.Locked, 2)
		r, err = c.Unlock(ctx, res, B, d)
		check("Unlock non-owner, live", r, err, lease.InvalidOwner, 0)

		// Get rows.
		info, gr := get(res, d)
		if gr.Status != lease.Got || gr.FencingToken != 2 || !bytes.Equal(info.Owner, A) ||
			info.FencingToken != 2 || !info.Expires.Equal(f.clock().Add(10*sec)) {
			t.Fatalf("Get live = %+v %+v", info, gr)
		}
		for _, what := range []string{"unknown", "unlocked", "expired"} {
			name := res
			switch what {
			case "unknown":
				name = res + "/none"
			case "unlocked":
				name = res + "/unlocked"
				if r, err := c.TryLock(ctx, name, A, sec, d); err != nil || r.Status != lease.Locked {
					t.Fatal(r, err)
				}
				if r, err := c.Unlock(ctx, name, A, d); err != nil || r.Status != lease.Unlocked {
					t.Fatal(r, err)
				}
			case "expired":
				f.advance(11 * sec)
			}
			info, gr := get(name, d)
			if gr.Status != lease.LockDoesNotExist || gr.FencingToken != 0 || info.Owner != nil || !info.Expires.IsZero() {
				t.Fatalf("Get %s = %+v %+v, want LockDoesNotExist and nothing else", what, info, gr)
			}
		}
	}
}

// TestClientConcurrentCallsMatched runs many concurrent calls over one
// batch stream per endpoint (the default) and over three: each answer
// must be its own call's, whichever stream carried it.
func TestClientConcurrentCallsMatched(t *testing.T) {
	for _, streams := range []int{DefaultStreamsPerEndpoint, 3} {
		t.Run(fmt.Sprintf("streams=%d", streams), func(t *testing.T) {
			f := newFake()
			srv := startServer(t, f, ServerOptions{})
			c := dial(t, []string{"http://" + srv.mixed, "http://" + srv.native}, WithStreamsPerEndpoint(streams))
			for _, ep := range c.endpoints {
				if len(ep.streams) != streams {
					t.Fatalf("endpoint %s has %d batch streams, want %d", ep.url, len(ep.streams), streams)
				}
			}
			ctx := testCtx(t)
			const goroutines, calls = 64, 50
			var wg sync.WaitGroup
			errs := make(chan error, goroutines)
			for g := range goroutines {
				wg.Go(func() {
					for i := range calls {
						res := fmt.Sprintf("conc/%d/%d", g, i)
						owner := []byte(res + "/owner")
						r, err := c.TryLock(ctx, res, owner, time.Minute, lease.Durability(i%2))
						if err != nil || r.Status != lease.Locked {
							errs <- fmt.Errorf("TryLock %s = %v, %v", res, r, err)
							return
						}
						info, gr, err := c.Get(ctx, res, lease.Durability(i%2))
						if err != nil || gr.Status != lease.Got || !bytes.Equal(info.Owner, owner) {
							errs <- fmt.Errorf("Get %s = %q %v, %v: answer of another call", res, info.Owner, gr, err)
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

func TestClientRetriesMustRetry(t *testing.T) {
	f := newFake()
	var refusals atomic.Int32
	refusals.Store(5)
	f.hook = func(_ context.Context, _ lease.Op, resource string) (lease.Status, error, bool) {
		if resource == "flaky" && refusals.Add(-1) >= 0 {
			return lease.MustRetry, nil, true
		}
		return 0, nil, false
	}
	srv := startServer(t, f, ServerOptions{})
	c := dial(t, []string{"http://" + srv.mixed})
	ctx := testCtx(t)

	r, err := c.TryLock(ctx, "flaky", []byte("A"), time.Minute, pers)
	if err != nil || r.Status != lease.Locked {
		t.Fatalf("TryLock = %v, %v, want Locked after retries", r, err)
	}
	if n := f.served.Load(); n != 6 {
		t.Fatalf("the Locker saw %d attempts, want 5 refusals + 1", n)
	}
	refusals.Store(3)
	if r, err := c.Unlock(ctx, "flaky", []byte("A"), pers); err != nil || r.Status != lease.Unlocked {
		t.Fatalf("Unlock = %v, %v, want Unlocked after retries", r, err)
	}
}

func TestClientMustRetryLimits(t *testing.T) {
	f := newFake()
	f.hook = func(context.Context, lease.Op, string) (lease.Status, error, bool) {
		return lease.MustRetry, nil, true
	}
	srv := startServer(t, f, ServerOptions{})
	c := dial(t, []string{"http://" + srv.native}, WithMustRetryBudget(30*time.Millisecond))

	// Extend, Unlock and Get give up after the budget with the status.
	start := time.Now()
	r, err := c.Extend(testCtx(t), "r", []byte("A"), time.Second, pers)
	if err != nil || r.Status != lease.MustRetry {
		t.Fatalf("Extend = %v, %v, want MustRetry after the budget", r, err)
	}
	if el := time.Since(start); el < 30*time.Millisecond {
		t.Fatalf("gave up after %v, before the 30ms budget", el)
	}
	if f.served.Load() < 2 {
		t.Fatalf("only %d attempts", f.served.Load())
	}
	// So does TryLock: an overloaded node is not retried for ever.
	start, before := time.Now(), f.served.Load()
	r, err = c.TryLock(testCtx(t), "r", []byte("A"), time.Second, pers)
	if err != nil || r.Status != lease.MustRetry {
		t.Fatalf("TryLock = %v, %v, want MustRetry after the budget", r, err)
	}
	if el := time.Since(start); el < 30*time.Millisecond {
		t.Fatalf("TryLock gave up after %v, before the 30ms budget", el)
	}
	// Backoff spaces the attempts: at least ~1 ms, 2, 4, 8, ... apart
	// (each drawn from the upper half of its ceiling).
	if n := f.served.Load() - before; n < 1 || n > 12 {
		t.Fatalf("TryLock made %d attempts in its 30ms budget, want a few, backed off", n)
	}
	// And over REST.
	rc, err := DialREST([]string{"http://" + srv.mixed}, WithMustRetryBudget(30*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if r, err := rc.TryLock(testCtx(t), "r", []byte("A"), time.Second, pers); err != nil || r.Status != lease.MustRetry {
		t.Fatalf("REST TryLock = %v, %v, want MustRetry after the budget", r, err)
	}
	// A context shorter than the budget ends the retries, and says so.
	long := dial(t, []string{"http://" + srv.native}, WithMustRetryBudget(time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := long.TryLock(ctx, "r", []byte("A"), time.Second, pers); err != context.DeadlineExceeded {
		t.Fatalf("TryLock err = %v, want context.DeadlineExceeded itself", err)
	}
}

// refusingWaiter is a WaitLocker whose Lock always answers MustRetry.
type refusingWaiter struct {
	*fakeLocker
	locks atomic.Int64
}

func (w *refusingWaiter) Lock(context.Context, string, []byte, time.Duration, time.Duration, lease.Durability) (lease.Result, error) {
	w.locks.Add(1)
	return lease.Result{Status: lease.MustRetry}, nil
}

// TestNativeLockMustRetryBudget: a native Lock retries MustRetry for the
// longer of its wait and the budget, and a WaitForever one until its
// context ends.
func TestNativeLockMustRetryBudget(t *testing.T) {
	w := &refusingWaiter{fakeLocker: newFake()}
	srv := startServer(t, w, ServerOptions{})
	c := dial(t, []string{"http://" + srv.native}, WithMustRetryBudget(30*time.Millisecond))
	for _, wait := range []time.Duration{0, 60 * time.Millisecond} {
		start := time.Now()
		r, err := c.Lock(testCtx(t), "r", []byte("A"), time.Second, wait, pers)
		if err != nil || r.Status != lease.MustRetry {
			t.Fatalf("Lock(wait %v) = %v, %v, want MustRetry after the budget", wait, r, err)
		}
		if el, want := time.Since(start), max(wait, 30*time.Millisecond); el < want {
			t.Fatalf("Lock(wait %v) gave up after %v, before %v", wait, el, want)
		}
	}
	if w.locks.Load() < 4 {
		t.Fatalf("only %d attempts", w.locks.Load())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Millisecond)
	defer cancel()
	if _, err := c.Lock(ctx, "r", []byte("A"), time.Second, lease.WaitForever, pers); err != context.DeadlineExceeded {
		t.Fatalf("Lock(WaitForever) err = %v, want context.DeadlineExceeded", err)
	}
}

func TestClientPassesStatusesThrough(t *testing.T) {
	f := newFake()
	f.hook = func(context.Context, lease.Op, string) (lease.Status, error, bool) {
		return lease.Errored, nil, true
	}
	srv := startServer(t, f, ServerOptions{})
	c := dial(t, []string{"http://" + srv.mixed})
	if r, err := c.TryLock(testCtx(t), "r", []byte("A"), time.Second, pers); err != nil || r.Status != lease.Errored {
		t.Fatalf("TryLock = %v, %v, want Errored", r, err)
	}
}

func TestClientContextCancel(t *testing.T) {
	f := newFake()
	g := newGate("parked")
	f.hook = g.hook
	srv := startServer(t, f, ServerOptions{})
	c := dial(t, []string{"http://" + srv.mixed}, WithStreamsPerEndpoint(1))

	// Already cancelled: nothing is sent.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.TryLock(ctx, "r", []byte("A"), time.Second, pers); err != context.Canceled {
		t.Fatalf("pre-cancelled TryLock err = %v, want context.Canceled", err)
	}

	// Cancelled while the server holds the call.
	ctx, cancel = context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.TryLock(ctx, "parked", []byte("A"), time.Second, pers)
		done <- err
	}()
	<-g.arrived
	cancel()
	select {
	case err := <-done:
		if err != context.Canceled {
			t.Fatalf("TryLock err = %v, want context.Canceled itself", err)
		}
	case <-time.After(5 * time.Second): // a guard against a hang, not a wait for a signal
		t.Fatal("TryLock still waiting for its answer after its context was cancelled")
	}
	// The late answer is dropped, and the stream still carries calls.
	close(g.release)
	if r, err := c.TryLock(testCtx(t), "other", []byte("A"), time.Second, pers); err != nil || r.Status != lease.Locked {
		t.Fatalf("after a cancelled call: %v, %v", r, err)
	}
	// The parked TryLock did complete server-side: the lock is held. It
	// runs on the server concurrently with the calls above once released,
	// and its answer is dropped, so the client has no signal of it: Get
	// until it is seen, within a bound.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		_, r, err := c.Get(testCtx(t), "parked", pers)
		if err == nil && r.Status == lease.Got {
			break
		}
		if err != nil || r.Status != lease.LockDoesNotExist || time.Now().After(deadline) {
			t.Fatalf("Get parked = %v, %v", r, err)
		}
	}
}

// TestClientTryLockLate: a TryLock whose caller leaves while the server
// holds it returns at once with left set, and its answer, when it comes,
// goes to late (once); a caller that leaves before the call is sent sends
// nothing and late is never called; one whose server goes away hands
// late the failure (outcome unknown). On both wires.
func TestClientTryLockLate(t *testing.T) {
	for _, framed := range []bool{false, true} {
		w := newWaitingFake()
		g := newGate("parked")
		w.hook = g.hook
		srv := startServer(t, w, ServerOptions{})
		opts := []ClientOption{WithStreamsPerEndpoint(1)}
		if !framed {
			opts = append(opts, WithGRPCOnly())
		}
		c := dial(t, []string{"http://" + srv.native}, opts...)
		type answer struct {
			r   lease.Result
			err error
		}
		lateAnswer := func(late <-chan answer) answer {
			select {
			case a := <-late:
				return a
			case <-time.After(10 * time.Second): // a guard against a hang, not a wait for a signal
				t.Fatalf("framed=%v: no late answer within 10 s", framed)
				return answer{}
			}
		}
		lateOnce := func(got chan<- answer) func(lease.Result, error) {
			var calls atomic.Int32
			return func(r lease.Result, err error) {
				if calls.Add(1) > 1 {
					t.Errorf("framed=%v: late called again with %v %v", framed, r, err)
				}
				got <- answer{r, err}
			}
		}

		// Left before anything was sent.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		never := make(chan answer, 1)
		if _, left, err := c.TryLockLate(ctx, "r", []byte("A"), time.Second, pers, lateOnce(never)); left || err != context.Canceled {
			t.Fatalf("framed=%v: pre-cancelled TryLockLate: left %v, %v; want not left, context.Canceled", framed, left, err)
		}

		// Left while the server holds it: the grant comes to late.
		ctx, cancel = context.WithCancel(context.Background())
		type ret struct {
			left bool
			err  error
		}
		returned, late := make(chan ret, 1), make(chan answer, 1)
		go func() {
			_, left, err := c.TryLockLate(ctx, "parked", []byte("A"), time.Second, pers, lateOnce(late))
			returned <- ret{left, err}
		}()
		<-g.arrived
		cancel()
		if got := <-returned; !got.left || got.err != context.Canceled {
			t.Fatalf("framed=%v: TryLockLate left while parked: %+v, want left with context.Canceled", framed, got)
		}
		select {
		case a := <-late:
			t.Fatalf("framed=%v: late called before the server answered: %+v", framed, a)
		default:
		}
		close(g.release)
		if a := lateAnswer(late); a.err != nil || a.r.Status != lease.Locked {
			t.Fatalf("framed=%v: the late answer: %+v, want Locked", framed, a)
		}

		// Left, then the server goes: late hears of the broken call.
		g2 := newGate("parked-2")
		w.hook = g2.hook
		ctx, cancel = context.WithCancel(context.Background())
		go func() {
			_, left, err := c.TryLockLate(ctx, "parked-2", []byte("A"), time.Second, pers, lateOnce(late))
			returned <- ret{left, err}
		}()
		<-g2.arrived
		cancel()
		if got := <-returned; !got.left {
			t.Fatalf("framed=%v: TryLockLate left while parked: %+v, want left", framed, got)
		}
		srv.Close()
		if a := lateAnswer(late); a.err == nil || errors.Is(a.err, lease.ErrNotApplied) {
			t.Fatalf("framed=%v: the late answer of a call whose server closed: %+v, want an error of unknown outcome", framed, a)
		}
		close(g2.release)
		select {
		case a := <-never:
			t.Fatalf("framed=%v: late called for a call never sent: %+v", framed, a)
		default:
		}
	}
}

// TestClientServerClosedMidCall: a call the server holds when it closes
// has an unknown outcome, on either wire: a framed connection that ends
// without the server's end frame broke, like a gRPC stream without OK.
func TestClientServerClosedMidCall(t *testing.T) {
	for _, framed := range []bool{false, true} {
		w := newWaitingFake() // serves the native streams, so framing is offered
		g := newGate("parked")
		w.hook = g.hook
		srv := startServer(t, w, ServerOptions{})
		opts := []ClientOption{}
		if !framed {
			opts = append(opts, WithGRPCOnly())
		}
		c := dial(t, []string{"http://" + srv.native}, opts...)

		done := make(chan error, 1)
		go func() {
			_, err := c.TryLock(testCtx(t), "parked", []byte("A"), time.Second, pers)
			done <- err
		}()
		<-g.arrived
		srv.Close()
		err := <-done
		if err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errUnsent) || errors.Is(err, lease.ErrNotApplied) {
			t.Fatalf("framed=%v: TryLock on a closed server = %v, want a transport error with unknown outcome", framed, err)
		}
		// Later calls fail fast, not hang.
		if _, err := c.TryLock(testCtx(t), "r", []byte("A"), time.Second, pers); err == nil {
			t.Fatalf("framed=%v: TryLock with the server gone succeeded", framed)
		}
		if got := srv.frames.accepted.Load() > 0; got != framed {
			t.Fatalf("framed=%v: framed streams accepted: %v", framed, got)
		}
		close(g.release)
	}
}

func TestClientRoundRobin(t *testing.T) {
	a := startServer(t, newFake(), ServerOptions{NodeName: "a"})
	b := startServer(t, newFake(), ServerOptions{NodeName: "b"})
	c := dial(t, []string{"http://" + a.mixed, "http://" + b.native})
	counts := map[string]int{}
	for i := range 10 {
		r, err := c.TryLock(testCtx(t), fmt.Sprint("rr", i), []byte("A"), time.Second, pers)
		if err != nil {
			t.Fatal(err)
		}
		counts[r.ServedFrom]++
	}
	if counts["http://"+a.mixed] != 5 || counts["http://"+b.native] != 5 {
		t.Fatalf("calls per node = %v, want 5 and 5", counts)
	}
}

func TestClientFailsOverWhenAnEndpointIsDown(t *testing.T) {
	a := startServer(t, newFake(), ServerOptions{NodeName: "a"})
	b := startServer(t, newFake(), ServerOptions{NodeName: "b"})
	c := dial(t, []string{"http://" + a.mixed, "http://" + b.mixed})
	if err := a.Shutdown(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	// Calls that would go to a are never processed there, so they are
	// sent to b instead of failing.
	for i := range 10 {
		r, err := c.TryLock(testCtx(t), fmt.Sprint("fo", i), []byte("A"), time.Second, pers)
		if err != nil || r.ServedFrom != "http://"+b.mixed {
			t.Fatalf("call %d = %+v, %v, want served by b", i, r, err)
		}
	}
}

func TestClientClose(t *testing.T) {
	srv := startServer(t, newFake(), ServerOptions{})
	c := dial(t, []string{"http://" + srv.mixed})
	must(t, c.Close())
	if _, err := c.TryLock(testCtx(t), "r", []byte("A"), time.Second, pers); !errors.Is(err, ErrClosed) {
		t.Fatalf("TryLock after Close = %v, want ErrClosed", err)
	}
	must(t, c.Close())
}

func TestDialErrors(t *testing.T) {
	for _, ep := range []string{"", "localhost:2070", "ftp://h:1", "http://", "http://h:1/path",
		"http://u@h:1", "http://h:1?x=1", "http://h:port"} {
		c, err := Dial(testCtx(t), []string{ep})
		if err == nil {
			c.Close()
			t.Errorf("Dial(%q) succeeded", ep)
			continue
		}
		if !strings.Contains(err.Error(), "endpoint") {
			t.Errorf("Dial(%q) = %v, want an error naming the endpoint", ep, err)
		}
	}
	if _, err := Dial(testCtx(t), nil); err == nil {
		t.Error("Dial with no endpoints succeeded")
	}
	// Nothing listens there (a port reserved for this test): a clear
	// error, quickly.
	if _, err := Dial(testCtx(t), []string{"http://" + testport.Addr(t)}); err == nil || !strings.Contains(err.Error(), "no endpoint reachable") {
		t.Fatalf("Dial to a closed port = %v", err)
	}
}

// TestClientForwarding: a forwarding client speaks the node-to-node stream,
// which the server serves with its Forwarded Locker, and hands MustRetry
// back untried.
func TestClientForwarding(t *testing.T) {
	main, fwd := newFake(), newFake()
	fwd.hook = func(_ context.Context, _ lease.Op, resource string) (lease.Status, error, bool) {
		if resource == "moving" {
			return lease.MustRetry, nil, true
		}
		return 0, nil, false
	}
	srv := startServer(t, main, ServerOptions{Forwarded: fwd})
	c := dial(t, []string{"http://" + srv.mixed}, WithForwarding())
	ctx := testCtx(t)
	if r, err := c.TryLock(ctx, "f", []byte("A"), time.Second, pers); err != nil || r.Status != lease.Locked {
		t.Fatalf("forwarded TryLock = %v, %v", r, err)
	}
	if info, r, err := c.Get(ctx, "f", pers); err != nil || r.Status != lease.Got || string(info.Owner) != "A" {
		t.Fatalf("forwarded Get = %v %v, %v", info, r, err)
	}
	if r, err := c.TryLock(ctx, "moving", []byte("A"), time.Second, pers); err != nil || r.Status != lease.MustRetry {
		t.Fatalf("forwarded TryLock = %v, %v, want MustRetry unretried", r, err)
	}
	if main.served.Load() != 0 || fwd.served.Load() != 3 {
		t.Fatalf("served main=%d forwarded=%d, want 0 and 3", main.served.Load(), fwd.served.Load())
	}
}
