package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna/lease"
)

func TestJain(t *testing.T) {
	for _, c := range []struct {
		grants []int64
		want   float64
	}{
		{[]int64{5, 5, 5, 5}, 1},
		{[]int64{8, 0, 0, 0}, 0.25},               // one took all: 1/n
		{[]int64{1, 1, 1, 1, 1, 1, 1, 283}, 0.13}, // the embedded run before the wait queue existed
		{[]int64{2, 1}, 0.9},
		{[]int64{0, 0}, 0}, // no grants: undefined, reported 0
	} {
		if got := jain(c.grants); math.Abs(got-c.want) > 0.005 {
			t.Errorf("jain(%v) = %.4f, want %.2f", c.grants, got, c.want)
		}
	}
}

// From the Unlock call: a grant before the Unlock returned is measured
// from the call, not clamped to 0; a grant after it returned counts from
// the call too.
func TestHandoffFromTheUnlockCall(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	h := newHandoffs(1)
	h.fromCall = true
	h.acquired(0, 1, at(0))
	h.releasingAt(0, 1, at(10))
	if d, ok := h.acquired(0, 2, at(13)); !ok || d != 3*time.Millisecond {
		t.Errorf("grant while the Unlock is in flight = %v %v, want 3ms from the call", d, ok)
	}
	h.released(0, 1, at(14), true) // late news: worker 2 holds it, nothing changes
	h.releasingAt(0, 2, at(20))
	h.released(0, 2, at(22), true)
	if d, ok := h.acquired(0, 3, at(25)); !ok || d != 5*time.Millisecond {
		t.Errorf("grant after the Unlock returned = %v %v, want 5ms from the call", d, ok)
	}
	h.releasingAt(0, 3, at(30))
	h.released(0, 3, at(31), true)
	if _, ok := h.acquired(0, 3, at(32)); ok {
		t.Error("the releaser taking it back is not a hand-off")
	}
	h.releasingAt(0, 3, at(40))
	h.released(0, 3, at(41), false) // Unlock failed: held until the lease lapses
	if _, ok := h.acquired(0, 4, at(5040)); ok {
		t.Error("taking a lapsed lease is not a hand-off")
	}
}

// fifoLocker is a fake WaitLocker with a FIFO queue: Unlock hands the
// lock to the head waiter after serviceDelay (the service's hand-off
// time), or frees it. TryLock, Extend and Get are not used by hot-wait on
// a WaitLocker; the first counts, so a test sees if it is called.
type fifoLocker struct {
	serviceDelay time.Duration
	mu           sync.Mutex
	holder       string
	queue        []fifoWaiter
	tryLocks     atomic.Int64
}

type fifoWaiter struct {
	owner string
	grant chan struct{}
}

func (f *fifoLocker) Lock(ctx context.Context, _ string, owner []byte, _, wait time.Duration, _ lease.Durability) (lease.Result, error) {
	f.mu.Lock()
	if f.holder == "" {
		f.holder = string(owner)
		f.mu.Unlock()
		return lease.Result{Status: lease.Locked}, nil
	}
	w := fifoWaiter{string(owner), make(chan struct{})}
	f.queue = append(f.queue, w)
	f.mu.Unlock()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-w.grant:
		return lease.Result{Status: lease.Locked}, nil
	case <-timer.C:
	case <-ctx.Done():
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, q := range f.queue {
		if q.grant == w.grant {
			f.queue = append(f.queue[:i], f.queue[i+1:]...)
			if ctx.Err() != nil {
				return lease.Result{}, ctx.Err()
			}
			return lease.Result{Status: lease.Busy}, nil
		}
	}
	return lease.Result{Status: lease.Locked}, nil // granted as it gave up
}

func (f *fifoLocker) Unlock(context.Context, string, []byte, lease.Durability) (lease.Result, error) {
	time.Sleep(f.serviceDelay)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.holder = ""
	if len(f.queue) > 0 {
		w := f.queue[0]
		f.queue = f.queue[1:]
		f.holder = w.owner
		close(w.grant)
	}
	return lease.Result{Status: lease.Unlocked}, nil
}

func (f *fifoLocker) TryLock(context.Context, string, []byte, time.Duration, lease.Durability) (lease.Result, error) {
	f.tryLocks.Add(1)
	return lease.Result{Status: lease.Busy}, nil
}

func (f *fifoLocker) Extend(context.Context, string, []byte, time.Duration, lease.Durability) (lease.Result, error) {
	return lease.Result{Status: lease.Extended}, nil
}

func (f *fifoLocker) Get(context.Context, string, lease.Durability) (lease.LockInfo, lease.Result, error) {
	return lease.LockInfo{}, lease.Result{Status: lease.Got}, nil
}

func hotWaitConfig(contenders int, hold time.Duration) *Config {
	c := testConfig(WorkloadHotWait)
	c.Concurrency, c.Hold, c.Wait, c.Duration = contenders, hold, time.Second, 300*time.Millisecond
	c.Timeout = 5 * time.Second
	return c
}

