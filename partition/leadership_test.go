package partition

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna/durability"
)

// fakeProver fences and confirms on command.
type fakeProver struct {
	mu        sync.Mutex
	fenceErr  error
	confirmOK atomic.Bool
	fenced    []uint64 // terms fenced
	confirms  atomic.Int64
	ttlRaises atomic.Int64
}

func (f *fakeProver) Fence(_ context.Context, _ int, term uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fenceErr != nil {
		return f.fenceErr
	}
	f.fenced = append(f.fenced, term)
	return nil
}

func (f *fakeProver) TokenReach(int) (int64, error)                    { return 0, nil }
func (f *fakeProver) EphemeralGrace(int) (time.Duration, error)        { return 0, nil }
func (f *fakeProver) HandedOver(int) ([]durability.HandedLease, error) { return nil, nil }
func (f *fakeProver) RaiseEphemeralTTL(context.Context, int, uint64, time.Duration) error {
	f.ttlRaises.Add(1)
	return nil
}
func (f *fakeProver) RaiseReach(context.Context, int, uint64, int64) error { return nil }

func (f *fakeProver) Confirm(context.Context, int, uint64) error {
	f.confirms.Add(1)
	if f.confirmOK.Load() {
		return nil
	}
	return errors.New("no quorum")
}

type fakePurger struct{ drops atomic.Int64 }

func (p *fakePurger) DropPartition(context.Context, int) error                     { p.drops.Add(1); return nil }
func (p *fakePurger) Install(context.Context, int, []durability.HandedLease) error { return nil }

// eventually polls cond until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(time.Millisecond)
	}
}

func serving(l *Leadership, p int) bool { _, ok := l.Serving(p); return ok }

func TestLeaseFor(t *testing.T) {
	if got, want := LeaseFor(10*time.Millisecond, 10), 69200*time.Microsecond; got != want {
		t.Fatalf("LeaseFor(10ms, 10) = %v, want %v", got, want)
	}
	if got := LeaseFor(10*time.Millisecond, 2); got != 0 {
		t.Fatalf("LeaseFor with no room = %v, want 0", got)
	}
}

// A gained partition is served only after its fence, in the fenced term,
// and stops being served when the lease cannot be renewed.
func TestLeadershipServesUnderLease(t *testing.T) {
	prover, purge := &fakeProver{}, &fakePurger{}
	prover.confirmOK.Store(true)
	l := NewLeadership(2, Options{Lease: 40 * time.Millisecond})
	l.Start(prover, purge)
	defer l.Close()
	l.Observe(durability.LeaderEvent{Partition: 1, LeaderID: 1, Term: 7, IsSelf: true})
	eventually(t, 5*time.Second, "serving after the fence", func() bool { return serving(l, 1) })
	if term, _ := l.Serving(1); term != 7 {
		t.Fatalf("serving term %d, want 7", term)
	}
	if serving(l, 0) {
		t.Fatal("partition 0 served without an event")
	}
	// Renewals keep it served well past one lease.
	start := prover.confirms.Load()
	eventually(t, 5*time.Second, "several renewals", func() bool { return prover.confirms.Load() >= start+8 })
	if !serving(l, 1) {
		t.Fatal("lease lapsed while renewals succeeded")
	}
	// No quorum: the lease runs out on its own, with no event.
	prover.confirmOK.Store(false)
	eventually(t, time.Second, "lease lapse", func() bool { return !serving(l, 1) })
	// A quorum again: served again, same term.
	prover.confirmOK.Store(true)
	eventually(t, time.Second, "lease renewed", func() bool { return serving(l, 1) })
	// Losing leadership stops serving at once.
	l.Observe(durability.LeaderEvent{Partition: 1, LeaderID: 2, Term: 8})
	if serving(l, 1) {
		t.Fatal("served after another leader was announced")
	}
}

