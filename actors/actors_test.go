package actors

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna/durability"
	"github.com/kahunago/kahuna/lease"
)

// fakeBackend commits at once, except for resources the test holds, whose
// proposals wait on the held channel until the test completes them.
type fakeBackend struct {
	mu        sync.Mutex
	store     map[string]durability.Record
	index     uint64 // Raft index of the last applied record
	floor     int64  // the token floor: above every removed record's token
	hold      map[string]bool
	held      chan heldProposal
	loadPanic string
	loads     atomic.Int64

	// Propose of blockPropose signals proposeEntered and waits for
	// proposeRelease, holding the actor that proposes.
	blockPropose   string
	proposeEntered chan struct{}
	proposeRelease chan struct{}

	// groupApart applies a group's records one by one (ProposeGroup).
	groupApart bool
	groups     atomic.Int32 // ProposeGroup calls

	// Load of blockLoad signals loadEntered and waits for loadRelease.
	blockLoad   string
	loadEntered chan struct{}
	loadRelease chan struct{}
}

type heldProposal struct {
	rec durability.Record
	c   durability.Completion
}

func newFakeBackend() *fakeBackend {
	return &fakeBackend{store: map[string]durability.Record{}, hold: map[string]bool{}, held: make(chan heldProposal, 16)}
}

func (b *fakeBackend) Propose(p int, rec *durability.Record, c durability.Completion) {
	r := *rec
	r.Owner = append([]byte(nil), rec.Owner...)
	if r.Resource == b.blockPropose {
		// Propose runs on the actor: the actor is busy until released.
		b.proposeEntered <- struct{}{}
		<-b.proposeRelease
	}
	b.mu.Lock()
	hold := b.hold[r.Resource]
	b.mu.Unlock()
	if hold {
		b.held <- heldProposal{r, c}
		return
	}
	c.Committed(b.apply(r))
}

// ProposeGroup applies recs all or none, as the state machine does: one
// record whose base is stale refuses them all. With groupApart (a negative
// control) it applies them one by one.
func (b *fakeBackend) ProposeGroup(p int, recs []*durability.Record, comps []durability.Completion) {
	b.groups.Add(1)
	b.mu.Lock()
	admitted := true
	for _, rec := range recs {
		old, known := b.store[rec.Resource]
		if old.Index != rec.Base || !known && rec.Token < b.floor {
			admitted = false
		}
	}
	apart := b.groupApart
	b.mu.Unlock()
	for i, rec := range recs {
		r := *rec
		r.Owner = append([]byte(nil), rec.Owner...)
		if !admitted && !apart {
			comps[i].Committed(0, durability.ErrFenced)
			continue
		}
		comps[i].Committed(b.apply(r))
	}
}

func (b *fakeBackend) setHold(resource string, on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.hold[resource] = on
}

// apply is the state machine's compare-and-set: the record applies only
// if the stored one is still at the record's Base.
func (b *fakeBackend) apply(r durability.Record) (uint64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	old, known := b.store[r.Resource]
	if old.Index != r.Base || r.Remove && !known || !known && r.Token < b.floor {
		return 0, durability.ErrFenced
	}
	b.index++
	if r.Remove {
		delete(b.store, r.Resource)
		b.floor = max(b.floor, r.Token+1)
		return b.index, nil
	}
	r.Index = b.index
	b.store[r.Resource] = r
	return r.Index, nil
}

func (b *fakeBackend) Load(p int, resource string) (durability.Record, bool, error) {
	b.loads.Add(1)
	if resource == b.loadPanic {
		panic("injected load panic")
	}
	if resource == b.blockLoad {
		b.loadEntered <- struct{}{}
		<-b.loadRelease
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.store[resource]
	if !ok {
		r.Token = b.floor
	}
	return r, ok, nil
}

func (b *fakeBackend) Close() error { return nil }

type fakeClock struct{ now atomic.Pointer[time.Time] }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	t := time.Now()
	c.now.Store(&t)
	return c
}
func (c *fakeClock) Now() time.Time          { return *c.now.Load() }
func (c *fakeClock) Advance(d time.Duration) { t := c.Now().Add(d); c.now.Store(&t) }

