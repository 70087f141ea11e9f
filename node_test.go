package kahuna_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
)

// clock is a test clock that only moves when told.
type clock struct{ now atomic.Pointer[time.Time] }

func newClock() *clock {
	c := &clock{}
	t := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	c.now.Store(&t)
	return c
}
func (c *clock) Now() time.Time          { return *c.now.Load() }
func (c *clock) Advance(d time.Duration) { t := c.Now().Add(d); c.now.Store(&t) }

func openNode(t testing.TB, cfg kahuna.Config) *kahuna.Node {
	t.Helper()
	n, err := kahuna.Open(cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = n.Close() })
	return n
}

var durabilities = []kahuna.Durability{kahuna.Ephemeral, kahuna.Persistent}

// step is one call in a semantics scenario and what it must answer.
type step struct {
	op      string // lock, extend, unlock, get, advance
	owner   string
	ttl     time.Duration
	status  kahuna.Status
	token   int64
	expires time.Duration // for get: expiry relative to the scenario start
}

// TestSemantics pins every row of the semantics table (docs/semantics.md) through the embedded node, for
// both durabilities.
func TestSemantics(t *testing.T) {
	for _, d := range durabilities {
		t.Run(d.String(), func(t *testing.T) {
			clk := newClock()
			n := openNode(t, kahuna.Config{Clock: clk.Now, Partitions: 2, LockActors: 2})
			runScenarios(t, "node", n, clk, d)
		})
	}
}

const sec = time.Second

var semanticsScenarios = []struct {
	name  string
	steps []step
}{
	{"never-seen resource locks with token 0", []step{
		{op: "lock", owner: "a", ttl: 10 * sec, status: kahuna.Locked, token: 0}}},
	{"other owner while held is busy", []step{
		{op: "lock", owner: "a", ttl: 10 * sec, status: kahuna.Locked},
		{op: "lock", owner: "b", ttl: 10 * sec, status: kahuna.Busy, token: 0}}},
	{"same owner while held gets the same token and no refresh", []step{
		{op: "lock", owner: "a", ttl: 10 * sec, status: kahuna.Locked},
		{op: "advance", ttl: 5 * sec},
		{op: "lock", owner: "a", ttl: 60 * sec, status: kahuna.Locked, token: 0},
		{op: "get", status: kahuna.Got, token: 0, owner: "a", expires: 10 * sec},
		{op: "advance", ttl: 5*sec + time.Millisecond},
		{op: "lock", owner: "b", ttl: 10 * sec, status: kahuna.Locked, token: 1}}},
	{"anyone after expiry gets token+1", []step{
		{op: "lock", owner: "a", ttl: 2 * sec, status: kahuna.Locked},
		{op: "advance", ttl: 2*sec + time.Millisecond},
		{op: "lock", owner: "b", ttl: 2 * sec, status: kahuna.Locked, token: 1},
		{op: "advance", ttl: 3 * sec},
		{op: "lock", owner: "b", ttl: 2 * sec, status: kahuna.Locked, token: 2}}},
	{"anyone after unlock gets token+1", []step{
		{op: "lock", owner: "a", ttl: 10 * sec, status: kahuna.Locked},
		{op: "unlock", owner: "a", status: kahuna.Unlocked},
		{op: "lock", owner: "a", ttl: 10 * sec, status: kahuna.Locked, token: 1}}},
	{"extend unknown", []step{
		{op: "extend", owner: "a", ttl: sec, status: kahuna.LockDoesNotExist}}},
	{"extend unlocked", []step{
		{op: "lock", owner: "a", ttl: 10 * sec, status: kahuna.Locked},
		{op: "unlock", owner: "a", status: kahuna.Unlocked},
		{op: "extend", owner: "a", ttl: sec, status: kahuna.LockDoesNotExist}}},
	{"extend expired checks expiry before owner", []step{
		{op: "lock", owner: "a", ttl: sec, status: kahuna.Locked},
		{op: "advance", ttl: 2 * sec},
		{op: "extend", owner: "b", ttl: sec, status: kahuna.LockDoesNotExist},
		{op: "extend", owner: "a", ttl: sec, status: kahuna.LockDoesNotExist}}},
	{"extend by non-owner", []step{
		{op: "lock", owner: "a", ttl: 10 * sec, status: kahuna.Locked},
		{op: "extend", owner: "b", ttl: sec, status: kahuna.InvalidOwner}}},
	{"extend by owner sets now+ttl, may shorten, keeps token", []step{
		{op: "lock", owner: "a", ttl: 2 * sec, status: kahuna.Locked},
		{op: "unlock", owner: "a", status: kahuna.Unlocked},
		{op: "lock", owner: "a", ttl: 10 * sec, status: kahuna.Locked, token: 1},
		{op: "advance", ttl: sec},
		{op: "extend", owner: "a", ttl: 30 * sec, status: kahuna.Extended, token: 1},
		{op: "get", status: kahuna.Got, owner: "a", token: 1, expires: 31 * sec},
		{op: "extend", owner: "a", ttl: sec, status: kahuna.Extended, token: 1},
		{op: "get", status: kahuna.Got, owner: "a", token: 1, expires: 2 * sec},
		{op: "advance", ttl: sec + time.Millisecond},
		{op: "lock", owner: "b", ttl: sec, status: kahuna.Locked, token: 2}}},
	{"unlock unknown", []step{
		{op: "unlock", owner: "a", status: kahuna.LockDoesNotExist}}},
	{"unlock already unlocked", []step{
		{op: "lock", owner: "a", ttl: 10 * sec, status: kahuna.Locked},
		{op: "unlock", owner: "a", status: kahuna.Unlocked},
		{op: "unlock", owner: "a", status: kahuna.LockDoesNotExist}}},
	{"unlock by non-owner, live or expired", []step{
		{op: "lock", owner: "a", ttl: sec, status: kahuna.Locked},
		{op: "unlock", owner: "b", status: kahuna.InvalidOwner},
		{op: "advance", ttl: 2 * sec},
		{op: "unlock", owner: "b", status: kahuna.InvalidOwner},
		{op: "get", status: kahuna.LockDoesNotExist}}},
	{"unlock by owner of an expired lock not yet retaken", []step{
		{op: "lock", owner: "a", ttl: sec, status: kahuna.Locked},
		{op: "advance", ttl: 2 * sec},
		{op: "unlock", owner: "a", status: kahuna.Unlocked},
		{op: "lock", owner: "b", ttl: sec, status: kahuna.Locked, token: 1}}},
	{"get unknown, unlocked, expired", []step{
		{op: "get", status: kahuna.LockDoesNotExist},
		{op: "lock", owner: "a", ttl: sec, status: kahuna.Locked},
		{op: "get", status: kahuna.Got, owner: "a", token: 0, expires: sec},
		{op: "advance", ttl: sec},
		{op: "get", status: kahuna.Got, owner: "a", token: 0, expires: sec},
		{op: "advance", ttl: time.Millisecond},
		{op: "get", status: kahuna.LockDoesNotExist},
		{op: "lock", owner: "a", ttl: sec, status: kahuna.Locked, token: 1},
		{op: "unlock", owner: "a", status: kahuna.Unlocked},
		{op: "get", status: kahuna.LockDoesNotExist}}},
}