// On a WaitLocker, every acquire is one Lock call: two client calls per
// grant, grants shared evenly by the FIFO, and every grant after the
// first a hand-off that takes at least the service's hand-off time.
func TestHotWaitOnAWaitLocker(t *testing.T) {
	const delay = 2 * time.Millisecond
	f := &fifoLocker{serviceDelay: delay}
	res := run(t, hotWaitConfig(4, time.Millisecond), fakeTarget("fifo", f))
	w := res.Wait
	if w == nil || !w.WaitLocker {
		t.Fatalf("wait summary %+v: want one of a WaitLocker", w)
	}
	if f.tryLocks.Load() != 0 {
		t.Errorf("%d TryLocks on a WaitLocker: want Lock only", f.tryLocks.Load())
	}
	grant, _ := rowOf(res, rowGrant)
	hand, _ := rowOf(res, rowHandoff)
	var total int64
	for _, g := range w.Grants {
		total += g
	}
	if grant.Count == 0 || total != grant.Count {
		t.Fatalf("grants per contender %v (sum %d), grant row %d", w.Grants, total, grant.Count)
	}
	if w.Jain < 0.95 {
		t.Errorf("FIFO grants %v: Jain %.3f, want ≥ 0.95", w.Grants, w.Jain)
	}
	if w.Counted != clientCalls || w.RequestsPerGrant != 2 {
		t.Errorf("requests per grant %.2f (%s): want 2 client calls (Lock + Unlock)", w.RequestsPerGrant, w.Counted)
	}
	if hand.Count < grant.Count-int64(len(w.Grants)) {
		t.Errorf("%d hand-offs for %d grants: every grant after a release by another is one", hand.Count, grant.Count)
	}
	// A hand-off takes at least the service's hand-off time (the Unlock
	// sleeps it before it grants), and is the last part of a wait: the
	// contender granted is the queue's head, which was waiting before the
	// holder called Unlock, so its hand-off lies within its wait, and the
	// median hand-off is no longer than the median wait.
	if hand.P50 < delay || hand.P50 > grant.P50 {
		t.Errorf("hand-off p50 %v: want the Unlock's %v and a little, within the grant p50 %v", hand.P50, delay, grant.P50)
	}
	// The wait of a contender is the others' holds before it: ≥ 3 of them
	// at the median with 4 in the queue.
	if grant.P50 < 3*(time.Millisecond+delay) {
		t.Errorf("grant p50 %v: want about 3 holds of %v", grant.P50, time.Millisecond+delay)
	}
	if grant.Misses != 0 || grant.Errors != 0 {
		t.Errorf("grant row %+v", grant)
	}
}

// On a plain Locker the harness polls: the waiters' TryLocks during each
// 5 ms hold add to the TryLock + Unlock of the grant, and the mutex
// baseline's releaser, which never sleeps, takes the lock straight back:
// the unfairness Jain shows.
func TestHotWaitPollsAPlainLocker(t *testing.T) {
	res := run(t, hotWaitConfig(4, 5*time.Millisecond), MutexTarget())
	w := res.Wait
	if w == nil || w.WaitLocker {
		t.Fatalf("wait summary %+v: want a polled one", w)
	}
	grant, _ := rowOf(res, rowGrant)
	if grant.Count == 0 || grant.Errors != 0 {
		t.Fatalf("grant row %+v", grant)
	}
	if w.RequestsPerGrant <= 2.1 {
		t.Errorf("requests per grant %.2f: 3 polling waiters must send more than TryLock + Unlock", w.RequestsPerGrant)
	}
	if w.Jain > 0.9 {
		t.Errorf("grants %v, Jain %.3f: a releaser that never sleeps should win almost always", w.Grants, w.Jain)
	}
}

// A poll that finds the lock held for the whole wait is a miss, after a
// few jittered retries, not an error.
func TestHotWaitPollGivesUp(t *testing.T) {
	c := hotWaitConfig(1, 0)
	c.Wait = 20 * time.Millisecond
	res := run(t, c, fakeTarget("busy", &fakeLocker{status: lease.Busy}))
	grant, _ := rowOf(res, rowGrant)
	if grant.Misses == 0 || grant.Count != 0 || grant.Errors != 0 {
		t.Fatalf("grant row %+v: want misses only", grant)
	}
	// Backoff 1, 2, 4, 8, … ms, jittered to half: a 20 ms wait is at most
	// ~10 polls, never a busy loop.
	if perMiss := float64(res.Wait.Requests) / float64(grant.Misses); perMiss < 3 || perMiss > 12 {
		t.Errorf("%.1f TryLocks per 20 ms wait", perMiss)
	}
}

