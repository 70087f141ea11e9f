package kahuna

// The handle's tests run inside the package so they can give a Lock a
// fake clock (withClock): send times, deadlines and KeepAlive's schedule
// then move only when a test says so, and a fake Locker scripts the
// answers. The node-backed tests at the end check the same handle against
// the real semantics table.

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a handleClock that moves only on Advance. Timers due by an
// Advance run before it returns (in Advance's goroutine); a timer set
// already due runs on its own goroutine, as time.AfterFunc does.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	changed chan struct{} // closed and replaced whenever a timer is set or stopped
}

type fakeTimer struct {
	c    *fakeClock
	at   time.Time
	f    func()
	done bool // fired or stopped
}

func newFakeClock() *fakeClock {
	// A reading of time.Now carries a monotonic clock reading, like the
	// times the handle computes with in production.
	return &fakeClock{now: time.Now(), changed: make(chan struct{})}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) handleTimer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now.Add(d), f: f}
	if d <= 0 {
		t.done = true
		go f()
	} else {
		c.timers = append(c.timers, t)
	}
	c.signal()
	return t
}

// signal wakes the waiters of changed; c.mu is held.
func (c *fakeClock) signal() {
	close(c.changed)
	c.changed = make(chan struct{})
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.done
	t.done = true
	t.c.signal()
	return was
}

// Advance moves the clock by d and runs the timers that came due, in the
// order of their deadlines.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	live := c.timers[:0]
	for _, t := range c.timers {
		switch {
		case t.done:
		case !t.at.After(c.now):
			t.done = true
			due = append(due, t)
		default:
			live = append(live, t)
		}
	}
	c.timers = live
	c.mu.Unlock()
	slices.SortStableFunc(due, func(a, b *fakeTimer) int { return a.at.Compare(b.at) })
	for _, t := range due {
		t.f()
	}
}

// pending lists the deadlines of the timers still set.
func (c *fakeClock) pending() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	var at []time.Time
	for _, t := range c.timers {
		if !t.done {
			at = append(at, t.at)
		}
	}
	return at
}

// waitFor blocks until ok holds for the deadlines of the timers still set,
// looking again whenever a timer is set or stopped.
func (c *fakeClock) waitFor(t *testing.T, what string, ok func(pending []time.Time) bool) {
	t.Helper()
	fail := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		changed := c.changed
		var pending []time.Time
		for _, tm := range c.timers {
			if !tm.done {
				pending = append(pending, tm.at)
			}
		}
		c.mu.Unlock()
		if ok(pending) {
			return
		}
		select {
		case <-changed:
		case <-fail:
			t.Fatalf("%s: timers pending %v", what, pending)
		}
	}
}

// waitTimer blocks until a timer is set for at (a KeepAlive goroutine
// scheduling its next extend, say).
func (c *fakeClock) waitTimer(t *testing.T, at time.Time) {
	t.Helper()
	c.waitFor(t, "timer for "+at.String(), func(p []time.Time) bool {
		return slices.ContainsFunc(p, at.Equal)
	})
}

// waitNoTimers blocks until no timer is set (a KeepAlive goroutine stops
// its timer before it returns).
func (c *fakeClock) waitNoTimers(t *testing.T) {
	t.Helper()
	c.waitFor(t, "no timers", func(p []time.Time) bool { return len(p) == 0 })
}

// fakeCall is one call a fakeLocker received.
type fakeCall struct {
	op    string // trylock, extend, unlock
	owner string
	ttl   time.Duration
	at    time.Time // the fake clock when the call arrived
	// ctxErr is the call's ctx.Err() when it arrived.
	ctxErr error
}

// fakeLocker answers from script (per operation, in call order), then with
// success: Locked token 7, Extended, Unlocked. Each call first advances
// the fake clock by latency, as if the answer took that long to arrive.
type fakeLocker struct {
	clk     *fakeClock
	latency time.Duration
	script  map[string][]fakeAnswer
	// rest answers the calls after the script (default: success).
	rest map[string]fakeAnswer
	// hook, if set, runs at the start of every call (before the clock moves).
	hook func(op string, n int, ctx context.Context)

	mu    sync.Mutex
	calls []fakeCall
	seen  chan string // every call's op, if not nil (buffered, non-blocking)
}

type fakeAnswer struct {
	status Status
	token  int64
	err    error
}

func (f *fakeLocker) answer(ctx context.Context, op string, owner []byte, ttl time.Duration) (Result, error) {
	f.mu.Lock()
	n := 0
	for _, c := range f.calls {
		if c.op == op {
			n++
		}
	}
	f.calls = append(f.calls, fakeCall{op: op, owner: string(owner), ttl: ttl, at: f.clk.Now(), ctxErr: ctx.Err()})
	a, scripted := f.rest[op]
	if n < len(f.script[op]) {
		a, scripted = f.script[op][n], true
	}
	f.mu.Unlock()
	if f.hook != nil {
		f.hook(op, n, ctx)
	}
	if f.seen != nil {
		select {
		case f.seen <- op:
		default:
		}
	}
	if f.latency > 0 {
		f.clk.Advance(f.latency)
	}
	if !scripted {
		switch op {
		case "trylock":
			a = fakeAnswer{status: Locked, token: 7}
		case "extend":
			a = fakeAnswer{status: Extended}
		case "unlock":
			a = fakeAnswer{status: Unlocked}
		}
	}
	if a.err != nil {
		return Result{}, a.err
	}
	return Result{Status: a.status, FencingToken: a.token}, nil
}

func (f *fakeLocker) TryLock(ctx context.Context, resource string, owner []byte, ttl time.Duration, d Durability) (Result, error) {
	return f.answer(ctx, "trylock", owner, ttl)
}

func (f *fakeLocker) Extend(ctx context.Context, resource string, owner []byte, ttl time.Duration, d Durability) (Result, error) {
	return f.answer(ctx, "extend", owner, ttl)
}

func (f *fakeLocker) Unlock(ctx context.Context, resource string, owner []byte, d Durability) (Result, error) {
	return f.answer(ctx, "unlock", owner, 0)
}