type fixture struct {
	ring    *Ring
	backend *fakeBackend
	clock   *fakeClock
	serving []atomic.Bool
	term    atomic.Uint64 // the leader term Serving reports (1 unless a test moves it)
	queued  chan string
	waiting chan string     // a call joined a wait queue
	timers  chan *fakeTimer // expiry timers set by the actors
	// asyncWaits: startWait runs its waiting TryLock through DoAsync, not
	// Do (a test run under TestWaitsAsync: see asyncWaitsTest).
	asyncWaits bool
	// withdrawnWaits: it runs it through DoAsync on a context that never
	// ends and withdraws it when its own ends (TestWaitsWithdrawn).
	withdrawnWaits bool
}

// fakeTimer is an expiry timer the test fires by hand.
type fakeTimer struct {
	d       time.Duration
	f       func()
	stopped atomic.Bool
}

func (t *fakeTimer) Stop() bool { return !t.stopped.Swap(true) }

// fire runs the timer's function unless it was stopped.
func (t *fakeTimer) fire() {
	if !t.stopped.Load() {
		t.f()
	}
}

func newFixture(t testing.TB, actors, toRemove int, tune ...func(*Config)) *fixture {
	t.Helper()
	f := &fixture{backend: newFakeBackend(), clock: newFakeClock(), serving: make([]atomic.Bool, 4), queued: make(chan string, 16),
		waiting: make(chan string, 2*lease.MaxWaiters), timers: make(chan *fakeTimer, 64)}
	for i := range f.serving {
		f.serving[i].Store(true)
	}
	f.term.Store(1)
	cfg := Config{
		Actors:               actors,
		CacheEntryTTL:        time.Minute,
		CacheEntriesToRemove: toRemove,
		Backend:              f.backend,
		Serving:              func(p int) (uint64, bool) { return f.term.Load(), f.serving[p].Load() },
		Now:                  f.clock.Now,
		onQueued:             func(r string) { f.queued <- r },
		onWait:               func(r string) { f.waiting <- r },
		afterFunc: func(d time.Duration, fn func()) stopper {
			t := &fakeTimer{d: d, f: fn}
			f.timers <- t
			return t
		},
	}
	for _, fn := range tune {
		fn(&cfg)
	}
	ring, err := NewRing(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ring.Close)
	f.ring = ring
	f.asyncWaits = strings.Contains(t.Name(), asyncWaitsTest)
	f.withdrawnWaits = strings.Contains(t.Name(), withdrawnWaitsTest)
	return f
}

// blockActor makes a persistent write of "block" hold the actor that
// proposes it until proposeRelease is closed.
func (f *fixture) blockActor() {
	f.backend.blockPropose, f.backend.proposeEntered, f.backend.proposeRelease = "block", make(chan struct{}), make(chan struct{})
}

func (f *fixture) do(t *testing.T, op lease.Op, res, owner string, ttl time.Duration, d lease.Durability) Response {
	t.Helper()
	resp, err := f.ring.Do(context.Background(), Request{Request: lease.Request{Op: op, Resource: res, Owner: []byte(owner), TTL: ttl, Durability: d}, Partition: 1})
	if err != nil {
		t.Fatalf("%v %s: %v", op, res, err)
	}
	return resp
}

func (f *fixture) async(op lease.Op, res, owner string, d lease.Durability) <-chan Response {
	ch := make(chan Response, 1)
	go func() {
		resp, _ := f.ring.Do(context.Background(), Request{Request: lease.Request{Op: op, Resource: res, Owner: []byte(owner), TTL: time.Minute, Durability: d}, Partition: 1})
		ch <- resp
	}()
	return ch
}