// A system that counts at the service is believed over the harness's
// count of its own calls.
func TestHotWaitUsesTheServiceCount(t *testing.T) {
	n := new(atomic.Int64)
	f := &fifoLocker{}
	target := Target{Name: "counted", Open: func(context.Context, Settings) (System, error) {
		return Counted{System: Shared{L: serverCounted{f, n}}, N: n, What: "fake server"}, nil
	}}
	res := run(t, hotWaitConfig(2, time.Millisecond), target)
	if res.Wait.Counted != "fake server" || res.Wait.Requests == 0 {
		t.Fatalf("wait %+v", res.Wait)
	}
	// Each grant is a Lock and an Unlock, each counted 3 times by this
	// fake "server" (a retrying client, say): the ratio is the server's.
	if r := res.Wait.RequestsPerGrant; r < 5.5 || r > 6.5 {
		t.Errorf("requests per grant %.2f, want 6", r)
	}
}

type serverCounted struct {
	*fifoLocker
	n *atomic.Int64
}

func (s serverCounted) Lock(ctx context.Context, res string, owner []byte, ttl, wait time.Duration, d lease.Durability) (lease.Result, error) {
	s.n.Add(3)
	return s.fifoLocker.Lock(ctx, res, owner, ttl, wait, d)
}

func (s serverCounted) Unlock(ctx context.Context, res string, owner []byte, d lease.Durability) (lease.Result, error) {
	s.n.Add(3)
	return s.fifoLocker.Unlock(ctx, res, owner, d)
}

func TestCountCallsKeepsWaitLocker(t *testing.T) {
	n := new(atomic.Int64)
	measured := false
	l := countCalls(&fifoLocker{}, n, &measured)
	wl, ok := l.(lease.WaitLocker)
	if !ok {
		t.Fatal("a counted WaitLocker lost Lock")
	}
	if _, ok := countCalls(NewMutexLocker(), n, &measured).(lease.WaitLocker); ok {
		t.Error("a counted plain Locker gained Lock")
	}
	ctx := context.Background()
	_, _ = wl.Lock(ctx, "k", []byte("a"), time.Second, 0, lease.Ephemeral) // warmup: not counted
	measured = true
	_, _ = l.Unlock(ctx, "k", []byte("a"), lease.Ephemeral)
	_, _ = wl.Lock(ctx, "k", []byte("a"), time.Second, 0, lease.Ephemeral)
	if n.Load() != 2 {
		t.Errorf("counted %d calls, want the 2 made while measured", n.Load())
	}
}

// The real node, side by side ephemeral and persistent in one run, as the
// docs/benchmarks.md's figures are: Main with NAME:durability specs, the JSON report's
// wait figures, and the node's own request count.
func TestMainHotWaitEmbeddedSideBySide(t *testing.T) {
	var stdout, stderr bytes.Buffer
	p := Program{Name: "kahuna-bench", Targets: DefaultTargets()}
	code := Main(context.Background(), []string{"--workload", "hot-wait", "--compare", "embedded:ephemeral,embedded:persistent",
		"--concurrency", "4", "--hold", "2ms", "--duration", "400ms", "--warmup", "100ms", "--format", "json", "--progress=false"}, &stdout, &stderr, p)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	var out struct {
		Runs []struct {
			Target string
			Wait   struct {
				Grants           []int64 `json:"grantsPerContender"`
				Jain             float64
				RequestsPerGrant float64
				Counted          string
				WaitLocker       bool
			}
		}
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Runs) != 2 || out.Runs[0].Target != "embedded:ephemeral" || out.Runs[1].Target != "embedded:persistent" {
		t.Fatalf("runs %+v", out.Runs)
	}
	for _, r := range out.Runs {
		w := r.Wait
		if !w.WaitLocker || w.Counted != observed || len(w.Grants) != 4 {
			t.Errorf("%s: %+v", r.Target, w)
		}
		// The node's FIFO queue: fair, one Lock and one Unlock per grant.
		if w.Jain < 0.9 || w.RequestsPerGrant < 1.8 || w.RequestsPerGrant > 2.3 {
			t.Errorf("%s: Jain %.3f, %.2f requests per grant", r.Target, w.Jain, w.RequestsPerGrant)
		}
	}
}

// A target that cannot open is reported skipped and fails the run.
func TestMainSkipsATargetThatCannotOpen(t *testing.T) {
	var stdout, stderr bytes.Buffer
	reg := append(DefaultTargets(), Target{Name: "absent", Open: func(context.Context, Settings) (System, error) {
		return nil, errors.New("connection refused")
	}})
	code := Main(context.Background(), []string{"--workload", "hot-wait", "--compare", "mutex,absent", "--concurrency", "2",
		"--duration", "50ms", "--warmup", "0s", "--progress=false"}, &stdout, &stderr, Program{Name: "kahuna-bench", Targets: reg})
	if code != 1 {
		t.Errorf("exit %d, want 1: a skipped target is not a pass", code)
	}
	if !strings.Contains(stdout.String(), "== absent: SKIPPED, not measured: connection refused") {
		t.Errorf("report:\n%s", stdout.String())
	}
	if !strings.Contains(stdout.String(), "== hot-wait") || strings.Contains(stdout.String(), "\n      absent ") {
		t.Errorf("hot-wait table should list the measured targets only:\n%s", stdout.String())
	}
}