func (f *fakeLocker) Get(ctx context.Context, resource string, d Durability) (LockInfo, Result, error) {
	return LockInfo{}, Result{Status: LockDoesNotExist}, nil
}

func (f *fakeLocker) callsOf(op string) []fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fakeCall
	for _, c := range f.calls {
		if c.op == op {
			out = append(out, c)
		}
	}
	return out
}

// errTransport stands for a call that failed in the transport: the request
// may or may not have reached the server.
var errTransport = errors.New("transport: connection reset")

func answers(statuses ...Status) []fakeAnswer {
	out := make([]fakeAnswer, len(statuses))
	for i, s := range statuses {
		out[i] = fakeAnswer{status: s}
	}
	return out
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func waitOp(t *testing.T, seen <-chan string, op string) {
	t.Helper()
	fail := time.After(10 * time.Second)
	for {
		select {
		case got := <-seen:
			if got == op {
				return
			}
		case <-fail:
			t.Fatalf("no %s call", op)
		}
	}
}

const testTTL = 10 * time.Second

// testMargin is the default safety margin of testTTL: 1 % plus 2 ms.
const testMargin = testTTL/100 + 2*time.Millisecond

func TestAcquireRetriesMustRetry(t *testing.T) {
	clk := newFakeClock()
	f := &fakeLocker{clk: clk, script: map[string][]fakeAnswer{"trylock": answers(MustRetry, MustRetry, MustRetry)}}
	lock, err := Acquire(context.Background(), f, "r", withClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	if lock.FencingToken() != 7 || len(f.callsOf("trylock")) != 4 {
		t.Fatalf("token %d after %d calls", lock.FencingToken(), len(f.callsOf("trylock")))
	}
}

// TestAcquireRetriesUnknownWithSameOwner: Errored and call errors may have
// applied, so Acquire asks again with the same owner (a TryLock by the
// holder answers Locked with the same token).
func TestAcquireRetriesUnknownWithSameOwner(t *testing.T) {
	clk := newFakeClock()
	f := &fakeLocker{clk: clk, script: map[string][]fakeAnswer{"trylock": {
		{status: Errored}, {err: errTransport}, {status: WaitingForReplication}, {status: Locked, token: 9},
	}}}
	lock, err := Acquire(context.Background(), f, "r", withClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	calls := f.callsOf("trylock")
	if lock.FencingToken() != 9 || len(calls) != 4 {
		t.Fatalf("token %d after %d calls", lock.FencingToken(), len(calls))
	}
	for _, c := range calls {
		if c.owner != string(lock.Owner()) {
			t.Fatalf("attempt with owner %q, lock owner %q", c.owner, lock.Owner())
		}
	}
	if n := len(f.callsOf("unlock")); n != 0 {
		t.Fatalf("%d unlocks after a successful acquire", n)
	}
}

// TestAcquireRetryNotice: WithRetryNotice hears of each retry after no
// answer, with its cause, and once of the answer that follows; a busy
// lock is an answer, not a retry.
func TestAcquireRetryNotice(t *testing.T) {
	clk := newFakeClock()
	f := &fakeLocker{clk: clk, script: map[string][]fakeAnswer{"trylock": {
		{err: errTransport}, {status: MustRetry}, {status: Busy}, {status: Busy}, {err: errTransport}, {status: Locked, token: 9},
	}}}
	var notices []error
	lock, err := Acquire(context.Background(), f, "r", withClock(clk), WithWait(time.Minute),
		WithRetryNotice(func(err error) { notices = append(notices, err) }))
	if err != nil || lock.FencingToken() != 9 {
		t.Fatalf("acquire: %v", err)
	}
	var se *StatusError
	if len(notices) != 5 || !errors.Is(notices[0], errTransport) || !errors.As(notices[1], &se) || se.Status != MustRetry ||
		notices[2] != nil || !errors.Is(notices[3], errTransport) || notices[4] != nil {
		t.Fatalf("notices %v, want the transport error, MustRetry, nil at the busy answer, the transport error, nil at the grant", notices)
	}
}

// TestAcquireStopsOnRefusal: a refusal that certainly did not apply and
// will not change by asking again ends Acquire after one attempt, with no
// clean-up (nothing can have been granted).
func TestAcquireStopsOnRefusal(t *testing.T) {
	for _, s := range []Status{InvalidInput, Busy} {
		clk := newFakeClock()
		f := &fakeLocker{clk: clk, script: map[string][]fakeAnswer{"trylock": answers(s)}}
		_, err := Acquire(context.Background(), f, "r", withClock(clk))
		var se *StatusError
		if !errors.As(err, &se) || se.Status != s || len(f.callsOf("trylock")) != 1 || len(f.callsOf("unlock")) != 0 {
			t.Fatalf("%v: err %v after %d trylocks, %d unlocks", s, err, len(f.callsOf("trylock")), len(f.callsOf("unlock")))
		}
		if (s == Busy) != errors.Is(err, ErrBusy) {
			t.Fatalf("%v: errors.Is(%v, ErrBusy) = %v", s, err, errors.Is(err, ErrBusy))
		}
	}
}

// TestAcquireMustRetryBudget: a node that answers nothing but MustRetry
// (between leaders, or refusing work at a memory bound) is retried, backed
// off, for the 30 s budget only; nothing can have applied, so there is no
// clean-up.
func TestAcquireMustRetryBudget(t *testing.T) {
	clk := newFakeClock()
	f := &fakeLocker{clk: clk, latency: 11 * time.Second, script: map[string][]fakeAnswer{"trylock": answers(MustRetry, MustRetry, MustRetry, MustRetry)}}
	_, err := Acquire(context.Background(), f, "r", withClock(clk))
	var se *StatusError
	if !errors.As(err, &se) || se.Status != MustRetry {
		t.Fatalf("got %v, want a *StatusError with MustRetry", err)
	}
	if n := len(f.callsOf("trylock")); n != 3 { // 0, 11 s, 22 s; 33 s is past the budget
		t.Fatalf("%d attempts", n)
	}
	if n := len(f.callsOf("unlock")); n != 0 {
		t.Fatalf("%d unlocks, though no attempt can have applied", n)
	}
}

func TestAcquireContextEndsMustRetryLoop(t *testing.T) {
	clk := newFakeClock()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := &fakeLocker{clk: clk, script: map[string][]fakeAnswer{"trylock": answers(MustRetry, MustRetry, MustRetry, MustRetry)}}
	f.hook = func(op string, n int, _ context.Context) {
		if n == 2 {
			cancel() // after the answer: Acquire ends in its backoff
		}
	}
	if _, err := Acquire(ctx, f, "r", withClock(clk)); err != context.Canceled {
		t.Fatalf("got %v, want ctx.Err() unchanged", err)
	}
	if n := len(f.callsOf("unlock")); n != 0 {
		t.Fatalf("%d unlocks, though every attempt certainly did not apply", n)
	}
}

// TestAcquireUnknownOutcomeCleansUp: when Acquire gives up while the last
// attempt's outcome is unknown, the lock may be held by its owner unseen;
// it unlocks that owner (best effort, not under the ended ctx) and reports
// the unknown outcome, or ctx.Err() unchanged.
func TestAcquireUnknownOutcomeCleansUp(t *testing.T) {
	t.Run("budget/Errored", func(t *testing.T) {
		clk := newFakeClock()
		f := &fakeLocker{clk: clk, latency: 11 * time.Second, script: map[string][]fakeAnswer{"trylock": answers(Errored, Errored, Errored, Errored)}}
		_, err := Acquire(context.Background(), f, "r", withClock(clk))
		var se *StatusError
		if !errors.As(err, &se) || se.Status != Errored || se.Op != "lock" {
			t.Fatalf("got %v, want a *StatusError with Errored", err)
		}
		if n := len(f.callsOf("trylock")); n != 3 { // 0, 11 s, 22 s; 33 s is past the 30 s budget
			t.Fatalf("%d attempts", n)
		}
		if u := f.callsOf("unlock"); len(u) != 1 || u[0].owner != f.callsOf("trylock")[0].owner {
			t.Fatalf("clean-up unlocks %+v", u)
		}
	})
	t.Run("budget/transport", func(t *testing.T) {
		clk := newFakeClock()
		f := &fakeLocker{clk: clk, latency: 11 * time.Second, script: map[string][]fakeAnswer{"trylock": {{err: errTransport}, {status: MustRetry}, {err: errTransport}}}}
		_, err := Acquire(context.Background(), f, "r", withClock(clk))
		if !errors.Is(err, errTransport) {
			t.Fatalf("got %v, want the transport error", err)
		}
		if u := f.callsOf("unlock"); len(u) != 1 || u[0].owner != f.callsOf("trylock")[0].owner {
			t.Fatalf("clean-up unlocks %+v", u)
		}
	})
	t.Run("budget/MustRetry-after-Errored", func(t *testing.T) {
		// The last answer certainly did not apply, but an earlier one may
		// have: the outcome is still unknown.
		clk := newFakeClock()
		f := &fakeLocker{clk: clk, latency: 11 * time.Second, script: map[string][]fakeAnswer{"trylock": answers(Errored, MustRetry, MustRetry)}}
		_, err := Acquire(context.Background(), f, "r", withClock(clk))
		var se *StatusError
		if !errors.As(err, &se) || se.Status != Errored || len(f.callsOf("unlock")) != 1 {
			t.Fatalf("got %v with %d unlocks", err, len(f.callsOf("unlock")))
		}
	})
	t.Run("given owner", func(t *testing.T) {
		// An owner from WithOwner may hold the lock through another
		// handle: unlocking it could free a lock still in use.
		clk := newFakeClock()
		f := &fakeLocker{clk: clk, latency: 11 * time.Second, script: map[string][]fakeAnswer{"trylock": answers(Errored, Errored, Errored)}}
		_, err := Acquire(context.Background(), f, "r", withClock(clk), WithOwner([]byte("me")))
		var se *StatusError
		if !errors.As(err, &se) || se.Status != Errored || len(f.callsOf("unlock")) != 0 {
			t.Fatalf("got %v with %d unlocks", err, len(f.callsOf("unlock")))
		}
	})
	t.Run("ctx/in-flight", func(t *testing.T) {
		// ctx ends while an attempt is in flight: it may have applied.
		clk := newFakeClock()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		f := &fakeLocker{clk: clk, script: map[string][]fakeAnswer{"trylock": {{status: Errored}, {err: context.Canceled}}}}
		unlocked := make(chan struct{}, 1)
		f.hook = func(op string, n int, _ context.Context) {
			switch {
			case op == "trylock" && n == 1:
				cancel()
			case op == "unlock":
				unlocked <- struct{}{}
			}
		}
		_, err := Acquire(ctx, f, "r", withClock(clk))
		if err != context.Canceled {
			t.Fatalf("got %v, want ctx.Err() unchanged", err)
		}
		// The clean-up follows the attempt's answer, which may come after
		// Acquire has returned.
		select {
		case <-unlocked:
		case <-time.After(10 * time.Second):
			t.Fatal("no clean-up unlock within 10 s")
		}
		u := f.callsOf("unlock")
		if len(u) != 1 || u[0].owner != f.callsOf("trylock")[0].owner {
			t.Fatalf("clean-up unlocks %+v", u)
		}
		if u[0].ctxErr != nil {
			t.Fatal("the clean-up unlock ran under the ended ctx")
		}
	})
}

// TestAcquireBoundsAHungAttempt: an attempt whose caller left, and
// which the server never answers, is ended after the clean-up bound (the
// lease's TTL, at least cleanupTimeout), and the clean-up follows; it
// does not hang on.
func TestAcquireBoundsAHungAttempt(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := &fakeLocker{clk: clk}
	ended, unlocked := make(chan time.Time, 1), make(chan struct{}, 1)
	f.hook = func(op string, n int, actx context.Context) {
		switch op {
		case "trylock":
			cancel() // the caller leaves with the attempt unanswered
			<-actx.Done()
			ended <- time.Now()
		case "unlock":
			unlocked <- struct{}{}
		}
	}
	left := time.Now()
	if _, err := Acquire(ctx, f, "r", withClock(clk), WithTTL(100*time.Millisecond)); err != context.Canceled {
		t.Fatalf("got %v, want ctx.Err() unchanged", err)
	}
	select {
	case at := <-ended:
		if waited := at.Sub(left); waited < cleanupTimeout-100*time.Millisecond {
			t.Fatalf("the hung attempt was ended %v after its caller left, want the bound, %v", waited, cleanupTimeout)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the hung attempt is still running 10 s after its caller left")
	}
	select {
	case <-unlocked:
	case <-time.After(10 * time.Second):
		t.Fatal("no clean-up unlock within 10 s of the attempt's end")
	}
}

// TestHandleContextDeadline: the holder's deadline is the send time of the
// attempt that got the lease, plus the TTL, minus the safety margin; the
// answer's latency does not count (the server's lease started when the
// request arrived, at or after it was sent).
func TestHandleContextDeadline(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   []AcquireOption
		ttl    time.Duration
		margin time.Duration
	}{
		{"default", nil, defaultTTL, defaultTTL/100 + 2*time.Millisecond},
		{"ttl", []AcquireOption{WithTTL(testTTL)}, testTTL, testMargin},
		{"margin", []AcquireOption{WithTTL(testTTL), WithSafetyMargin(time.Second)}, testTTL, time.Second},
		{"no-margin", []AcquireOption{WithTTL(testTTL), WithSafetyMargin(0)}, testTTL, 0},
		{"sub-ms-ttl", []AcquireOption{WithTTL(testTTL + 700*time.Microsecond), WithSafetyMargin(0)}, testTTL, 0}, // the wire carries whole ms
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			f := &fakeLocker{clk: clk, latency: 40 * time.Millisecond}
			sent := clk.Now()
			lock, err := Acquire(context.Background(), f, "r", append(tc.opts, withClock(clk))...)
			if err != nil {
				t.Fatal(err)
			}
			want := sent.Add(tc.ttl - tc.margin)
			if got := lock.Expires(); !got.Equal(want) {
				t.Fatalf("Expires %v, want %v (sent + ttl − margin)", got.Sub(sent), want.Sub(sent))
			}
			d, ok := lock.Context().Deadline()
			if !ok || !d.Equal(want) {
				t.Fatalf("Context().Deadline() = %v, %v; want %v", d.Sub(sent), ok, want.Sub(sent))
			}
			if err := lock.Context().Err(); err != nil {
				t.Fatalf("fresh lock's context: %v", err)
			}
		})
	}
}

// TestHandleLostAtDeadline: without KeepAlive and without Extend, the lock
// is lost when its deadline passes: Lost closes and the Context ends with a
// cause matching ErrLockLost.
func TestHandleLostAtDeadline(t *testing.T) {
	clk := newFakeClock()
	f := &fakeLocker{clk: clk}
	lock, err := Acquire(context.Background(), f, "r", withClock(clk), WithTTL(testTTL))
	if err != nil {
		t.Fatal(err)
	}
	child, cancel := context.WithCancel(lock.Context())
	defer cancel()
	clk.Advance(testTTL - testMargin - time.Millisecond)
	if isClosed(lock.Lost()) || lock.Context().Err() != nil {
		t.Fatal("lost before the deadline")
	}
	clk.Advance(time.Millisecond) // the deadline
	if !isClosed(lock.Lost()) {
		t.Fatal("Lost not closed at the deadline")
	}
	if err := lock.Context().Err(); err != context.Canceled {
		t.Fatalf("Context().Err() = %v", err)
	}
	if cause := context.Cause(lock.Context()); !errors.Is(cause, ErrLockLost) || errors.Is(cause, ErrReleased) {
		t.Fatalf("cause %v, want ErrLockLost", cause)
	}
	if cause := context.Cause(child); !errors.Is(cause, ErrLockLost) {
		t.Fatalf("derived context's cause %v", cause)
	}
	// A lost lock is not extended again (its work has been told to stop).
	if err := lock.Extend(context.Background(), testTTL); !errors.Is(err, ErrLockLost) {
		t.Fatalf("extend after the deadline: %v", err)
	}
	if n := len(f.callsOf("extend")); n != 0 {
		t.Fatalf("%d extends sent after the deadline", n)
	}
	// Unlock still frees it early if the server still has it.
	if err := lock.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(f.callsOf("unlock")) != 1 || !errors.Is(context.Cause(lock.Context()), ErrLockLost) {
		t.Fatal("unlock after the deadline")
	}
}

// TestHandleExtendMovesDeadline: each successful Extend moves the deadline
// to that extend's send time + its ttl − margin (shorter ttls shorten it),
// and a context derived from Context follows.
func TestHandleExtendMovesDeadline(t *testing.T) {
	clk := newFakeClock()
	f := &fakeLocker{clk: clk, latency: 5 * time.Millisecond}
	lock, err := Acquire(context.Background(), f, "r", withClock(clk), WithTTL(testTTL))
	if err != nil {
		t.Fatal(err)
	}
	derived, cancel := context.WithTimeout(lock.Context(), time.Hour)
	defer cancel()
	clk.Advance(4 * time.Second)
	sent := clk.Now()
	if err := lock.Extend(context.Background(), testTTL); err != nil {
		t.Fatal(err)
	}
	want := sent.Add(testTTL - testMargin)
	if got := lock.Expires(); !got.Equal(want) {
		t.Fatalf("Expires after extend: %v, want %v", got.Sub(sent), want.Sub(sent))
	}
	if d, _ := derived.Deadline(); !d.Equal(want) {
		t.Fatalf("derived deadline %v, want %v", d.Sub(sent), want.Sub(sent))
	}
	// Past the first deadline, 10 ms before the new one (each call takes 5 ms).
	clk.Advance(testTTL - testMargin - 5*time.Millisecond - 10*time.Millisecond)
	if isClosed(lock.Lost()) {
		t.Fatal("lost at the first deadline after an extend")
	}
	// An extend with a shorter ttl shortens it (the server's expiry is
	// now + ttl, docs/semantics.md).
	if err := lock.Extend(context.Background(), testTTL); err != nil {
		t.Fatal(err)
	}
	long := lock.Expires()
	sent = clk.Now()
	if err := lock.Extend(context.Background(), time.Second); err != nil {
		t.Fatal(err)
	}
	want = sent.Add(time.Second - (time.Second/100 + 2*time.Millisecond))
	if got := lock.Expires(); !got.Equal(want) || !got.Before(long) {
		t.Fatalf("Expires after a shorter extend: %v, want %v", got.Sub(sent), want.Sub(sent))
	}
	clk.Advance(want.Sub(clk.Now()))
	if !isClosed(lock.Lost()) || !errors.Is(context.Cause(derived), ErrLockLost) {
		t.Fatal("not lost at the shortened deadline")
	}
}

// TestHandleUnlockCauseReleased: after a clean Unlock the Context ends with
// ErrReleased, Lost stays open, the deadline timer is stopped, and the
// handle does not talk to the server again.
func TestHandleUnlockCauseReleased(t *testing.T) {
	clk := newFakeClock()
	f := &fakeLocker{clk: clk}
	lock, err := Acquire(context.Background(), f, "r", withClock(clk), WithTTL(testTTL))
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := lock.Context().Err(); err != context.Canceled {
		t.Fatalf("Context().Err() = %v", err)
	}
	if cause := context.Cause(lock.Context()); !errors.Is(cause, ErrReleased) || errors.Is(cause, ErrLockLost) {
		t.Fatalf("cause %v, want ErrReleased", cause)
	}
	if p := clk.pending(); len(p) != 0 {
		t.Fatalf("timers still set after Unlock: %v", p)
	}
	clk.Advance(2 * testTTL)
	if isClosed(lock.Lost()) {
		t.Fatal("Lost closed after a clean Unlock")
	}
	if err := lock.Extend(context.Background(), testTTL); !errors.Is(err, ErrReleased) {
		t.Fatalf("extend after unlock: %v", err)
	}
	if err := lock.Unlock(context.Background()); err != nil {
		t.Fatalf("second unlock: %v", err)
	}
	if len(f.callsOf("extend")) != 0 || len(f.callsOf("unlock")) != 1 {
		t.Fatalf("calls after release: %d extends, %d unlocks", len(f.callsOf("extend")), len(f.callsOf("unlock")))
	}
}

// TestHandleUnlockAfterUnknown: an Unlock retried after an attempt whose
// outcome was unknown finds the lock gone when that attempt did apply;
// that is a release, not a loss.
func TestHandleUnlockAfterUnknown(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script []fakeAnswer
		lost   bool
	}{
		{"Errored/LockDoesNotExist", []fakeAnswer{{status: Errored}, {status: LockDoesNotExist}}, false},
		{"transport/LockDoesNotExist", []fakeAnswer{{err: errTransport}, {status: MustRetry}, {status: LockDoesNotExist}}, false},
		// Our release applied and a waiter got the lock at once.
		{"Errored/InvalidOwner", []fakeAnswer{{status: Errored}, {status: InvalidOwner}}, false},
		{"Errored/Unlocked", []fakeAnswer{{status: Errored}, {status: Unlocked}}, false},
		// With no unknown attempt before it, the lock was not ours any more.
		{"LockDoesNotExist", []fakeAnswer{{status: LockDoesNotExist}}, true},
		{"MustRetry/LockDoesNotExist", []fakeAnswer{{status: MustRetry}, {status: LockDoesNotExist}}, true},
		{"InvalidOwner", []fakeAnswer{{status: InvalidOwner}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			f := &fakeLocker{clk: clk, script: map[string][]fakeAnswer{"unlock": tc.script}}
			lock, err := Acquire(context.Background(), f, "r", withClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			err = lock.Unlock(context.Background())
			if n := len(f.callsOf("unlock")); n != len(tc.script) {
				t.Fatalf("%d unlock attempts, want %d", n, len(tc.script))
			}
			cause := context.Cause(lock.Context())
			if tc.lost {
				var se *StatusError
				if !errors.Is(err, ErrLockLost) || !errors.As(err, &se) || se.Status != tc.script[len(tc.script)-1].status {
					t.Fatalf("unlock: %v, want ErrLockLost", err)
				}
				if !isClosed(lock.Lost()) || !errors.Is(cause, ErrLockLost) {
					t.Fatalf("lost lock: Lost closed %v, cause %v", isClosed(lock.Lost()), cause)
				}
				return
			}
			if err != nil {
				t.Fatalf("unlock: %v, want success", err)
			}
			if isClosed(lock.Lost()) || !errors.Is(cause, ErrReleased) {
				t.Fatalf("released lock: Lost closed %v, cause %v", isClosed(lock.Lost()), cause)
			}
		})
	}
}

// TestHandleUnlockUnknownOutcome: when the budget ends with the outcome
// still unknown, Unlock says so; the lock is neither released nor lost.
func TestHandleUnlockUnknownOutcome(t *testing.T) {
	clk := newFakeClock()
	f := &fakeLocker{clk: clk, script: map[string][]fakeAnswer{"unlock": answers(Errored, Errored)}}
	lock, err := Acquire(context.Background(), f, "r", withClock(clk), WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	f.latency = 20 * time.Second // two attempts fill the 30 s budget
	err = lock.Unlock(context.Background())
	var se *StatusError
	if !errors.As(err, &se) || se.Status != Errored || se.Op != "unlock" || errors.Is(err, ErrLockLost) {
		t.Fatalf("unlock: %v, want a *StatusError with Errored", err)
	}
	if lock.Context().Err() != nil || isClosed(lock.Lost()) {
		t.Fatal("an unknown unlock outcome ended the lock")
	}
}

// TestHandleExtendAfterUnknown: Extend retries Errored and call errors (an
// extend by the owner is idempotent) and measures the new deadline from the
// attempt that succeeded.
func TestHandleExtendAfterUnknown(t *testing.T) {
	clk := newFakeClock()
	f := &fakeLocker{clk: clk, latency: 10 * time.Millisecond, script: map[string][]fakeAnswer{"extend": {
		{status: Errored}, {err: errTransport}, {status: MustRetry}, {status: Extended},
	}}}
	lock, err := Acquire(context.Background(), f, "r", withClock(clk), WithTTL(testTTL))
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Extend(context.Background(), testTTL); err != nil {
		t.Fatal(err)
	}
	calls := f.callsOf("extend")
	if len(calls) != 4 {
		t.Fatalf("%d extend attempts", len(calls))
	}
	if want := calls[3].at.Add(testTTL - testMargin); !lock.Expires().Equal(want) {
		t.Fatalf("Expires %v after the last attempt's send, want %v", lock.Expires().Sub(calls[3].at), testTTL-testMargin)
	}
	// Extend after an unknown outcome that finds the lock gone: lost.
	f.script["extend"] = append(f.script["extend"], fakeAnswer{status: Errored}, fakeAnswer{status: LockDoesNotExist})
	err = lock.Extend(context.Background(), testTTL)
	var se *StatusError
	if !errors.Is(err, ErrLockLost) || !errors.As(err, &se) || se.Status != LockDoesNotExist || !isClosed(lock.Lost()) {
		t.Fatalf("extend: %v", err)
	}
}

// TestHandleExtendStopsAtDeadline: an Extend still retrying when the lease
// deadline passes stops and reports the loss, not the caller's ctx.
func TestHandleExtendStopsAtDeadline(t *testing.T) {
	clk := newFakeClock()
	f := &fakeLocker{clk: clk, script: map[string][]fakeAnswer{"extend": answers(Errored)}}
	f.hook = func(op string, n int, ctx context.Context) {
		if op == "extend" {
			clk.Advance(testTTL) // the deadline passes while the first attempt is in flight
		}
	}
	lock, err := Acquire(context.Background(), f, "r", withClock(clk), WithTTL(testTTL))
	if err != nil {
		t.Fatal(err)
	}
	err = lock.Extend(context.Background(), testTTL)
	if !errors.Is(err, ErrLockLost) || !isClosed(lock.Lost()) {
		t.Fatalf("extend across the deadline: %v", err)
	}
	if n := len(f.callsOf("extend")); n != 1 {
		t.Fatalf("%d extend attempts after the deadline passed", n)
	}
}

// TestAcquireDeadlineFromEarliestPossiblyApplied: a TryLock by the holder
// does not refresh the lease, so after an attempt with an unknown outcome
// the lease may have started then; the deadline counts from the earliest
// attempt that may have applied, skipping those that certainly did not.
func TestAcquireDeadlineFromEarliestPossiblyApplied(t *testing.T) {
	for _, tc := range []struct {
		name     string
		script   []fakeAnswer
		earliest int // the attempt the deadline counts from
	}{
		{"Locked", nil, 0},
		{"MustRetry/Locked", answers(MustRetry, MustRetry), 2},
		{"MustRetry/Errored/MustRetry/Locked", answers(MustRetry, Errored, MustRetry), 1},
		{"Errored/Errored/Locked", answers(Errored, Errored), 0},
		{"MustRetry/transport/Locked", []fakeAnswer{{status: MustRetry}, {err: errTransport}}, 1},
		{"WaitingForReplication/Locked", answers(WaitingForReplication), 0},
		// Busy: another owner held it then, so an earlier attempt of ours
		// can only have taken effect after that answer.
		{"Errored/Busy/Locked", answers(Errored, Busy), 1},
		{"Busy/MustRetry/Locked", answers(Busy, MustRetry), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			f := &fakeLocker{clk: clk, latency: 100 * time.Millisecond, script: map[string][]fakeAnswer{"trylock": tc.script}}
			lock, err := Acquire(context.Background(), f, "r", withClock(clk), WithTTL(testTTL), WithWait(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			calls := f.callsOf("trylock")
			if len(calls) != len(tc.script)+1 {
				t.Fatalf("%d attempts", len(calls))
			}
			base := calls[0].at
			want := calls[tc.earliest].at.Add(testTTL - testMargin)
			if got := lock.Expires(); !got.Equal(want) {
				t.Fatalf("Expires = first send + %v, want first send + %v (attempt %d)", got.Sub(base), want.Sub(base), tc.earliest)
			}
			clk.Advance(want.Sub(clk.Now()))
			if !isClosed(lock.Lost()) {
				t.Fatal("not lost at the deadline")
			}
		})
	}
}

// TestHandleKeepAliveFromGrant: KeepAlive schedules its extends from the
// grant (the send time of the acquire or last extend), not from its own
// start, and gives up at the lease's deadline, not a fresh one.
func TestHandleKeepAliveFromGrant(t *testing.T) {
	const ttl, every = 3 * time.Second, time.Second
	margin := ttl/100 + 2*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	t.Run("late start", func(t *testing.T) {
		clk := newFakeClock()
		f := &fakeLocker{clk: clk, seen: make(chan string, 16)}
		granted := clk.Now()
		lock, err := Acquire(ctx, f, "r", withClock(clk), WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(2500 * time.Millisecond) // KeepAlive starts late
		lock.KeepAlive(ctx, every)
		waitOp(t, f.seen, "extend") // at once: grant + every has passed
		clk.waitTimer(t, granted.Add(2500*time.Millisecond+every))
		if want := granted.Add(2500*time.Millisecond + ttl - margin); !lock.Expires().Equal(want) {
			t.Fatalf("Expires %v after the grant, want %v", lock.Expires().Sub(granted), want.Sub(granted))
		}
		if err := lock.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("schedule", func(t *testing.T) {
		clk := newFakeClock()
		f := &fakeLocker{clk: clk, seen: make(chan string, 16)}
		granted := clk.Now()
		lock, err := Acquire(ctx, f, "r", withClock(clk), WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(600 * time.Millisecond)
		lock.KeepAlive(ctx, every)
		clk.waitTimer(t, granted.Add(every)) // not 600 ms + every
		clk.Advance(400 * time.Millisecond)
		waitOp(t, f.seen, "extend")
		clk.waitTimer(t, granted.Add(2*every))
		if n := len(f.callsOf("extend")); n != 1 {
			t.Fatalf("%d extends", n)
		}
		lock.KeepAlive(ctx, every) // a second call while one runs does nothing
		if err := lock.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		clk.waitNoTimers(t)
	})

	t.Run("lapse", func(t *testing.T) {
		clk := newFakeClock()
		// Every extend's outcome is unknown: the lease ends at the grant's deadline.
		f := &fakeLocker{clk: clk, seen: make(chan string, 16), rest: map[string]fakeAnswer{"extend": {status: Errored}}}
		granted := clk.Now()
		lock, err := Acquire(ctx, f, "r", withClock(clk), WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(2 * time.Second)
		lock.KeepAlive(ctx, every)
		waitOp(t, f.seen, "extend")
		if !lock.Expires().Equal(granted.Add(ttl-margin)) || isClosed(lock.Lost()) {
			t.Fatal("an unknown extend moved the deadline or lost the lock")
		}
		clk.Advance(ttl - margin - 2*time.Second)
		if !isClosed(lock.Lost()) || !errors.Is(context.Cause(lock.Context()), ErrLockLost) {
			t.Fatal("not lost at the grant's deadline")
		}
		clk.waitNoTimers(t)
	})
}

// TestHandleExtendDuringUnlock: an Extend (KeepAlive's, say) that finds
// the lock gone while an Unlock of it is in flight does not count as a
// loss: the Unlock ends the lock as released.
func TestHandleExtendDuringUnlock(t *testing.T) {
	clk := newFakeClock()
	unlocking := make(chan struct{})
	answer := make(chan struct{})
	f := &fakeLocker{clk: clk, script: map[string][]fakeAnswer{"extend": answers(LockDoesNotExist)}}
	f.hook = func(op string, n int, _ context.Context) {
		if op == "unlock" {
			close(unlocking)
			<-answer // the unlock has applied; its answer is on its way
		}
	}
	lock, err := Acquire(context.Background(), f, "r", withClock(clk), WithTTL(testTTL))
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- lock.Unlock(context.Background()) }()
	<-unlocking
	err = lock.Extend(context.Background(), testTTL)
	if !errors.Is(err, ErrLockLost) {
		t.Fatalf("extend of an unlocked lock: %v", err)
	}
	if isClosed(lock.Lost()) || lock.Context().Err() != nil {
		t.Fatal("an extend racing Unlock lost the lock")
	}
	close(answer)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if isClosed(lock.Lost()) || !errors.Is(context.Cause(lock.Context()), ErrReleased) {
		t.Fatalf("Lost closed %v, cause %v", isClosed(lock.Lost()), context.Cause(lock.Context()))
	}
}

// Node-backed tests: the handle over the embedded node's real semantics.

// nodeClock is the node's clock in these tests: it only moves when told.
type nodeClock struct{ now atomic.Pointer[time.Time] }

func newNodeClock() *nodeClock {
	c := &nodeClock{}
	t := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	c.now.Store(&t)
	return c
}
func (c *nodeClock) Now() time.Time          { return *c.now.Load() }
func (c *nodeClock) Advance(d time.Duration) { t := c.Now().Add(d); c.now.Store(&t) }

func openHandleNode(t testing.TB, cfg Config) *Node {
	t.Helper()
	n, err := Open(cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = n.Close() })
	return n
}

func TestHandleOnNode(t *testing.T) {
	nodeClk := newNodeClock()
	n := openHandleNode(t, Config{Clock: nodeClk.Now})
	ctx := context.Background()
	for _, d := range []Durability{Ephemeral, Persistent} {
		t.Run(d.String(), func(t *testing.T) {
			// The handles' clock stands still, so only the node's answers
			// end these leases.
			clk := newFakeClock()
			res := "handle/" + d.String()
			a, err := Acquire(ctx, n, res, WithTTL(time.Second), WithDurability(d), withClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			if a.Resource() != res || len(a.Owner()) != 32 || a.FencingToken() != 0 || a.Durability() != d {
				t.Fatalf("handle %q owner %q token %d", a.Resource(), a.Owner(), a.FencingToken())
			}
			_, err = Acquire(ctx, n, res, WithDurability(d), withClock(clk))
			if !errors.Is(err, ErrBusy) {
				t.Fatalf("second acquire: %v, want ErrBusy", err)
			}
			if err := a.Extend(ctx, 2*time.Second); err != nil {
				t.Fatal(err)
			}
			nodeClk.Advance(3 * time.Second) // a's lease lapses on the node
			err = a.Extend(ctx, time.Second)
			var se *StatusError
			if !errors.Is(err, ErrLockLost) || !errors.As(err, &se) || se.Status != LockDoesNotExist {
				t.Fatalf("extend after lapse: %v", err)
			}
			if !isClosed(a.Lost()) || !errors.Is(context.Cause(a.Context()), ErrLockLost) {
				t.Fatal("a lost extend did not end the lock")
			}
			b, err := Acquire(ctx, n, res, WithDurability(d), WithOwner([]byte("bee")), withClock(clk))
			if err != nil || b.FencingToken() != 1 || string(b.Owner()) != "bee" {
				t.Fatalf("acquire after lapse: %v", err)
			}
			if err := a.Unlock(ctx); !errors.Is(err, ErrLockLost) || !errors.As(err, &se) || se.Status != InvalidOwner {
				t.Fatalf("unlock by the lost owner: %v", err)
			}
			if err := b.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if !errors.Is(context.Cause(b.Context()), ErrReleased) || isClosed(b.Lost()) {
				t.Fatalf("released lock's cause: %v", context.Cause(b.Context()))
			}
		})
	}
}

// busySignal tells when a TryLock through it was refused as Busy.
type busySignal struct {
	Locker
	busy chan struct{}
}

func (b *busySignal) TryLock(ctx context.Context, resource string, owner []byte, ttl time.Duration, d Durability) (Result, error) {
	r, err := b.Locker.TryLock(ctx, resource, owner, ttl, d)
	if r.Status == Busy {
		select {
		case b.busy <- struct{}{}:
		default:
		}
	}
	return r, err
}

func TestAcquireWaitsForRelease(t *testing.T) {
	n := openHandleNode(t, Config{})
	waiter := &busySignal{Locker: n, busy: make(chan struct{}, 1)}
	ctx := context.Background()
	first, err := Acquire(ctx, n, "wait/r", WithDurability(Ephemeral))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lock, 1)
	errc := make(chan error, 1)
	go func() {
		l, err := Acquire(ctx, waiter, "wait/r", WithDurability(Ephemeral), WithWait(10*time.Second))
		got <- l
		errc <- err
	}()
	<-waiter.busy // the waiter was refused at least once
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l.FencingToken() != 1 {
		t.Fatalf("token %d, want 1", l.FencingToken())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestAcquireWaitReturnsCtxErr(t *testing.T) {
	n := openHandleNode(t, Config{})
	ctx := context.Background()
	held, err := Acquire(ctx, n, "ctx/r")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Unlock(ctx) }()
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := Acquire(cctx, n, "ctx/r", WithWait(time.Hour))
		errc <- err
	}()
	cancel()
	if err := <-errc; err != context.Canceled {
		t.Fatalf("got %v, want context.Canceled unchanged", err)
	}
}

// heldExtends holds every Extend of one ttl: the call reaches the Locker
// (arrived is told) but is not delivered until the test calls deliver,
// long after the handle's own call ended with its context, as a batch
// stream or a forward hop can deliver a request late.
type heldExtends struct {
	Locker
	ttl     time.Duration
	arrived chan struct{}
	mu      sync.Mutex
	held    []func()
}

func (h *heldExtends) Extend(ctx context.Context, resource string, owner []byte, ttl time.Duration, d Durability) (Result, error) {
	if ttl != h.ttl {
		return h.Locker.Extend(ctx, resource, owner, ttl, d)
	}
	owner = append([]byte(nil), owner...)
	h.mu.Lock()
	h.held = append(h.held, func() { _, _ = h.Locker.Extend(context.Background(), resource, owner, ttl, d) })
	h.mu.Unlock()
	h.arrived <- struct{}{}
	<-ctx.Done()
	return Result{}, ctx.Err()
}

// deliver applies the held Extends now.
func (h *heldExtends) deliver() {
	h.mu.Lock()
	held := h.held
	h.held = nil
	h.mu.Unlock()
	for _, f := range held {
		f()
	}
}

// TestHandleLateShortExtend: an Extend with a short ttl whose outcome is
// unknown (its call ended with its context while the request was still on
// its way) may apply after a later, longer Extend, and the server's lease
// then ends the short ttl after that late apply. The handle's deadline
// must never be later than that: another owner may be granted the lock
// from then on.
func TestHandleLateShortExtend(t *testing.T) {
	for _, d := range []Durability{Ephemeral, Persistent} {
		t.Run(d.String(), func(t *testing.T) {
			nodeClk := newNodeClock()
			n := openHandleNode(t, Config{Clock: nodeClk.Now})
			clk := newFakeClock()
			step := func(dt time.Duration) { nodeClk.Advance(dt); clk.Advance(dt) }
			short := 500 * time.Millisecond
			h := &heldExtends{Locker: n, ttl: short, arrived: make(chan struct{}, 1)}
			ctx := context.Background()
			res := "late-extend/" + d.String()
			a, err := Acquire(ctx, h, res, WithTTL(2*time.Second), WithDurability(d), withClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			step(100 * time.Millisecond)
			ectx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- a.Extend(ectx, short) }()
			<-h.arrived
			cancel() // the caller gives up: the request is still on its way
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("short extend: %v, want context.Canceled", err)
			}
			step(100 * time.Millisecond)
			if err := a.Extend(ctx, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			step(100 * time.Millisecond)
			h.deliver() // the short extend applies now: the lease ends 500 ms from here
			step(short + time.Millisecond)
			b, err := n.TryLock(ctx, res, []byte("bee"), time.Minute, d)
			if err != nil || b.Status != Locked {
				t.Fatalf("another owner's TryLock after the late extend's lease: %+v %v", b, err)
			}
			if held := clk.Now().Before(a.Expires()); held || !isClosed(a.Lost()) {
				t.Fatalf("two holders: bee got token %d while a's handle holds until %v from now (lost: %v)",
					b.FencingToken, a.Expires().Sub(clk.Now()), isClosed(a.Lost()))
			}
		})
	}
}

// TestHandleErrAtDeadlineBeforeTimer: once the deadline has passed, the
// Context's Err reports the loss even if the deadline timer has not run
// yet (a process resumed from a pause runs its own code first): a holder
// that checks Err before acting never acts past the deadline.
func TestHandleErrAtDeadlineBeforeTimer(t *testing.T) {
	clk := newFakeClock()
	f := &fakeLocker{clk: clk}
	lock, err := Acquire(context.Background(), f, "r", withClock(clk), WithTTL(testTTL))
	if err != nil {
		t.Fatal(err)
	}
	clk.mu.Lock()
	clk.now = lock.Expires() // time moves on; the timer has not fired
	clk.mu.Unlock()
	if err := lock.Context().Err(); err == nil {
		t.Fatal("Context().Err() is nil at the deadline, before the timer fired")
	}
	if !errors.Is(context.Cause(lock.Context()), ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", context.Cause(lock.Context()))
	}
	if !isClosed(lock.Lost()) {
		t.Fatal("Lost open after Err reported the deadline")
	}
}