// With every renewal failing, the lease is over three leases later (on
// clocks the test moves); UnsafeNoLease serves regardless.
func TestLeadershipNoLeaseNegativeControl(t *testing.T) {
	for _, noLease := range []bool{false, true} {
		clocks := &fakeClocks{}
		l := NewLeadership(1, Options{Lease: 20 * time.Millisecond, UnsafeNoLease: noLease})
		l.clock = clocks.read
		l.Start(&fakeProver{}, &fakePurger{})
		l.Observe(durability.LeaderEvent{Partition: 0, LeaderID: 1, Term: 3, IsSelf: true})
		eventually(t, 5*time.Second, "serving", func() bool { return serving(l, 0) })
		clocks.run(60 * time.Millisecond) // three leases with every renewal failing
		switch got := serving(l, 0); {
		case noLease && !got:
			t.Error("UnsafeNoLease must serve on the leader flag alone")
		case !noLease && got:
			t.Error("served three leases after the last renewal")
		}
		l.Close()
	}
}

func TestLeadershipNotServedWithoutFence(t *testing.T) {
	prover := &fakeProver{fenceErr: errors.New("marker rejected")}
	clocks := &fakeClocks{}
	l := NewLeadership(1, Options{})
	l.clock = clocks.read
	l.Start(prover, &fakePurger{})
	defer l.Close()
	l.Observe(durability.LeaderEvent{Partition: 0, LeaderID: 1, Term: 3, IsSelf: true})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := l.WaitReady(ctx); err == nil || serving(l, 0) {
		t.Fatal("served a partition whose fence failed")
	}
	prover.mu.Lock()
	prover.fenceErr = nil
	prover.mu.Unlock()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	if err := l.WaitReady(ctx2); err != nil || !serving(l, 0) {
		t.Fatalf("not served once the fence succeeds (retried): %v", err)
	}
	// A single voter (Lease 0) needs no renewal: an hour later (on clocks
	// the test moves; the renewal loop does not run without a lease) it
	// still serves.
	clocks.run(time.Hour)
	if !serving(l, 0) {
		t.Fatal("lease-less leadership lapsed")
	}
}

// Relinquish drops the lease before a transfer and keeps it dropped for the
// grace, however many renewals would succeed, then renews again.
func TestLeadershipRelinquish(t *testing.T) {
	prover := &fakeProver{}
	prover.confirmOK.Store(true)
	l := NewLeadership(1, Options{Lease: 40 * time.Millisecond, TransferGrace: 300 * time.Millisecond})
	l.Start(prover, &fakePurger{})
	defer l.Close()
	l.Observe(durability.LeaderEvent{Partition: 0, LeaderID: 1, Term: 3, IsSelf: true})
	eventually(t, 5*time.Second, "serving", func() bool { return serving(l, 0) })
	at := time.Now()
	if term, ok := l.Relinquish(0); !ok || term != 3 {
		t.Fatalf("Relinquish of a served partition = term %d, %v; want 3, true", term, ok)
	}
	if serving(l, 0) {
		t.Fatal("served right after Relinquish")
	}
	// The same event again (a duplicate) must not restore the lease either.
	l.Observe(durability.LeaderEvent{Partition: 0, LeaderID: 1, Term: 3, IsSelf: true})
	eventually(t, 5*time.Second, "served again after the grace", func() bool { return serving(l, 0) })
	if waited := time.Since(at); waited < 300*time.Millisecond {
		t.Fatalf("served again after %v, before the grace", waited)
	}
	if _, ok := l.Relinquish(0); ok && serving(l, 0) {
		t.Fatal("second Relinquish kept serving")
	}
}