func TestRequestsQueueBehindPersistentWrite(t *testing.T) {
	f := newFixture(t, 2, 100)
	f.backend.setHold("r", true)
	first := f.async(lease.TryLock, "r", "a", lease.Persistent)
	p := <-f.backend.held // a's grant is in flight
	second := f.async(lease.TryLock, "r", "b", lease.Persistent)
	if got := <-f.queued; got != "r" {
		t.Fatalf("queued %q", got)
	}
	third := f.async(lease.Unlock, "r", "a", lease.Persistent)
	<-f.queued
	select {
	case r := <-second:
		t.Fatalf("second answered %v while the first write was in flight", r.Status)
	default:
	}
	p.c.Committed(f.backend.apply(p.rec))
	if r := <-first; r.Status != lease.Locked || r.Token != 0 {
		t.Fatalf("first = %+v", r)
	}
	// Decided after the grant was applied: busy, not a second grant.
	if r := <-second; r.Status != lease.Busy {
		t.Fatalf("second = %+v, want Busy", r)
	}
	// The unlock was queued behind and is itself a write: it commits too.
	p = <-f.backend.held
	p.c.Committed(f.backend.apply(p.rec))
	if r := <-third; r.Status != lease.Unlocked {
		t.Fatalf("third = %+v, want Unlocked", r)
	}
	if rec := f.backend.store["r"]; rec.Locked || rec.Token != 0 || rec.Revision != 2 {
		t.Fatalf("stored %+v", rec)
	}
}

// TestReleasesJumpTheMailbox: an Unlock that reaches a busy actor after
// many TryLocks of the same lock is served before them, so one of them
// wins the lock instead of all of them being refused.
func TestReleasesJumpTheMailbox(t *testing.T) {
	f := newFixture(t, 1, 100)
	f.blockActor()
	if r := f.do(t, lease.TryLock, "hot", "a", time.Hour, lease.Ephemeral); r.Status != lease.Locked {
		t.Fatalf("a: %+v", r)
	}
	blocked := f.async(lease.TryLock, "block", "x", lease.Persistent)
	<-f.backend.proposeEntered // the only actor is busy: what follows queues in its mailbox
	send := func(op lease.Op, owner string) chan Response {
		c := f.ring.calls.Get().(*call)
		c.req = Request{Request: lease.Request{Op: op, Resource: "hot", Owner: []byte(owner), TTL: time.Hour, Durability: lease.Ephemeral}, Partition: 1}
		f.ring.system.Root.Send(f.ring.route("hot"), c) // queued when Send returns
		return c.reply
	}
	var tries []chan Response
	for i := range 20 {
		tries = append(tries, send(lease.TryLock, fmt.Sprint("b", i)))
	}
	unlock := send(lease.Unlock, "a")
	close(f.backend.proposeRelease)
	if r := <-blocked; r.Status != lease.Locked {
		t.Fatalf("lock of the blocking resource: %+v", r)
	}
	if r := <-unlock; r.Status != lease.Unlocked {
		t.Fatalf("unlock: %+v", r)
	}
	for i, ch := range tries {
		want := lease.Busy
		if i == 0 {
			want = lease.Locked // the oldest TryLock, served right after the release
		}
		if r := <-ch; r.Status != want {
			t.Fatalf("TryLock b%d: %v, want %v", i, r.Status, want)
		}
	}
}

