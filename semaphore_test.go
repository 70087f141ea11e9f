package kahuna_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
)

func statusOf(err error) (kahuna.Status, string, bool) {
	var se *kahuna.StatusError
	if !errors.As(err, &se) {
		return 0, "", false
	}
	return se.Status, se.Reason, true
}

// waitUntil polls cond, the node's published state, until it holds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSemaphoreLimitsHoldersAndFencesEachSlot(t *testing.T) {
	ctx := context.Background()
	n := openNode(t, kahuna.Config{})
	sem := kahuna.NewSemaphore(n, "builders", 2)
	a, err := sem.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := sem.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if ga, gb := a.Grants(), b.Grants(); len(ga) != 1 || len(gb) != 1 || ga[0].Slot == gb[0].Slot {
		t.Fatalf("two holders share a slot: %v %v", ga, gb)
	}
	if a.Free() != 1 || b.Free() != 0 {
		t.Fatalf("permits left free: %d after the first, %d after the second; want 1 and 0", a.Free(), b.Free())
	}
	if _, err := sem.TryAcquire(ctx, 1); !errors.Is(err, kahuna.ErrBusy) {
		t.Fatalf("third permit of 2: %v, want busy", err)
	}
	freed := a.Grants()[0]
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := sem.TryAcquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if g := c.Grants()[0]; g.Slot != freed.Slot || g.Token <= freed.Token || c.FencingToken() != g.Token {
		t.Fatalf("regrant of slot %d: %+v (token %d), want the same slot with a higher token than %d", freed.Slot, g, c.FencingToken(), freed.Token)
	}
	if got, want := c.FenceName(c.Grants()[0]), "semaphore:builders/"+string(rune('0'+freed.Slot)); got != want {
		t.Fatalf("FenceName = %q, want %q", got, want)
	}
}

// A request for two permits waits at the head of the queue; one for a
// single permit behind it is not served first, although one is free.
func TestSemaphoreWaitersAreServedInOrder(t *testing.T) {
	ctx := context.Background()
	n := openNode(t, kahuna.Config{})
	sem := kahuna.NewSemaphore(n, "pool", 2)
	hold, err := sem.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		p   *kahuna.Permit
		err error
	}
	big, small := make(chan res, 1), make(chan res, 1)
	go func() { p, err := sem.Acquire(ctx, 2); big <- res{p, err} }()
	waitUntil(t, "two permits are asked for", func() bool { return n.Stats().Waiters == 1 })
	go func() { p, err := sem.Acquire(ctx, 1); small <- res{p, err} }()
	waitUntil(t, "one permit is asked for behind it", func() bool { return n.Stats().Waiters == 2 })
	if err := hold.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-big
	if r.err != nil || len(r.p.Grants()) != 2 {
		t.Fatalf("two permits: %+v", r)
	}
	select {
	case s := <-small:
		t.Fatalf("the single permit was granted while two were held of 2: %+v", s)
	default:
	}
	if err := r.p.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if s := <-small; s.err != nil || len(s.p.Grants()) != 1 {
		t.Fatalf("one permit: %+v", s)
	}
}