// RelinquishSteady refuses while a membership change is pending or a
// transfer was just requested, and a Suspend is refused while a transfer
// it may race is fresh: a balancing move and a membership change of one
// partition never overlap.
func TestLeadershipRelinquishSteady(t *testing.T) {
	prover := &fakeProver{}
	prover.confirmOK.Store(true)
	l := NewLeadership(1, Options{Lease: 40 * time.Millisecond, TransferGrace: 300 * time.Millisecond})
	l.Start(prover, &fakePurger{})
	defer l.Close()
	if _, ok := l.RelinquishSteady(0); ok {
		t.Fatal("RelinquishSteady of a partition not served")
	}
	l.Observe(durability.LeaderEvent{Partition: 0, LeaderID: 1, Term: 3, IsSelf: true})
	eventually(t, 5*time.Second, "serving", func() bool { return serving(l, 0) })
	term, ok := l.Suspend(0)
	if !ok {
		t.Fatal("Suspend of a served partition refused")
	}
	if _, ok := l.RelinquishSteady(0); ok {
		t.Fatal("RelinquishSteady during a membership change")
	}
	l.Resume(0, term)
	eventually(t, 5*time.Second, "serving after Resume", func() bool { return serving(l, 0) })
	if term, ok := l.RelinquishSteady(0); !ok || term != 3 {
		t.Fatal("RelinquishSteady of a steady partition refused")
	}
	if serving(l, 0) {
		t.Fatal("served right after RelinquishSteady")
	}
	if _, ok := l.RelinquishSteady(0); ok {
		t.Fatal("second RelinquishSteady within the grace")
	}
	if _, ok := l.Suspend(0); ok {
		t.Fatal("Suspend right after a transfer was requested")
	}
	eventually(t, 5*time.Second, "served again after the grace", func() bool { return serving(l, 0) })
	if _, ok := l.Suspend(0); !ok {
		t.Fatal("Suspend refused after the grace")
	}
}

// RelinquishAgain, a move asked once more, refuses while a membership
// change is pending and for another term, and otherwise stops serving for
// the grace.
func TestLeadershipRelinquishAgain(t *testing.T) {
	prover := &fakeProver{}
	prover.confirmOK.Store(true)
	l := NewLeadership(1, Options{Lease: 40 * time.Millisecond, TransferGrace: 300 * time.Millisecond})
	l.Start(prover, &fakePurger{})
	defer l.Close()
	if l.RelinquishAgain(0, 3) {
		t.Fatal("RelinquishAgain of a partition without a reign")
	}
	l.Observe(durability.LeaderEvent{Partition: 0, LeaderID: 1, Term: 3, IsSelf: true})
	eventually(t, 5*time.Second, "serving", func() bool { return serving(l, 0) })
	term, ok := l.Suspend(0)
	if !ok {
		t.Fatal("Suspend of a served partition refused")
	}
	if l.RelinquishAgain(0, term) {
		t.Fatal("RelinquishAgain during a membership change")
	}
	l.Resume(0, term)
	eventually(t, 5*time.Second, "serving after Resume", func() bool { return serving(l, 0) })
	if l.RelinquishAgain(0, term+1) {
		t.Fatal("RelinquishAgain for another term")
	}
	if !l.RelinquishAgain(0, term) {
		t.Fatal("RelinquishAgain of the reign's term refused")
	}
	if serving(l, 0) {
		t.Fatal("served right after RelinquishAgain")
	}
	if _, ok := l.Suspend(0); ok {
		t.Fatal("Suspend right after a move was asked again")
	}
	eventually(t, 5*time.Second, "served again after the grace", func() bool { return serving(l, 0) })
}

func TestTakeoverWaitFor(t *testing.T) {
	rtt := 10 * time.Millisecond
	if got, want := TakeoverWaitFor(rtt, 10), 101*time.Millisecond; got != want {
		t.Fatalf("TakeoverWaitFor(10ms, 10) = %v, want %v", got, want)
	}
	// The wait must outlast the lease by the ticks the lease gives up, on
	// the slowest clock against the fastest.
	if w, d := TakeoverWaitFor(rtt, 10), LeaseFor(rtt, 10); float64(w)*(1-leaseDrift) <= float64(d)*(1+leaseDrift) {
		t.Fatalf("takeover wait %v does not outlast lease %v with drift", w, d)
	}
}