func runScenarios(t *testing.T, prefix string, l kahuna.Locker, clk *clock, d kahuna.Durability) {
	for i, sc := range semanticsScenarios {
		t.Run(sc.name, func(t *testing.T) {
			res := fmt.Sprintf("%s/sem/%d/%s", prefix, i, strings.ReplaceAll(sc.name, " ", "-"))
			start := clk.Now()
			for j, st := range sc.steps {
				runStep(t, l, clk, res, d, start, j, st)
			}
		})
	}
}

func runStep(t *testing.T, n kahuna.Locker, clk *clock, res string, d kahuna.Durability, start time.Time, j int, st step) {
	t.Helper()
	ctx := context.Background()
	var r kahuna.Result
	var info kahuna.LockInfo
	var err error
	switch st.op {
	case "advance":
		clk.Advance(st.ttl)
		return
	case "lock":
		r, err = n.TryLock(ctx, res, []byte(st.owner), st.ttl, d)
	case "extend":
		r, err = n.Extend(ctx, res, []byte(st.owner), st.ttl, d)
	case "unlock":
		r, err = n.Unlock(ctx, res, []byte(st.owner), d)
	case "get":
		info, r, err = n.Get(ctx, res, d)
	}
	if err != nil {
		t.Fatalf("step %d %s: %v", j, st.op, err)
	}
	if r.Status != st.status || r.FencingToken != st.token {
		t.Fatalf("step %d %s by %q: got %v token %d, want %v token %d", j, st.op, st.owner, r.Status, r.FencingToken, st.status, st.token)
	}
	if st.op == "get" && st.status == kahuna.Got {
		wantExp := start.Add(st.expires).UnixMilli()
		if string(info.Owner) != st.owner || info.FencingToken != st.token || info.Expires.UnixMilli() != wantExp {
			t.Fatalf("step %d get: info %+v (expires %d), want owner %q token %d expires %d", j, info, info.Expires.UnixMilli(), st.owner, st.token, wantExp)
		}
	}
	if st.op == "get" && st.status != kahuna.Got && (info.Owner != nil || info.FencingToken != 0) {
		t.Fatalf("step %d get: non-Got must carry no info, got %+v", j, info)
	}
}