func TestSemaphoreRefusesBadInputAndChangesNothing(t *testing.T) {
	ctx := context.Background()
	n := openNode(t, kahuna.Config{})
	if _, err := kahuna.NewSemaphore(n, "pool", 3).TryAcquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		sem   *kahuna.Semaphore
		n     int
		opts  []kahuna.AcquireOption
		match string
	}{
		{"another limit", kahuna.NewSemaphore(n, "pool", 5), 1, nil, "semaphore limit is 3; this request states 5"},
		{"no permits", kahuna.NewSemaphore(n, "pool", 3), 0, nil, "permits 0 is outside 1..3"},
		{"more than the limit", kahuna.NewSemaphore(n, "pool", 3), 4, nil, "permits 4 is outside 1..3"},
		{"limit 0", kahuna.NewSemaphore(n, "other", 0), 1, nil, "limit 0 is outside 1..256"},
		{"limit over the maximum", kahuna.NewSemaphore(n, "other", kahuna.MaxPermits+1), 1, nil, "limit 257"},
		{"ephemeral", kahuna.NewSemaphore(n, "pool", 3), 1, []kahuna.AcquireOption{kahuna.WithDurability(kahuna.Ephemeral)}, "persistent"},
		{"empty name", kahuna.NewSemaphore(n, "", 3), 1, nil, "semaphore name is empty"},
	}
	for _, c := range cases {
		_, err := c.sem.TryAcquire(ctx, c.n, c.opts...)
		st, reason, ok := statusOf(err)
		if !ok || st != kahuna.InvalidInput || !strings.Contains(reason, c.match) {
			t.Errorf("%s: %v, want InvalidInput %q", c.name, err, c.match)
		}
	}
	// A lock call on the semaphore's name is refused too: one name, one kind.
	if r, err := n.TryLock(ctx, "semaphore:pool", []byte("o"), time.Second, kahuna.Persistent); err != nil || r.Status != kahuna.InvalidInput {
		t.Errorf("lock on a semaphore's name: %+v %v", r, err)
	}
	// Nothing changed: the two other permits of 3 are there.
	if p, err := kahuna.NewSemaphore(n, "pool", 3).TryAcquire(ctx, 2); err != nil || len(p.Grants()) != 2 {
		t.Fatalf("after the refusals: %v", err)
	}
}