func TestUnknownOutcomeAnswersErroredAndReloads(t *testing.T) {
	f := newFixture(t, 1, 100)
	if r := f.do(t, lease.TryLock, "r", "a", time.Millisecond, lease.Persistent); r.Status != lease.Locked {
		t.Fatalf("grant: %+v", r)
	}
	f.clock.Advance(time.Second) // a's lease lapses
	f.backend.setHold("r", true)
	loads := f.backend.loads.Load()
	ch := f.async(lease.TryLock, "r", "b", lease.Persistent)
	p := <-f.backend.held
	// The proposal timed out, yet it did commit.
	if _, err := f.backend.apply(p.rec); err != nil {
		t.Fatal(err)
	}
	p.c.Committed(0, durability.ErrUnknownOutcome)
	if r := <-ch; r.Status != lease.Errored {
		t.Fatalf("b = %+v, want Errored", r)
	}
	f.backend.setHold("r", false)
	// The cache was invalidated: c sees b's committed grant, reloaded.
	if r := f.do(t, lease.TryLock, "r", "c", time.Minute, lease.Persistent); r.Status != lease.Busy {
		t.Fatalf("c = %+v, want Busy (b's grant committed)", r)
	}
	if f.backend.loads.Load() != loads+1 {
		t.Fatalf("expected one reload, got %d", f.backend.loads.Load()-loads)
	}
	if r := f.do(t, lease.Get, "r", "", 0, lease.Persistent); r.Status != lease.Got || string(r.Owner) != "b" || r.Token != 1 {
		t.Fatalf("get = %+v", r)
	}
}

func TestRetryableFailureKeepsEntry(t *testing.T) {
	f := newFixture(t, 1, 100)
	f.do(t, lease.TryLock, "r", "a", time.Minute, lease.Persistent)
	f.backend.setHold("r", true)
	ch := f.doAsync(longerExtend("r", "a")) // recorded: a renewal within the stored lease is not
	p := <-f.backend.held
	p.c.Committed(0, fmt.Errorf("queue full: %w", durability.ErrRetry))
	if r := <-ch; r.Status != lease.MustRetry {
		t.Fatalf("extend = %+v, want MustRetry", r)
	}
	loads := f.backend.loads.Load()
	if r := f.do(t, lease.Get, "r", "", 0, lease.Persistent); r.Status != lease.Got || string(r.Owner) != "a" {
		t.Fatalf("get = %+v", r)
	}
	if f.backend.loads.Load() != loads {
		t.Fatal("a certainly-not-committed write must not invalidate the cache")
	}
}

func TestNotServingAnswersMustRetry(t *testing.T) {
	f := newFixture(t, 1, 100)
	f.serving[1].Store(false)
	if r := f.do(t, lease.TryLock, "r", "a", time.Minute, lease.Ephemeral); r.Status != lease.MustRetry {
		t.Fatalf("got %+v", r)
	}
}

func TestPanicCostsOneRequestNotTheCache(t *testing.T) {
	f := newFixture(t, 1, 100)
	f.do(t, lease.TryLock, "held", "a", time.Hour, lease.Ephemeral)
	f.backend.loadPanic = "boom"
	if r := f.do(t, lease.Get, "boom", "", 0, lease.Persistent); r.Status != lease.Errored {
		t.Fatalf("panicking request = %+v, want Errored", r)
	}
	if r := f.do(t, lease.TryLock, "held", "b", time.Hour, lease.Ephemeral); r.Status != lease.Busy {
		t.Fatalf("after panic: %+v, want Busy (cache kept)", r)
	}
}

