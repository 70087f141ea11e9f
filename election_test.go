package kahuna_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/lease"
)

func openElectionNode(t *testing.T, cfg kahuna.Config) *kahuna.Node {
	t.Helper()
	n, err := kahuna.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// cutLocker is a candidate's link to the node: once cut, its calls hang
// until their context ends, as over a network that dropped the link.
// onUnlock, if set, runs as an Unlock is sent.
type cutLocker struct {
	kahuna.WaitLocker
	cut      atomic.Bool
	cutOne   atomic.Pointer[string] // only this resource's Extends hang
	onUnlock func()
}

func (c *cutLocker) hang(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

func (c *cutLocker) Extend(ctx context.Context, resource string, owner []byte, ttl time.Duration, d kahuna.Durability) (kahuna.Result, error) {
	if one := c.cutOne.Load(); c.cut.Load() || one != nil && *one == resource {
		return kahuna.Result{}, c.hang(ctx)
	}
	return c.WaitLocker.Extend(ctx, resource, owner, ttl, d)
}

// Do takes a request whole, as a node does: cut, an Extend or Unlock
// hangs; a batch that names cutOne gets the others' answers from the node
// and Errored for cutOne (its share lost on the way: outcome unknown).
func (c *cutLocker) Do(ctx context.Context, req lease.Checked) (kahuna.LockInfo, kahuna.Result, error) {
	r := req.Request()
	switch r.Op {
	case lease.Unlock:
		if c.onUnlock != nil {
			c.onUnlock()
		}
		if c.cut.Load() {
			return kahuna.LockInfo{}, kahuna.Result{}, c.hang(ctx)
		}
	case lease.Extend:
		if c.cut.Load() {
			return kahuna.LockInfo{}, kahuna.Result{}, c.hang(ctx)
		}
		one := c.cutOne.Load()
		if one == nil {
			break
		}
		if !r.IsBatch() {
			if *one == r.Resource {
				return kahuna.LockInfo{}, kahuna.Result{}, c.hang(ctx)
			}
			break
		}
		names := r.Names()
		at := slices.Index(names, *one)
		if at < 0 {
			break
		}
		rest := slices.Delete(slices.Clone(names), at, at+1)
		var each []kahuna.Status
		if len(rest) > 0 {
			sub := r
			sub.Resource, sub.Also = rest[0], rest[1:]
			if len(sub.Also) == 0 {
				sub.Also = nil
			}
			checked, why := sub.Check()
			if why != "" {
				return kahuna.LockInfo{}, kahuna.Result{}, errors.New(why)
			}
			_, res, err := lease.Do(ctx, c.WaitLocker, checked)
			if err != nil {
				return kahuna.LockInfo{}, res, err
			}
			each = res.Each
			if sub.Also == nil {
				each = []kahuna.Status{res.Status}
			}
		}
		each = slices.Insert(each, at, kahuna.Errored)
		return kahuna.LockInfo{}, kahuna.Result{Status: kahuna.Errored, Each: each}, nil
	}
	return lease.Do(ctx, c.WaitLocker, req)
}

func (c *cutLocker) Unlock(ctx context.Context, resource string, owner []byte, d kahuna.Durability) (kahuna.Result, error) {
	if c.onUnlock != nil {
		c.onUnlock()
	}
	if c.cut.Load() {
		return kahuna.Result{}, c.hang(ctx)
	}
	return c.WaitLocker.Unlock(ctx, resource, owner, d)
}

// campaignAsync campaigns in the background; the channel gets the result.
func campaignAsync(ctx context.Context, l kahuna.Locker, name, value string, opts ...kahuna.AcquireOption) <-chan campaignResult {
	c := make(chan campaignResult, 1)
	go func() {
		ld, err := kahuna.Campaign(ctx, l, name, []byte(value), opts...)
		c <- campaignResult{ld, err}
	}()
	return c
}

type campaignResult struct {
	ld  *kahuna.Leadership
	err error
}

// waitQueued waits until n waits on the node in some queue (a campaign
// that has reached the server's queue).
func waitQueued(t *testing.T, n *kahuna.Node, waiters int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n.Stats().Waiters < waiters {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiting, want %d", n.Stats().Waiters, waiters)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestElectionResignHandsOver: a waiting candidate is elected when the
// leader resigns, with a greater epoch; the leader's Context has ended
// (ErrResigned) before its release was sent.
func TestElectionResignHandsOver(t *testing.T) {
	ctx := context.Background()
	for _, d := range []kahuna.Durability{kahuna.Ephemeral, kahuna.Persistent} {
		t.Run(d.String(), func(t *testing.T) {
			n := openElectionNode(t, kahuna.Config{})
			la := &cutLocker{WaitLocker: n}
			a, err := kahuna.Campaign(ctx, la, "jobs", []byte("a"), kahuna.WithDurability(d))
			if err != nil {
				t.Fatal(err)
			}
			var endedBeforeRelease atomic.Bool
			la.onUnlock = func() { endedBeforeRelease.Store(a.Context().Err() != nil) }

			b := campaignAsync(ctx, n, "jobs", "b", kahuna.WithDurability(d))
			waitQueued(t, n, 1)
			if info, err := kahuna.Leader(ctx, n, "jobs"); err != nil || string(info.Value) != "a" || info.Epoch != a.Epoch() {
				t.Fatalf("Leader = %+v, %v; want a at epoch %d", info, err, a.Epoch())
			}
			if err := a.Resign(ctx); err != nil {
				t.Fatal(err)
			}
			if !endedBeforeRelease.Load() {
				t.Fatal("the leader's Context was live when its release was sent")
			}
			if cause := context.Cause(a.Context()); !errors.Is(cause, kahuna.ErrResigned) {
				t.Fatalf("resigned leader's cause %v, want ErrResigned", cause)
			}
			r := <-b
			if r.err != nil {
				t.Fatal(r.err)
			}
			if r.ld.Epoch() <= a.Epoch() {
				t.Fatalf("epoch %d after %d", r.ld.Epoch(), a.Epoch())
			}
			if info, err := kahuna.Leader(ctx, n, "jobs"); err != nil || string(info.Value) != "b" || info.Epoch != r.ld.Epoch() {
				t.Fatalf("Leader = %+v, %v; want b at epoch %d", info, err, r.ld.Epoch())
			}
			if err := a.Resign(ctx); err != nil {
				t.Fatalf("second Resign: %v, want nil (idempotent)", err)
			}
			if err := r.ld.Resign(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := kahuna.Leader(ctx, n, "jobs"); !errors.Is(err, kahuna.ErrNoLeader) {
				t.Fatalf("Leader after every resign: %v, want ErrNoLeader", err)
			}
		})
	}
}

// TestElectionFailoverContextEndsFirst: a leader whose renewals stop
// reaching the node (its link cut) loses the election when its lease
// ends, and its Context has ended by the time the next candidate is
// elected.
func TestElectionFailoverContextEndsFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := openElectionNode(t, kahuna.Config{})
	la := &cutLocker{WaitLocker: n}
	ttl := kahuna.WithTTL(300 * time.Millisecond)
	a, err := kahuna.Campaign(ctx, la, "jobs", []byte("a"), ttl)
	if err != nil {
		t.Fatal(err)
	}
	b := campaignAsync(ctx, n, "jobs", "b", ttl)
	waitQueued(t, n, 1)
	la.cut.Store(true)
	r := <-b
	if r.err != nil {
		t.Fatal(r.err)
	}
	if a.Context().Err() == nil {
		t.Fatal("the old leader's Context is live after the next candidate was elected")
	}
	if !errors.Is(context.Cause(a.Context()), kahuna.ErrLockLost) {
		t.Fatalf("old leader's cause %v, want ErrLockLost", context.Cause(a.Context()))
	}
	select {
	case <-a.Lost():
	default:
		t.Fatal("Lost open after the leadership was lost")
	}
	if r.ld.Epoch() <= a.Epoch() {
		t.Fatalf("epoch %d after %d", r.ld.Epoch(), a.Epoch())
	}
	// Resigning a lost leadership says so and changes nothing.
	la.cut.Store(false)
	err = a.Resign(ctx)
	if !errors.Is(err, kahuna.ErrLockLost) || !strings.Contains(err.Error(), "lost") {
		t.Fatalf("Resign of a lost leadership: %v, want an error matching ErrLockLost", err)
	}
	if info, err := kahuna.Leader(ctx, n, "jobs"); err != nil || string(info.Value) != "b" {
		t.Fatalf("Leader after the old leader's Resign = %+v, %v; want b", info, err)
	}
	// b renews in the background: still the leader after several TTLs.
	time.Sleep(time.Second)
	if r.ld.Context().Err() != nil {
		t.Fatalf("b's leadership ended: %v", context.Cause(r.ld.Context()))
	}
	if err := r.ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestElectionObserve: Observe yields the current state, then each new
// term and each vacancy, once, not renewals; resumed from a revision it
// yields only what came after.
func TestElectionObserve(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := openElectionNode(t, kahuna.Config{})
	events := make(chan kahuna.ElectionEvent, 16)
	go func() {
		for ev, err := range kahuna.Observe(ctx, n, "jobs") {
			if err != nil {
				return
			}
			events <- ev
		}
	}()
	next := func(kind kahuna.ElectionEventKind, value string, epoch int64) kahuna.ElectionEvent {
		t.Helper()
		select {
		case ev := <-events:
			if ev.Kind != kind || string(ev.Value) != value || ev.Epoch != epoch {
				t.Fatalf("event %v %q epoch %d, want %v %q epoch %d", ev.Kind, ev.Value, ev.Epoch, kind, value, epoch)
			}
			return ev
		case <-time.After(10 * time.Second):
			t.Fatalf("no %v event", kind)
		}
		return kahuna.ElectionEvent{}
	}
	next(kahuna.Vacant, "", -1)
	a, err := kahuna.Campaign(ctx, n, "jobs", []byte("a"), kahuna.WithTTL(150*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	next(kahuna.Elected, "a", a.Epoch())
	time.Sleep(500 * time.Millisecond) // several renewals
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	vacant := next(kahuna.Vacant, "", a.Epoch())
	b, err := kahuna.Campaign(ctx, n, "jobs", []byte("b"))
	if err != nil {
		t.Fatal(err)
	}
	elected := next(kahuna.Elected, "b", b.Epoch())
	if b.Epoch() != a.Epoch()+1 {
		t.Fatalf("b's epoch %d, want %d", b.Epoch(), a.Epoch()+1)
	}
	select {
	case ev := <-events:
		t.Fatalf("unexpected event %v %q epoch %d (a renewal?)", ev.Kind, ev.Value, ev.Epoch)
	default:
	}

	// Resumed after the vacancy: b's term, then nothing it saw before.
	resumed, stop := context.WithCancel(ctx)
	defer stop()
	for ev, err := range kahuna.Observe(resumed, n, "jobs", kahuna.WatchFrom(vacant.Revision)) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Kind != kahuna.Elected || ev.Epoch != b.Epoch() || ev.Revision != elected.Revision {
			t.Fatalf("resumed Observe's first event %v epoch %d rev %d, want b's term at rev %d", ev.Kind, ev.Epoch, ev.Revision, elected.Revision)
		}
		break
	}
	if err := b.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	next(kahuna.Vacant, "", b.Epoch())
}

// TestElectionBadInput: each malformed request is refused with a reason
// naming what is wrong, and leaves no leader behind; a cancelled
// campaign is never elected.
func TestElectionBadInput(t *testing.T) {
	ctx := context.Background()
	n := openElectionNode(t, kahuna.Config{})
	for _, tc := range []struct {
		name, election string
		value          []byte
		opts           []kahuna.AcquireOption
		reason         string
	}{
		{"empty name", "", nil, nil, "election name is empty"},
		{"long name", strings.Repeat("n", kahuna.MaxResourceBytes), nil, nil, "election name is 1024 bytes, over the limit of 1015"},
		{"long value", "jobs", make([]byte, kahuna.MaxElectionValue+1), nil, "value is 993 bytes, over the limit of 992"},
		{"long ttl", "jobs", nil, []kahuna.AcquireOption{kahuna.WithTTL(kahuna.MaxTTL + time.Millisecond)}, "ttl"},
		{"negative wait", "jobs", nil, []kahuna.AcquireOption{kahuna.WithWait(-time.Second)}, "wait"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := kahuna.Campaign(ctx, n, tc.election, tc.value, tc.opts...)
			var se *kahuna.StatusError
			if !errors.As(err, &se) || se.Status != kahuna.InvalidInput || !strings.Contains(se.Reason, tc.reason) {
				t.Fatalf("Campaign: %v, want InvalidInput with %q", err, tc.reason)
			}
			if !strings.HasPrefix(err.Error(), "kahuna: campaign ") {
				t.Fatalf("error %q does not say it was the campaign", err)
			}
			if tc.election != "" && len(tc.election) < 100 {
				if _, err := kahuna.Leader(ctx, n, tc.election); !errors.Is(err, kahuna.ErrNoLeader) {
					t.Fatalf("Leader after a refused campaign: %v, want ErrNoLeader", err)
				}
			}
		})
	}
	if _, err := kahuna.Leader(ctx, n, ""); err == nil || !strings.Contains(err.Error(), "election name is empty") {
		t.Fatalf("Leader of an empty name: %v", err)
	}

	// A campaign cancelled while it waits leaves nothing behind.
	a, err := kahuna.Campaign(ctx, n, "jobs", []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	b := campaignAsync(cctx, n, "jobs", "b")
	waitQueued(t, n, 1)
	cancel()
	if r := <-b; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled campaign: %v, want context.Canceled", r.err)
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := kahuna.Leader(ctx, n, "jobs"); !errors.Is(err, kahuna.ErrNoLeader) {
		t.Fatalf("after the leader resigned, with the other campaign cancelled: %+v, %v; want ErrNoLeader", info, err)
	}
}

// TestElectionEpochAcrossRestart: a leader that crashed (its node closed
// without a resign) is followed, after the restart and its lease's end,
// by a greater epoch, for both durabilities.
func TestElectionEpochAcrossRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, d := range []kahuna.Durability{kahuna.Ephemeral, kahuna.Persistent} {
		t.Run(d.String(), func(t *testing.T) {
			cfg := kahuna.Config{DataDir: t.TempDir()}
			n, err := kahuna.Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			a, err := kahuna.Campaign(ctx, n, "jobs", []byte("a"), kahuna.WithDurability(d), kahuna.WithTTL(200*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			if err := n.Close(); err != nil {
				t.Fatal(err)
			}
			n = openElectionNode(t, cfg)
			b, err := kahuna.Campaign(ctx, n, "jobs", []byte("b"), kahuna.WithDurability(d))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Resign(ctx)
			if a.Context().Err() == nil {
				t.Fatal("the crashed leader's Context is live after the next election")
			}
			if b.Epoch() <= a.Epoch() {
				t.Fatalf("epoch %d after a restart, %d before", b.Epoch(), a.Epoch())
			}
		})
	}
}