// TestInvalidInputChangesNothing: bad requests get InvalidInput, token 0,
// and leave the lock as it was.
func TestInvalidInputChangesNothing(t *testing.T) {
	n := openNode(t, kahuna.Config{Partitions: 2})
	ctx := context.Background()
	big := strings.Repeat("r", 1025)
	for _, d := range durabilities {
		res := "inv/" + d.String()
		if r, _ := n.TryLock(ctx, res, []byte("a"), time.Hour, d); r.Status != kahuna.Locked {
			t.Fatalf("setup: %v", r.Status)
		}
		bad := []struct {
			name string
			call func() (kahuna.Result, error)
		}{
			{"lock empty resource", func() (kahuna.Result, error) { return n.TryLock(ctx, "", []byte("a"), time.Second, d) }},
			{"lock empty owner", func() (kahuna.Result, error) { return n.TryLock(ctx, res, nil, time.Second, d) }},
			{"lock zero ttl", func() (kahuna.Result, error) { return n.TryLock(ctx, res, []byte("b"), 0, d) }},
			{"lock negative ttl", func() (kahuna.Result, error) { return n.TryLock(ctx, res, []byte("b"), -time.Second, d) }},
			{"lock absurd ttl", func() (kahuna.Result, error) { return n.TryLock(ctx, res, []byte("b"), 1000*24*time.Hour, d) }},
			{"lock oversized resource", func() (kahuna.Result, error) { return n.TryLock(ctx, big, []byte("a"), time.Second, d) }},
			{"lock oversized owner", func() (kahuna.Result, error) { return n.TryLock(ctx, res, []byte(big), time.Second, d) }},
			{"lock unknown durability", func() (kahuna.Result, error) { return n.TryLock(ctx, res, []byte("b"), time.Second, 7) }},
			{"extend empty owner", func() (kahuna.Result, error) { return n.Extend(ctx, res, []byte{}, time.Second, d) }},
			{"extend zero ttl", func() (kahuna.Result, error) { return n.Extend(ctx, res, []byte("a"), 0, d) }},
			{"extend empty resource", func() (kahuna.Result, error) { return n.Extend(ctx, "", []byte("a"), time.Second, d) }},
			{"unlock empty owner", func() (kahuna.Result, error) { return n.Unlock(ctx, res, nil, d) }},
			{"unlock empty resource", func() (kahuna.Result, error) { return n.Unlock(ctx, "", []byte("a"), d) }},
			{"unlock unknown durability", func() (kahuna.Result, error) { return n.Unlock(ctx, res, []byte("a"), -1) }},
			{"get empty resource", func() (kahuna.Result, error) { _, r, err := n.Get(ctx, "", d); return r, err }},
			{"get oversized resource", func() (kahuna.Result, error) { _, r, err := n.Get(ctx, big, d); return r, err }},
			{"get unknown durability", func() (kahuna.Result, error) { _, r, err := n.Get(ctx, res, 2); return r, err }},
		}
		for _, b := range bad {
			r, err := b.call()
			if err != nil || r.Status != kahuna.InvalidInput || r.FencingToken != 0 {
				t.Errorf("%s %s: got %v token %d err %v, want InvalidInput", d, b.name, r.Status, r.FencingToken, err)
			}
		}
		info, r, err := n.Get(ctx, res, d)
		if err != nil || r.Status != kahuna.Got || string(info.Owner) != "a" || info.FencingToken != 0 {
			t.Fatalf("%s: lock changed by bad input: %v %+v %v", d, r.Status, info, err)
		}
	}
}