func TestDropPartition(t *testing.T) {
	f := newFixture(t, 3, 100)
	f.do(t, lease.TryLock, "e", "a", time.Hour, lease.Ephemeral)
	f.do(t, lease.TryLock, "p", "a", time.Hour, lease.Persistent)
	if err := f.ring.DropPartition(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if s := f.ring.Stats(); s.Entries != 0 {
		t.Fatalf("entries after drop: %d", s.Entries)
	}
	// The ephemeral lock is gone; the persistent one reloads.
	if r := f.do(t, lease.TryLock, "e", "b", time.Hour, lease.Ephemeral); r.Status != lease.Locked || r.Token != 0 {
		t.Fatalf("ephemeral after drop: %+v", r)
	}
	if r := f.do(t, lease.TryLock, "p", "b", time.Hour, lease.Persistent); r.Status != lease.Busy {
		t.Fatalf("persistent after drop: %+v", r)
	}
}

// TestEviction drives the collector with one actor: it runs on exactly the
// 500th message, only with ≥ 200 entries, evicts idle entries up to the
// budget, and never an in-flight entry or a live ephemeral lease.
func TestEviction(t *testing.T) {
	for _, budget := range []int{100, 10} {
		t.Run(fmt.Sprintf("budget=%d", budget), func(t *testing.T) {
			f := newFixture(t, 1, budget)
			msgs := 0
			for i := 0; i < 150; i++ {
				f.do(t, lease.TryLock, fmt.Sprintf("live-%d", i), "a", time.Hour, lease.Ephemeral)
				msgs++
			}
			for i := 0; i < 60; i++ {
				f.do(t, lease.TryLock, fmt.Sprintf("free-%d", i), "a", time.Hour, lease.Ephemeral)
				f.do(t, lease.Unlock, fmt.Sprintf("free-%d", i), "a", 0, lease.Ephemeral)
				msgs += 2
			}
			for i := 0; i < 10; i++ {
				f.do(t, lease.TryLock, fmt.Sprintf("p-%d", i), "a", time.Second, lease.Persistent)
				msgs += 2 // request + completion
			}
			for i := 0; i < 5; i++ {
				f.do(t, lease.TryLock, fmt.Sprintf("p-live-%d", i), "a", time.Hour, lease.Persistent)
				msgs += 2
			}
			f.backend.setHold("inflight", true)
			inflight := f.async(lease.TryLock, "inflight", "a", lease.Persistent)
			p := <-f.backend.held
			msgs++
			f.clock.Advance(2 * time.Minute) // everything is idle now
			for ; msgs < 499; msgs++ {
				f.do(t, lease.Get, "probe", "", 0, lease.Ephemeral)
			}
			// The probe of a name never locked leaves no entry.
			if s := f.ring.Stats(); s.Evictions != 0 || s.Entries != 226 {
				t.Fatalf("before the 500th message: %+v", s)
			}
			f.do(t, lease.Get, "probe", "", 0, lease.Ephemeral) // 500th: collects
			f.do(t, lease.Get, "probe", "", 0, lease.Ephemeral) // answered after the pass
			loadsBefore := f.backend.loads.Load()
			want := min(budget, 70) // 60 released + 10 lapsed persistent
			if s := f.ring.Stats(); s.Evictions != uint64(want) || s.Entries != 226-want {
				t.Fatalf("after the pass: %+v, want %d evictions", s, want)
			}
			for i := 0; i < 150; i++ {
				if r := f.do(t, lease.TryLock, fmt.Sprintf("live-%d", i), "b", time.Hour, lease.Ephemeral); r.Status != lease.Busy {
					t.Fatalf("live-%d evicted: %+v", i, r)
				}
			}
			for i := 0; i < 5; i++ {
				if r := f.do(t, lease.Get, fmt.Sprintf("p-live-%d", i), "", 0, lease.Persistent); r.Status != lease.Got || string(r.Owner) != "a" {
					t.Fatalf("p-live-%d: %+v", i, r)
				}
			}
			if n := f.backend.loads.Load(); n != loadsBefore {
				t.Fatalf("live persistent leases were evicted and reloaded: %d loads, want %d", n, loadsBefore)
			}
			p.c.Committed(f.backend.apply(p.rec))
			if r := <-inflight; r.Status != lease.Locked {
				t.Fatalf("in-flight grant: %+v", r)
			}
			// An evicted persistent entry reloads from the store with its token.
			if r := f.do(t, lease.TryLock, "p-0", "b", time.Hour, lease.Persistent); r.Status != lease.Locked || r.Token != 1 {
				t.Fatalf("p-0 after eviction: %+v, want Locked token 1", r)
			}
		})
	}
	t.Run("below 200 entries nothing is evicted", func(t *testing.T) {
		f := newFixture(t, 1, 100)
		for i := 0; i < 199; i++ {
			f.do(t, lease.TryLock, fmt.Sprintf("k-%d", i), "a", time.Second, lease.Ephemeral)
			f.do(t, lease.Unlock, fmt.Sprintf("k-%d", i), "a", 0, lease.Ephemeral)
		}
		f.clock.Advance(time.Hour)
		for i := 0; i < 400; i++ {
			f.do(t, lease.Get, "k-0", "", 0, lease.Ephemeral)
		}
		if s := f.ring.Stats(); s.Evictions != 0 || s.Entries != 199 {
			t.Fatalf("%+v", s)
		}
	})
}

func TestCallsAfterCloseFail(t *testing.T) {
	f := newFixture(t, 2, 100)
	f.backend.setHold("r", true)
	done := make(chan error, 1)
	go func() {
		_, err := f.ring.Do(context.Background(), Request{Request: lease.Request{Op: lease.TryLock, Resource: "r", Owner: []byte("a"), TTL: time.Minute, Durability: lease.Persistent}, Partition: 1})
		done <- err
	}()
	<-f.backend.held
	f.ring.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("in-flight call: %v, want ErrClosed", err)
	}
	if _, err := f.ring.Do(context.Background(), Request{Request: lease.Request{Op: lease.Get, Resource: "x", Durability: lease.Ephemeral}}); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
	f.ring.Close() // idempotent
}