// A new leader serves only once its takeover wait is over, counted from
// the start of its takeover; its lease is renewed meanwhile, its reign
// begins once (the OnServe hook), and WaitReady waits for it.
func TestLeadershipTakeoverWait(t *testing.T) {
	prover, purge := &fakeProver{}, &fakePurger{}
	prover.confirmOK.Store(true)
	const wait = 300 * time.Millisecond
	var began atomic.Int64 // mono instant of the reign's start
	var l *Leadership
	l = NewLeadership(1, Options{Lease: 40 * time.Millisecond, TakeoverWait: wait, OnServe: func(_ int, _ uint64, serve func()) {
		serve()
		began.Add(l.mono())
	}})
	l.Start(prover, purge)
	defer l.Close()
	observed := l.mono()
	l.Observe(durability.LeaderEvent{Partition: 0, LeaderID: 1, Term: 3, IsSelf: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.WaitReady(ctx); err != nil {
		t.Fatalf("WaitReady: %v", err)
	}
	start := began.Load()
	if start == 0 {
		t.Fatal("WaitReady returned before the reign began")
	}
	if got := time.Duration(start - observed); got < wait {
		t.Fatalf("served %v after the leader event, want at least the takeover wait %v", got, wait)
	}
	if !serving(l, 0) {
		t.Fatal("not serving after the wait, with the lease renewed meanwhile")
	}
	// A repeated event of the same term does not start another wait.
	l.Observe(durability.LeaderEvent{Partition: 0, LeaderID: 1, Term: 3, IsSelf: true})
	eventually(t, 5*time.Second, "the repeated event acted upon", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return !l.dirty[0]
	})
	if !serving(l, 0) {
		t.Fatal("a repeated leader event stopped the reign")
	}
	if got := began.Load(); got != start {
		t.Fatal("a repeated leader event began a second reign")
	}
}

// A reign lost during its takeover wait never begins.
func TestLeadershipTakeoverWaitLost(t *testing.T) {
	prover, purge := &fakeProver{}, &fakePurger{}
	prover.confirmOK.Store(true)
	var mu sync.Mutex
	var begun []uint64 // terms of the reigns begun
	l := NewLeadership(1, Options{Lease: 40 * time.Millisecond, TakeoverWait: 200 * time.Millisecond, OnServe: func(_ int, term uint64, serve func()) {
		serve()
		mu.Lock()
		begun = append(begun, term)
		mu.Unlock()
	}})
	l.Start(prover, purge)
	defer l.Close()
	l.Observe(durability.LeaderEvent{Partition: 0, LeaderID: 1, Term: 3, IsSelf: true})
	eventually(t, 5*time.Second, "fenced", func() bool { return l.parts[0].Load() != nil })
	l.Observe(durability.LeaderEvent{Partition: 0, LeaderID: 2, Term: 4})
	// Leading again in term 5: its wait ends after term 3's would have.
	l.Observe(durability.LeaderEvent{Partition: 0, LeaderID: 1, Term: 5, IsSelf: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.WaitReady(ctx); err != nil {
		t.Fatalf("WaitReady: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(begun) != 1 || begun[0] != 5 {
		t.Fatalf("reigns begun in terms %v, want only term 5 (term 3 was lost during its wait)", begun)
	}
}

// fakeClocks are the lease clocks of a machine that runs, is suspended,
// and has its wall clock stepped.
type fakeClocks struct {
	mu  sync.Mutex
	now instant
}

func (c *fakeClocks) read() instant {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// run advances both clocks, as time passes on a running machine.
func (c *fakeClocks) run(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.add(d)
}

// stepWall moves the wall clock alone: what the kernel does on resume from
// a suspend (by the time slept), and NTP or an operator stepping it.
func (c *fakeClocks) stepWall(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now.wall += int64(d)
}

// servingWithClocks starts a leadership of one partition on clocks, with
// a minute's lease and no renewal, and waits until it serves.
func servingWithClocks(t *testing.T, clocks *fakeClocks, opts Options) *Leadership {
	t.Helper()
	opts.Lease, opts.RenewEvery = time.Minute, time.Hour
	l := NewLeadership(1, opts)
	l.clock = clocks.read
	l.Start(&fakeProver{}, &fakePurger{})
	t.Cleanup(l.Close)
	l.Observe(durability.LeaderEvent{Partition: 0, LeaderID: 1, Term: 3, IsSelf: true})
	eventually(t, 5*time.Second, "serving after the fence", func() bool { return serving(l, 0) })
	return l
}

// A machine suspended longer than the lease wakes up with it over: the
// monotonic clock did not count the suspend, the wall clock did. Without
// the wall clock (the negative control), it would still serve.
func TestLeaseEndsAcrossSuspend(t *testing.T) {
	for _, monotonicOnly := range []bool{false, true} {
		clocks := &fakeClocks{now: instant{wall: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()}}
		l := servingWithClocks(t, clocks, Options{UnsafeMonotonicOnly: monotonicOnly})
		clocks.run(30 * time.Second)
		if !serving(l, 0) {
			t.Fatal("lease over at half its length")
		}
		clocks.stepWall(time.Hour) // suspended for an hour
		switch got := serving(l, 0); {
		case !monotonicOnly && got:
			t.Error("serving after a suspend longer than the lease")
		case monotonicOnly && !got:
			t.Error("negative control not caught: on the monotonic clock alone, the lease ended across the suspend")
		}
	}
}

// A wall clock stepped back does not extend a lease: the monotonic clock
// still ends it.
func TestLeaseWallClockStepBack(t *testing.T) {
	clocks := &fakeClocks{now: instant{wall: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()}}
	l := servingWithClocks(t, clocks, Options{})
	clocks.stepWall(-time.Hour)
	clocks.run(59 * time.Second)
	if !serving(l, 0) {
		t.Fatal("lease over before its length")
	}
	clocks.run(time.Second)
	if serving(l, 0) {
		t.Error("serving past the lease after the wall clock was stepped back")
	}
}

// A leader that handed its ephemeral leases over seals its window: should
// it serve again in the term, its next ephemeral change waits for a raise
// through Raft (which voids the hand-over), even one its bound allows.
func TestSealedWindowRaisesFirst(t *testing.T) {
	prover := &fakeProver{}
	l := NewLeadership(1, Options{})
	l.Start(prover, &fakePurger{})
	defer l.Close()
	l.Observe(durability.LeaderEvent{Partition: 0, LeaderID: 1, Term: 5, IsSelf: true})
	eventually(t, 5*time.Second, "serving", func() bool { return serving(l, 0) })
	<-l.RaiseTTL(0, 5, time.Second)
	if w, _ := l.TokenWindow(0, 5); w.Sealed || w.TTL < time.Second || prover.ttlRaises.Load() != 1 {
		t.Fatalf("window %+v after one raise (%d proposed)", w, prover.ttlRaises.Load())
	}
	<-l.RaiseTTL(0, 5, time.Millisecond) // within the bound: nothing to propose
	if n := prover.ttlRaises.Load(); n != 1 {
		t.Fatalf("%d raises proposed for a TTL within the bound", n)
	}
	if err := l.Seal(context.Background(), 0, 5); err != nil {
		t.Fatal(err)
	}
	if w, _ := l.TokenWindow(0, 5); !w.Sealed {
		t.Fatalf("window %+v after Seal", w)
	}
	<-l.RaiseTTL(0, 5, time.Millisecond)
	if w, _ := l.TokenWindow(0, 5); w.Sealed || prover.ttlRaises.Load() != 2 {
		t.Fatalf("window %+v after the raise of a sealed window (%d proposed), want unsealed by a proposal", w, prover.ttlRaises.Load())
	}
}