// TestPersistentLocksSurviveRestart: owner, expiry and token of persistent
// locks come back after Close/Open on the same DataDir; ephemeral ones do not
// (fencing-only: with the grace, the restarted node would first wait out
// their lease, TestEphemeralGraceAfterRestart).
func TestPersistentLocksSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	n, err := kahuna.Open(kahuna.Config{DataDir: dir, Partitions: 4, EphemeralFencingOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	// Token 2 for "p/held": grant, unlock, grant, unlock, grant.
	for i := 0; i < 2; i++ {
		n.TryLock(ctx, "p/held", []byte("x"), time.Hour, kahuna.Persistent)
		n.Unlock(ctx, "p/held", []byte("x"), kahuna.Persistent)
	}
	if r, _ := n.TryLock(ctx, "p/held", []byte("owner-1"), time.Hour, kahuna.Persistent); r.FencingToken != 2 {
		t.Fatalf("setup token %d", r.FencingToken)
	}
	n.TryLock(ctx, "p/released", []byte("owner-2"), time.Hour, kahuna.Persistent)
	n.Unlock(ctx, "p/released", []byte("owner-2"), kahuna.Persistent)
	// An ephemeral lock on a partition of its own: one that shares a
	// partition with p/released would raise that partition's ephemeral
	// token reach, and the next grant there after the restart would take
	// a token from the reach instead of 1.
	eph := "e/held"
	for i := 0; n.Partition(eph) == n.Partition("p/released") || n.Partition(eph) == n.Partition("p/held"); i++ {
		eph = fmt.Sprintf("e%d/held", i)
	}
	n.TryLock(ctx, eph, []byte("owner-3"), time.Hour, kahuna.Ephemeral)
	before, _, _ := n.Get(ctx, "p/held", kahuna.Persistent)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}

	n = openNode(t, kahuna.Config{DataDir: dir, Partitions: 4, EphemeralFencingOnly: true})
	after, r, err := n.Get(ctx, "p/held", kahuna.Persistent)
	if err != nil || r.Status != kahuna.Got {
		t.Fatalf("after restart: %v %v", r.Status, err)
	}
	if !bytes.Equal(after.Owner, before.Owner) || !after.Expires.Equal(before.Expires) || after.FencingToken != 2 {
		t.Fatalf("after restart %+v, before %+v", after, before)
	}
	if r, _ := n.TryLock(ctx, "p/held", []byte("intruder"), time.Hour, kahuna.Persistent); r.Status != kahuna.Busy {
		t.Fatalf("held lock after restart: %v", r.Status)
	}
	if r, _ := n.TryLock(ctx, "p/released", []byte("next"), time.Hour, kahuna.Persistent); r.Status != kahuna.Locked || r.FencingToken != 1 {
		t.Fatalf("released lock after restart: %v token %d, want Locked 1", r.Status, r.FencingToken)
	}
	if _, r, _ := n.Get(ctx, eph, kahuna.Ephemeral); r.Status != kahuna.LockDoesNotExist {
		t.Fatalf("ephemeral lock survived restart: %v", r.Status)
	}
}

// TestRacingOwnersNeverShareALock: many goroutines race for one resource;
// there is never more than one holder, and the grants' tokens are unique
// and dense (0, 1, 2, ...).
func TestRacingOwnersNeverShareALock(t *testing.T) {
	t.Parallel()
	for _, d := range durabilities {
		t.Run(d.String(), func(t *testing.T) {
			n := openNode(t, kahuna.Config{LockActors: 1})
			const workers, grants = 32, 300
			var (
				holder  atomic.Int64
				granted atomic.Int64
				mu      sync.Mutex
				tokens  []int64
				wg      sync.WaitGroup
			)
			errc := make(chan error, workers)
			for w := 1; w <= workers; w++ {
				wg.Add(1)
				go func(id int64) {
					defer wg.Done()
					owner := []byte(fmt.Sprintf("owner-%d", id))
					ctx := context.Background()
					for granted.Load() < grants {
						r, err := n.TryLock(ctx, "contended", owner, time.Hour, d)
						if err != nil {
							errc <- err
							return
						}
						if r.Status == kahuna.Busy {
							continue
						}
						if r.Status != kahuna.Locked {
							errc <- fmt.Errorf("lock: %v", r.Status)
							return
						}
						if !holder.CompareAndSwap(0, id) {
							errc <- fmt.Errorf("owner %d granted while %d holds the lock", id, holder.Load())
							return
						}
						mu.Lock()
						tokens = append(tokens, r.FencingToken)
						mu.Unlock()
						granted.Add(1)
						holder.Store(0)
						if r, err := n.Unlock(ctx, "contended", owner, d); err != nil || r.Status != kahuna.Unlocked {
							errc <- fmt.Errorf("unlock: %v %v", r.Status, err)
							return
						}
					}
				}(int64(w))
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Fatal(err)
			}
			slices.Sort(tokens)
			for i, tok := range tokens {
				if tok != int64(i) {
					t.Fatalf("tokens not unique and dense at %d: %v", i, tokens[max(0, i-3):min(len(tokens), i+3)])
				}
			}
		})
	}
}