func TestContextEndsWait(t *testing.T) {
	f := newFixture(t, 1, 100)
	f.backend.setHold("r", true)
	go f.ring.Do(context.Background(), Request{Request: lease.Request{Op: lease.TryLock, Resource: "r", Owner: []byte("a"), TTL: time.Minute, Durability: lease.Persistent}, Partition: 1})
	p := <-f.backend.held
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := f.ring.Do(ctx, Request{Request: lease.Request{Op: lease.TryLock, Resource: "r", Owner: []byte("b"), TTL: time.Minute, Durability: lease.Persistent}, Partition: 1})
		errc <- err
	}()
	<-f.queued
	cancel()
	if err := <-errc; err != context.Canceled {
		t.Fatalf("got %v, want context.Canceled unchanged", err)
	}
	// The abandoned call is still answered into its own channel later,
	// without disturbing anyone.
	p.c.Committed(f.backend.apply(p.rec))
	if r := f.do(t, lease.Get, "r", "", 0, lease.Persistent); r.Status != lease.Got || string(r.Owner) != "a" {
		t.Fatalf("get = %+v", r)
	}
}

// A write decided on a stale cached entry is rejected by the store's
// compare-and-set: the caller gets MustRetry (nothing was applied), and the
// next request reloads the entry and decides on what is really stored.
func TestFencedWriteAnswersMustRetryAndReloads(t *testing.T) {
	f := newFixture(t, 1, 100)
	if r := f.do(t, lease.TryLock, "r", "a", time.Minute, lease.Persistent); r.Status != lease.Locked {
		t.Fatalf("grant: %+v", r)
	}
	// Behind the cache's back (another epoch's write), a releases.
	f.backend.mu.Lock()
	rec := f.backend.store["r"]
	rec.Locked, rec.Owner, rec.Revision = false, nil, rec.Revision+1
	f.backend.index++
	rec.Index = f.backend.index
	f.backend.store["r"] = rec
	f.backend.mu.Unlock()
	loads := f.backend.loads.Load()
	// a extends (for longer than its stored lease: recorded) on its stale
	// cache: rejected, not acknowledged.
	if r := f.do(t, lease.Extend, "r", "a", 2*time.Minute, lease.Persistent); r.Status != lease.MustRetry {
		t.Fatalf("extend on a stale entry = %+v, want MustRetry", r)
	}
	// Reloaded: the lock is free, b gets the next token.
	if r := f.do(t, lease.TryLock, "r", "b", time.Minute, lease.Persistent); r.Status != lease.Locked || r.Token != 1 {
		t.Fatalf("b = %+v, want Locked with token 1", r)
	}
	if f.backend.loads.Load() != loads+1 {
		t.Fatalf("%d loads, want one reload", f.backend.loads.Load()-loads)
	}
}