// Permits are persistent: they survive a restart, and their holder takes
// them back with the same tokens.
func TestSemaphorePermitsSurviveRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	n, err := kahuna.Open(kahuna.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	owner := kahuna.NewOwner()
	p, err := kahuna.NewSemaphore(n, "pool", 2).TryAcquire(ctx, 2, kahuna.WithOwner(owner), kahuna.WithTTL(time.Minute))
	if err != nil {
		n.Close()
		t.Fatal(err)
	}
	before := p.Grants()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n = openNode(t, kahuna.Config{DataDir: dir})
	sem := kahuna.NewSemaphore(n, "pool", 2)
	if _, err := sem.TryAcquire(ctx, 1); !errors.Is(err, kahuna.ErrBusy) {
		t.Fatalf("a permit after the restart: %v, want busy (both held)", err)
	}
	again, err := sem.TryAcquire(ctx, 2, kahuna.WithOwner(owner), kahuna.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if got := again.Grants(); len(got) != 2 || got[0] != before[0] || got[1] != before[1] {
		t.Fatalf("taken back: %v, want %v", got, before)
	}
}

// A permit whose lease lapses is lost to its holder (its Context ends) and
// granted to a waiter with a higher token for its slot.
func TestSemaphoreLapsedPermitGoesToTheWaiter(t *testing.T) {
	ctx := context.Background()
	n := openNode(t, kahuna.Config{})
	sem := kahuna.NewSemaphore(n, "pool", 1)
	old, err := sem.TryAcquire(ctx, 1, kahuna.WithTTL(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	next, err := sem.Acquire(ctx, 1) // waits on the server for the lapse
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-old.Context().Done():
	default:
		t.Fatal("the old permit's Context is live while its slot is granted again")
	}
	if g, o := next.Grants()[0], old.Grants()[0]; g.Slot != o.Slot || g.Token != o.Token+1 {
		t.Fatalf("next %+v, old %+v: want the same slot, next generation", g, o)
	}
}

// plainLocker (native_test.go) has the Locker methods alone: no way to
// send a request whole.
func TestSemaphoreNeedsALockerThatCarriesPermits(t *testing.T) {
	n := openNode(t, kahuna.Config{})
	_, err := kahuna.NewSemaphore(plainLocker{n}, "pool", 1).TryAcquire(context.Background(), 1)
	if !errors.Is(err, kahuna.ErrNoSemaphores) {
		t.Fatalf("semaphore over a plain Locker: %v", err)
	}
}

// SetLimit grows a semaphore online (a waiter is let in at once) and
// shrinks it without revoking a permit (nothing is granted until fewer
// than the new limit are held); other processes that state the old limit
// are told both; the limit and the kept slots survive a restart.
func TestSemaphoreSetLimit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	n, err := kahuna.Open(kahuna.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { n.Close() }()
	sem := kahuna.NewSemaphore(n, "runners", 1)
	a, err := sem.Acquire(ctx, 1, kahuna.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// One stating 2 while the server holds 1 is refused at once, naming
	// both; one stating 1 waits in the queue.
	if _, err := kahuna.NewSemaphore(n, "runners", 2).TryAcquire(ctx, 1); err == nil || !strings.Contains(err.Error(), "semaphore limit is 1; this request states 2") {
		t.Fatalf("a permit stating another limit: %v", err)
	}
	waiter := make(chan *kahuna.Permit, 1)
	go func() {
		p, err := kahuna.NewSemaphore(n, "runners", 1).Acquire(ctx, 1, kahuna.WithTTL(time.Minute))
		if err != nil {
			t.Errorf("the waiter: %v", err)
		}
		waiter <- p
	}()
	waiters(t, n, 1)
	// Growing lets the waiter in at once: it was queued under the old
	// limit, and follows the resize.
	if err := sem.SetLimit(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if sem.Limit() != 2 {
		t.Fatalf("Limit() = %d after SetLimit(2)", sem.Limit())
	}
	b := <-waiter
	if b == nil || b.Grants()[0].Slot != 1 || b.Free() != 0 {
		t.Fatalf("the waiter after the growth: %v", b)
	}
	// Shrink to 1 with both held: nothing revoked, nothing granted.
	if err := sem.SetLimit(ctx, 1); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*kahuna.Permit{a, b} {
		if err := p.Extend(ctx, time.Minute); err != nil {
			t.Fatalf("a permit held through the shrink: %v", err)
		}
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sem.TryAcquire(ctx, 1); !errors.Is(err, kahuna.ErrBusy) {
		t.Fatalf("a permit of 1 while slot 1 is held: %v, want busy", err)
	}
	st, reason, _ := statusOf(kahuna.NewSemaphore(n, "runners", 2).SetLimit(ctx, 0))
	if st != kahuna.InvalidInput || !strings.Contains(reason, "limit 0") {
		t.Fatalf("SetLimit(0): %v %q", st, reason)
	}
	_, err = kahuna.NewSemaphore(n, "runners", 2).TryAcquire(ctx, 1)
	if st, reason, _ := statusOf(err); st != kahuna.InvalidInput || !strings.Contains(reason, "semaphore limit is 1; this request states 2") {
		t.Fatalf("the old limit after the shrink: %v", err)
	}

	// After a restart: still 1, slot 1 still held, slot 0 goes on from a's token.
	tokenA := a.Grants()[0].Token
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if n, err = kahuna.Open(kahuna.Config{DataDir: dir}); err != nil {
		t.Fatal(err)
	}
	sem = kahuna.NewSemaphore(n, "runners", 1)
	if _, err := sem.TryAcquire(ctx, 1); !errors.Is(err, kahuna.ErrBusy) {
		t.Fatalf("after a restart, a permit while slot 1 is held: %v, want busy", err)
	}
	if r, _ := n.Unlock(ctx, kahuna.SemaphorePrefix+"runners", b.Owner(), kahuna.Persistent); r.Status != kahuna.Unlocked {
		t.Fatalf("unlock b after the restart: %v", r.Status)
	}
	c, err := sem.TryAcquire(ctx, 1)
	if err != nil || c.Grants()[0].Slot != 0 || c.Grants()[0].Token <= tokenA {
		t.Fatalf("after the restart: %v, %v (slot 0 was at token %d)", c, err, tokenA)
	}
}