// TestCloseWithCallsInFlight: Close while callers hammer the node; every
// call ends with a status or ErrClosed, nothing hangs, Close is idempotent.
func TestCloseWithCallsInFlight(t *testing.T) {
	n, err := kahuna.Open(kahuna.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var calls, closedErrs atomic.Int64
	started := make(chan struct{})
	var once sync.Once
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			owner := []byte(fmt.Sprint(w))
			for i := 0; ; i++ {
				d := durabilities[i%2]
				r, err := n.TryLock(context.Background(), fmt.Sprintf("c/%d", i%50), owner, time.Minute, d)
				calls.Add(1)
				once.Do(func() { close(started) })
				if errors.Is(err, kahuna.ErrClosed) {
					closedErrs.Add(1)
					return
				}
				if err != nil {
					t.Errorf("unexpected error %v", err)
					return
				}
				switch r.Status {
				case kahuna.Locked, kahuna.Busy, kahuna.MustRetry, kahuna.Errored:
				default:
					t.Errorf("unexpected status %v", r.Status)
					return
				}
			}
		}(w)
	}
	<-started
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if closedErrs.Load() != 16 {
		t.Fatalf("%d of 16 workers saw ErrClosed", closedErrs.Load())
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := n.TryLock(context.Background(), "x", []byte("o"), time.Second, kahuna.Ephemeral); !errors.Is(err, kahuna.ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}

// TestEvictionThroughConfig drives the cache collector through Config with
// one lock actor and a tiny TTL: idle entries go, a live ephemeral lease
// stays, and an evicted persistent lock is reloaded with its token.
func TestEvictionThroughConfig(t *testing.T) {
	clk := newClock()
	n := openNode(t, kahuna.Config{LockActors: 1, CacheEntryTTL: time.Nanosecond, CacheEntriesToRemove: 1000, Clock: clk.Now})
	ctx := context.Background()
	n.TryLock(ctx, "live", []byte("a"), time.Hour, kahuna.Ephemeral)
	n.TryLock(ctx, "durable", []byte("a"), time.Hour, kahuna.Persistent)
	for i := 0; n.Stats().CachedEntries < 300; i++ { // released locks: names never locked take no entry
		n.TryLock(ctx, fmt.Sprintf("idle-%d", i), []byte("a"), time.Hour, kahuna.Ephemeral)
		n.Unlock(ctx, fmt.Sprintf("idle-%d", i), []byte("a"), kahuna.Ephemeral)
	}
	clk.Advance(time.Second)
	for i := 0; i < 500 && n.Stats().Evictions == 0; i++ {
		n.Get(ctx, "idle-0", kahuna.Ephemeral)
	}
	n.Get(ctx, "idle-0", kahuna.Ephemeral) // answered after the pass is over
	s := n.Stats()
	if s.Evictions < 290 || s.CachedEntries > 10 {
		t.Fatalf("after collection: %+v", s)
	}
	if r, _ := n.TryLock(ctx, "live", []byte("b"), time.Hour, kahuna.Ephemeral); r.Status != kahuna.Busy {
		t.Fatalf("live ephemeral lock evicted: %v", r.Status)
	}
	if r, _ := n.TryLock(ctx, "durable", []byte("b"), time.Hour, kahuna.Persistent); r.Status != kahuna.Busy {
		t.Fatalf("evicted persistent lock not reloaded: %v", r.Status)
	}
}

func TestStatsAndHeldLocks(t *testing.T) {
	clk := newClock()
	n := openNode(t, kahuna.Config{Clock: clk.Now})
	ctx := context.Background()
	n.TryLock(ctx, "s/e1", []byte("a"), time.Hour, kahuna.Ephemeral)
	n.TryLock(ctx, "s/e2", []byte("a"), time.Second, kahuna.Ephemeral)
	n.TryLock(ctx, "s/p1", []byte("a"), time.Hour, kahuna.Persistent)
	n.TryLock(ctx, "s/p2", []byte("a"), time.Hour, kahuna.Persistent)
	n.Unlock(ctx, "s/p2", []byte("a"), kahuna.Persistent)
	clk.Advance(2 * time.Second)
	e, p, err := n.HeldLocks(ctx)
	if err != nil || e != 1 || p != 1 {
		t.Fatalf("held %d ephemeral, %d persistent (%v), want 1 and 1", e, p, err)
	}
	if s := n.Stats(); s.RaftRecords != 3 || s.RaftProposals == 0 || s.RaftProposals > 3 || s.CachedEntries != 4 {
		t.Fatalf("stats %+v", s)
	}
}
