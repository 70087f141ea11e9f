package actors

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kahunago/kahuna/lease"
)

func next(t *testing.T, w *Watch) Event {
	t.Helper()
	select {
	case ev, ok := <-w.C:
		if !ok {
			t.Fatalf("watch ended: %v", w.Err())
		}
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
	}
	return Event{}
}

func expect(t *testing.T, ev Event, kind EventKind, owner string, token int64, rev uint64) {
	t.Helper()
	if ev.Kind != kind || string(ev.Owner) != owner || ev.Token != token || ev.Revision != rev {
		t.Fatalf("event %v owner %q token %d rev %d, want %v %q %d %d", ev.Kind, ev.Owner, ev.Token, ev.Revision, kind, owner, token, rev)
	}
}

// acquire → release → acquire by another → expiry (noticed by the timer,
// without a request), for both durabilities.
func TestWatchEventsInOrder(t *testing.T) {
	for _, d := range []lease.Durability{lease.Ephemeral, lease.Persistent} {
		t.Run(d.String(), func(t *testing.T) {
			f := newFixture(t, 1, 100)
			w, err := f.ring.Watch(context.Background(), Request{Request: lease.Request{Resource: "r"}, Partition: 1}, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			if ev := next(t, w); !ev.Current || ev.Kind != Released || ev.Revision != 0 {
				t.Fatalf("first event %+v, want the current state (free)", ev)
			}
			f.do(t, lease.TryLock, "r", "a", time.Minute, d)
			expect(t, next(t, w), Acquired, "a", 0, 1)
			f.do(t, lease.Extend, "r", "a", 2*time.Minute, d) // longer than granted: recorded
			expect(t, next(t, w), Extended, "a", 0, 2)
			f.do(t, lease.Unlock, "r", "a", 0, d)
			expect(t, next(t, w), Released, "", 0, 3)
			f.do(t, lease.TryLock, "r", "b", time.Minute, d)
			ev := next(t, w)
			expect(t, ev, Acquired, "b", 1, 4)
			if ev.Durability != d {
				t.Fatalf("durability %v, want %v", ev.Durability, d)
			}
			// The actor arms the timer after it answers: a request behind
			// the grant returns once it has.
			f.sync(t, "r")
			var timer *fakeTimer // the last one set: for b's expiry, because it is watched
			for len(f.timers) > 0 {
				timer = <-f.timers
			}
			if timer == nil || timer.stopped.Load() {
				t.Fatal("no live timer for the watched holder's expiry")
			}
			f.clock.Advance(time.Minute + time.Millisecond)
			timer.fire()
			expect(t, next(t, w), Expired, "b", 1, 4)
			// A late watcher starts from the lapsed state; one that saw
			// revision 4's grant is told of the expiry too.
			w2, err := f.ring.Watch(context.Background(), Request{Request: lease.Request{Resource: "r"}, Partition: 1}, 4)
			if err != nil {
				t.Fatal(err)
			}
			defer w2.Stop()
			if ev := next(t, w2); !ev.Current || ev.Kind != Expired || ev.Revision != 4 {
				t.Fatalf("late watcher's first event %+v", ev)
			}
			// A new grant over the lapsed lease: no second expiry.
			f.do(t, lease.TryLock, "r", "c", time.Minute, d)
			expect(t, next(t, w), Acquired, "c", 2, 5)
			expect(t, next(t, w2), Acquired, "c", 2, 5)
		})
	}
}

func TestWatchSkipsSeenState(t *testing.T) {
	f := newFixture(t, 1, 100)
	f.do(t, lease.TryLock, "r", "a", time.Minute, lease.Ephemeral)
	w, err := f.ring.Watch(context.Background(), Request{Request: lease.Request{Resource: "r"}, Partition: 1}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	f.do(t, lease.Unlock, "r", "a", 0, lease.Ephemeral)
	expect(t, next(t, w), Released, "", 0, 2) // not the grant at revision 1 again
}

func TestWatchEndsOnDropPartition(t *testing.T) {
	f := newFixture(t, 1, 100)
	w, err := f.ring.Watch(context.Background(), Request{Request: lease.Request{Resource: "r"}, Partition: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	next(t, w)
	if err := f.ring.DropPartition(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-w.C; ok {
		t.Fatal("event after drop")
	}
	if !errors.Is(w.Err(), ErrWatchMoved) {
		t.Fatalf("err %v, want ErrWatchMoved", w.Err())
	}
	f.serving[1].Store(false)
	if _, err := f.ring.Watch(context.Background(), Request{Request: lease.Request{Resource: "r"}, Partition: 1}, 0); !errors.Is(err, ErrWatchMoved) {
		t.Fatalf("watch while not serving: %v", err)
	}
}

func TestWatchSlowReaderEnds(t *testing.T) {
	f := newFixture(t, 1, 100)
	w, err := f.ring.Watch(context.Background(), Request{Request: lease.Request{Resource: "r"}, Partition: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < WatchBuffer; i++ { // the current state + WatchBuffer changes overflow it
		f.do(t, lease.TryLock, "r", "a", time.Minute, lease.Ephemeral)
		f.do(t, lease.Unlock, "r", "a", 0, lease.Ephemeral)
	}
	n := 0
	for range w.C {
		n++
	}
	if n != WatchBuffer || !errors.Is(w.Err(), ErrWatchSlow) {
		t.Fatalf("read %d events, err %v; want %d then ErrWatchSlow", n, w.Err(), WatchBuffer)
	}
}

func TestWatchStopOnCancel(t *testing.T) {
	f := newFixture(t, 1, 100)
	ctx, cancel := context.WithCancel(context.Background())
	w, err := f.ring.Watch(ctx, Request{Request: lease.Request{Resource: "r"}, Partition: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	next(t, w)
	cancel()
	if _, ok := <-w.C; ok {
		t.Fatal("event after cancel")
	}
	if w.Err() != nil {
		t.Fatalf("err %v after cancel, want nil", w.Err())
	}
}

// watchedHolder is a fixture where "a" holds "r" persistently for a
// minute, a watch of "r" that has seen that grant, and the timer set for
// a's expiry.
func watchedHolder(t *testing.T) (*fixture, *Watch, *fakeTimer) {
	t.Helper()
	f := newFixture(t, 1, 100)
	f.do(t, lease.TryLock, "r", "a", time.Minute, lease.Persistent)
	w, err := f.ring.Watch(context.Background(), Request{Request: lease.Request{Resource: "r"}, Partition: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	if ev := next(t, w); !ev.Current || ev.Kind != Acquired {
		t.Fatalf("first event %+v, want a's grant", ev)
	}
	var timer *fakeTimer
	for len(f.timers) > 0 {
		timer = <-f.timers
	}
	if timer == nil {
		t.Fatal("no timer for the watched holder's expiry")
	}
	return f, w, timer
}

// A node that stops serving (its lease lapsed, no leader event yet) must
// not tell its watchers a holder's lease expired: that is its cache's
// view, and the new leader may have extended the lease since. The watch
// ends as moved instead, and the watcher re-watches the new leader.
func TestWatchNoExpiryFromANodeNotServing(t *testing.T) {
	f, w, timer := watchedHolder(t)
	f.serving[1].Store(false) // deposed, and not told yet
	f.clock.Advance(time.Minute + time.Millisecond)
	timer.fire()
	select {
	case ev, ok := <-w.C:
		if ok {
			t.Fatalf("a node not serving told its watcher %v", ev.Kind)
		}
		if !errors.Is(w.Err(), ErrWatchMoved) {
			t.Fatalf("watch ended with %v, want ErrWatchMoved", w.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watch neither ended nor got an event")
	}
}

// holdersOf is an event's holders as owner names, in slot order.
func holderNames(ev Event) []string {
	var out []string
	for _, h := range ev.Holders {
		out = append(out, string(h.Owner))
	}
	return out
}

// A semaphore's watchers hear each holder come, go and lapse, each event
// with the holders left; the lapse of one permit while another lives is
// noticed by the timer, without a request.
func TestWatchSemaphoreHolders(t *testing.T) {
	f := newFixture(t, 1, 100)
	w, err := f.ring.Watch(context.Background(), Request{Request: lease.Request{Resource: pool}, Partition: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if ev := next(t, w); !ev.Current || ev.Kind != Released || len(ev.Holders) != 0 {
		t.Fatalf("first event %+v, want the current state (free)", ev)
	}
	f.permits(t, lease.TryLock, "a", 1, 3)
	short := permitReq(lease.TryLock, "b", 1, 3, 0)
	short.TTL = time.Second
	if r, err := f.ring.Do(context.Background(), short); err != nil || r.Status != lease.Locked {
		t.Fatalf("b: %+v %v", r, err)
	}
	want := func(ev Event, kind EventKind, holders ...string) {
		t.Helper()
		got := holderNames(ev)
		if ev.Kind != kind || len(ev.Owner) != 0 || len(got) != len(holders) {
			t.Fatalf("event %v owner %q holders %v, want %v with %v", ev.Kind, ev.Owner, got, kind, holders)
		}
		for i := range holders {
			if got[i] != holders[i] {
				t.Fatalf("event %v holders %v, want %v", ev.Kind, got, holders)
			}
		}
	}
	want(next(t, w), Acquired, "a")
	ev := next(t, w)
	want(ev, Acquired, "a", "b")
	if !ev.Expires.Equal(f.clock.Now().Add(time.Minute)) {
		t.Fatalf("expires %v, want a's (the last holder's)", ev.Expires)
	}
	f.sync(t, pool)
	var timer *fakeTimer
	for len(f.timers) > 0 {
		timer = <-f.timers
	}
	if timer == nil || timer.stopped.Load() || timer.d > time.Second+time.Millisecond {
		t.Fatalf("timer %+v, want one set for b's lapse", timer)
	}
	f.clock.Advance(time.Second + time.Millisecond)
	timer.fire()
	lapse := next(t, w)
	want(lapse, Expired, "a")
	// A watcher that saw the revision of b's grant is told of the lapse,
	// which does not move the revision.
	w3, err := f.ring.Watch(context.Background(), Request{Request: lease.Request{Resource: pool}, Partition: 1}, lapse.Revision)
	if err != nil {
		t.Fatal(err)
	}
	defer w3.Stop()
	ev = next(t, w3)
	want(ev, Expired, "a")
	if !ev.Current || ev.Revision != lapse.Revision {
		t.Fatalf("resumed watcher's first event %+v, want the current state at revision %d", ev, lapse.Revision)
	}
	f.permits(t, lease.Unlock, "a", 0, 0)
	want(next(t, w), Released)
	// A late watcher starts from the free state.
	w2, err := f.ring.Watch(context.Background(), Request{Request: lease.Request{Resource: pool}, Partition: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Stop()
	if ev := next(t, w2); !ev.Current || len(ev.Holders) != 0 {
		t.Fatalf("late watcher's first event %+v", ev)
	}
}

// A lease whose Extend was decided while it was live, and committed after
// its old expiry passed, never lapsed: the watchers are told the Extend,
// not an expiry first (no timer runs while a write is in flight, and the
// commit does not take the old expiry for a lapse).
func TestWatchNoExpiryWhileAnExtendIsInFlight(t *testing.T) {
	f, w, timer := watchedHolder(t)
	f.holdWrites(t, "r")
	extended := f.doAsync(longerExtend("r", "a"))
	p := <-f.backend.held // decided while live, not committed yet
	f.clock.Advance(time.Minute + time.Millisecond)
	timer.fire()
	p.c.Committed(f.backend.apply(p.rec))
	if r := answer(t, extended); r.Status != lease.Extended {
		t.Fatalf("extend: %v", r.Status)
	}
	expect(t, next(t, w), Extended, "a", 0, 2)
}

// A holder's lapse is told to the watchers already there when a new watcher
// arrives before the lapse timer has fired: the newcomer's first event
// does not hide it from them.
func TestWatchSemaphoreLapseToldBeforeANewWatcher(t *testing.T) {
	f := newFixture(t, 1, 100)
	watch := func() *Watch {
		w, err := f.ring.Watch(context.Background(), Request{Request: lease.Request{Resource: pool}, Partition: 1}, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		return w
	}
	w := watch()
	next(t, w) // the current state
	f.permits(t, lease.TryLock, "a", 1, 3)
	short := permitReq(lease.TryLock, "b", 1, 3, 0)
	short.TTL = time.Second
	if r, err := f.ring.Do(context.Background(), short); err != nil || r.Status != lease.Locked {
		t.Fatalf("b: %+v %v", r, err)
	}
	next(t, w)                                      // a acquired
	next(t, w)                                      // b acquired
	f.clock.Advance(time.Second + time.Millisecond) // b lapses; no timer fired
	late := watch()
	if ev := next(t, late); ev.Kind != Expired || len(ev.Holders) != 1 {
		t.Fatalf("new watcher's first event %v holders %v, want expired with a", ev.Kind, holderNames(ev))
	}
	if ev := next(t, w); ev.Kind != Expired || len(ev.Holders) != 1 || holderNames(ev)[0] != "a" {
		t.Fatalf("first watcher's event %v holders %v, want b's lapse (expired, a left)", ev.Kind, holderNames(ev))
	}
}
