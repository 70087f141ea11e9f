package kahuna_test

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
)

// holding is a holder a Get must report: its owner, slot and token.
type holding struct {
	owner []byte
	slot  int
	token int64
}

// permitHoldings is what p holds.
func permitHoldings(p *kahuna.Permit) []holding {
	var out []holding
	for _, g := range p.Grants() {
		out = append(out, holding{p.Owner(), g.Slot, g.Token})
	}
	return out
}

// checkGot fails t unless a Get answered Got with exactly want as its
// holders, token as its fencing token, and no single owner.
func checkGot(t *testing.T, what string, info kahuna.LockInfo, res kahuna.Result, err error, token int64, want []holding) {
	t.Helper()
	if err != nil || res.Status != kahuna.Got {
		t.Fatalf("%s: %v %v, want Got", what, res.Status, err)
	}
	var got []string
	last := time.Time{}
	for _, h := range info.Holders {
		got = append(got, fmt.Sprintf("%s/%d/%d", h.Owner, h.Slot, h.FencingToken))
		if h.Expires.After(last) {
			last = h.Expires
		}
	}
	var wants []string
	for _, h := range want {
		wants = append(wants, fmt.Sprintf("%s/%d/%d", h.owner, h.slot, h.token))
	}
	slices.Sort(got)
	slices.Sort(wants)
	if !slices.Equal(got, wants) || info.FencingToken != token || len(info.Owner) != 0 || !info.Expires.Equal(last) {
		t.Fatalf("%s: holders %v, token %d, owner %q, expires %v (last holder's %v); want holders %v, token %d, no owner",
			what, got, info.FencingToken, info.Owner, info.Expires, last, wants, token)
	}
}

// Get of a semaphore and of a read/write lock reports every live holder,
// embedded, over REST and over gRPC (which asks that Get over REST), and
// LockDoesNotExist once none holds it.
func TestGetOfSharedKindsListsHolders(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := openNode(t, kahuna.Config{ListenAddress: "127.0.0.1:0"})
	ep := "http://" + n.ListenAddress()
	grpc, err := kahuna.Dial(ctx, []string{ep})
	if err != nil {
		t.Fatal(err)
	}
	defer grpc.Close()
	rest, err := kahuna.Dial(ctx, []string{ep}, kahuna.WithREST())
	if err != nil {
		t.Fatal(err)
	}
	defer rest.Close()
	getters := []struct {
		name string
		l    kahuna.Locker
	}{{"embedded", n}, {"REST", rest}, {"gRPC", grpc}}

	sem := kahuna.NewSemaphore(n, "pool", 4)
	a, err := sem.TryAcquire(ctx, 1, kahuna.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	b, err := sem.TryAcquire(ctx, 2, kahuna.WithTTL(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	want := append(permitHoldings(a), permitHoldings(b)...)
	for _, g := range getters {
		info, res, err := g.l.Get(ctx, kahuna.SemaphorePrefix+"pool", kahuna.Ephemeral)
		checkGot(t, g.name+" get of a semaphore", info, res, err, b.Grants()[1].Token, want)
	}

	rw := kahuna.NewRWLock(n, "index")
	w, err := rw.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range getters {
		info, res, err := g.l.Get(ctx, kahuna.RWLockPrefix+"index", kahuna.Persistent)
		checkGot(t, g.name+" get of a write-held lock", info, res, err, w.FencingToken(), []holding{{w.Owner(), 0, w.FencingToken()}})
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r1, err := rw.TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := rw.TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range getters {
		info, res, err := g.l.Get(ctx, kahuna.RWLockPrefix+"index", kahuna.Persistent)
		checkGot(t, g.name+" get of a read-held lock", info, res, err, w.FencingToken(),
			[]holding{{r1.Owner(), 0, w.FencingToken()}, {r2.Owner(), 0, w.FencingToken()}})
	}

	for _, l := range []*kahuna.Lock{r1, r2, a.Lock, b.Lock} {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range getters {
		for _, name := range []string{kahuna.SemaphorePrefix + "pool", kahuna.RWLockPrefix + "index"} {
			if _, res, err := g.l.Get(ctx, name, kahuna.Persistent); err != nil || res.Status != kahuna.LockDoesNotExist {
				t.Fatalf("%s get of %s with no holder: %v %v, want LockDoesNotExist", g.name, name, res.Status, err)
			}
		}
	}
	// A name that only extends another's is not it.
	if _, err := kahuna.NewSemaphore(n, "pool2", 1).TryAcquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, res, err := n.Get(ctx, kahuna.SemaphorePrefix+"pool", kahuna.Persistent); err != nil || res.Status != kahuna.LockDoesNotExist {
		t.Fatalf("get of pool beside pool2: %v %v", res.Status, err)
	}
}

// A watch of a semaphore, embedded and over gRPC, says each holder's
// grant and release with the holders left.
func TestWatchOfASemaphoreListsHolders(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := openNode(t, kahuna.Config{ListenAddress: "127.0.0.1:0"})
	cl, err := kahuna.Dial(ctx, []string{"http://" + n.ListenAddress()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	type stream struct {
		name string
		next func() (kahuna.WatchEvent, error, bool)
		stop func()
	}
	var streams []stream
	for _, w := range []struct {
		name string
		seq  iter.Seq2[kahuna.WatchEvent, error]
	}{{"embedded", n.Watch(ctx, kahuna.SemaphorePrefix+"pool")}, {"gRPC", cl.Watch(ctx, kahuna.SemaphorePrefix+"pool")}} {
		next, stop := iter.Pull2(w.seq)
		defer stop()
		streams = append(streams, stream{w.name, next, stop})
	}
	expect := func(kind kahuna.EventKind, holders ...[]byte) {
		t.Helper()
		for _, s := range streams {
			ev, err, ok := s.next()
			if err != nil || !ok {
				t.Fatalf("%s: %v %v", s.name, err, ok)
			}
			var got []string
			for _, h := range ev.Holders {
				got = append(got, string(h.Owner))
			}
			var want []string
			for _, h := range holders {
				want = append(want, string(h))
			}
			if ev.Kind != kind || len(ev.Owner) != 0 || !slices.Equal(got, want) {
				t.Fatalf("%s: %v owner %q holders %v, want %v with %v", s.name, ev.Kind, ev.Owner, got, kind, want)
			}
		}
	}
	expect(kahuna.EventReleased)
	sem := kahuna.NewSemaphore(n, "pool", 2)
	a, err := sem.TryAcquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	expect(kahuna.EventAcquired, a.Owner())
	b, err := sem.TryAcquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	expect(kahuna.EventAcquired, a.Owner(), b.Owner())
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	expect(kahuna.EventReleased, b.Owner())
}
