package kahuna_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/internal/testcluster"
	"github.com/kahunago/kahuna/lease"
)

// observeInto runs Observe of name on w in the background and sends its
// events to the returned channel until ctx ends.
func observeInto(ctx context.Context, w kahuna.Watcher, name string) <-chan kahuna.ElectionEvent {
	events := make(chan kahuna.ElectionEvent, 16)
	go func() {
		for ev, err := range kahuna.Observe(ctx, w, name) {
			if err != nil {
				return
			}
			events <- ev
		}
	}()
	return events
}

func nextElectionEvent(t *testing.T, events <-chan kahuna.ElectionEvent, kind kahuna.ElectionEventKind, value string, epoch int64) {
	t.Helper()
	select {
	case ev := <-events:
		if ev.Kind != kind || string(ev.Value) != value || ev.Epoch != epoch {
			t.Fatalf("event %v %q epoch %d, want %v %q epoch %d", ev.Kind, ev.Value, ev.Epoch, kind, value, epoch)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no %v %q event", kind, value)
	}
}

// waitRenewals waits until ld's deadline has moved past after twice, so
// two renewals have been granted since.
func waitRenewals(t *testing.T, ld *kahuna.Leadership, ttl time.Duration) {
	t.Helper()
	first := ld.Expires()
	deadline := time.Now().Add(10 * time.Second)
	for !ld.Expires().After(first.Add(ttl / 2)) {
		if err := ld.Context().Err(); err != nil {
			t.Fatalf("leadership ended while renewing: %v", context.Cause(ld.Context()))
		}
		if time.Now().After(deadline) {
			t.Fatal("no renewals")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestElectionProclaim: a leader's new value is the election's in the
// same term (Leader reads it, observers see Proclaimed with the epoch
// unchanged), its renewals keep it, proclaiming it again changes nothing,
// and Resign releases it.
func TestElectionProclaim(t *testing.T) {
	t.Parallel()
	for _, d := range []kahuna.Durability{kahuna.Ephemeral, kahuna.Persistent} {
		t.Run(d.String(), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			n := openElectionNode(t, kahuna.Config{})
			events := observeInto(ctx, n, "jobs")
			nextElectionEvent(t, events, kahuna.Vacant, "", -1)
			const ttl = time.Second // renewed every third of it; long enough for a loaded machine
			a, err := kahuna.Campaign(ctx, n, "jobs", []byte("a:9000"), kahuna.WithTTL(ttl), kahuna.WithDurability(d))
			if err != nil {
				t.Fatal(err)
			}
			nextElectionEvent(t, events, kahuna.Elected, "a:9000", a.Epoch())
			if err := a.Proclaim(ctx, []byte("a:9001")); err != nil {
				t.Fatal(err)
			}
			nextElectionEvent(t, events, kahuna.Proclaimed, "a:9001", a.Epoch())
			if v := string(a.Value()); v != "a:9001" {
				t.Fatalf("Value after Proclaim: %q", v)
			}
			info, err := kahuna.Leader(ctx, n, "jobs")
			if err != nil || string(info.Value) != "a:9001" || info.Epoch != a.Epoch() {
				t.Fatalf("Leader: %q epoch %d (%v), want a:9001 epoch %d", info.Value, info.Epoch, err, a.Epoch())
			}
			waitRenewals(t, a, ttl) // renewals are by the new owner, or the leadership would be lost
			if err := a.Proclaim(ctx, []byte("a:9001")); err != nil {
				t.Fatal(err)
			}
			if err := a.Proclaim(ctx, []byte("a:9002")); err != nil {
				t.Fatal(err)
			}
			nextElectionEvent(t, events, kahuna.Proclaimed, "a:9002", a.Epoch())
			if err := a.Resign(ctx); err != nil {
				t.Fatal(err)
			}
			nextElectionEvent(t, events, kahuna.Vacant, "", a.Epoch())
			if err := a.Proclaim(ctx, []byte("late")); !errors.Is(err, kahuna.ErrResigned) {
				t.Fatalf("Proclaim after Resign: %v, want ErrResigned", err)
			}
			b, err := kahuna.Campaign(ctx, n, "jobs", []byte("b"), kahuna.WithDurability(d))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Resign(ctx)
			nextElectionEvent(t, events, kahuna.Elected, "b", a.Epoch()+1)
			if err := b.Proclaim(ctx, make([]byte, kahuna.MaxElectionValue+1)); !isInvalid(err, "value is") {
				t.Fatalf("a value over the limit: %v", err)
			}
			select {
			case ev := <-events:
				t.Fatalf("unexpected event %v %q epoch %d", ev.Kind, ev.Value, ev.Epoch)
			default:
			}
		})
	}
}

// TestElectionProclaimIsCompareAndSet: a proclaim changes the holder only
// from the owner it names; one that arrives late, after a later proclaim,
// changes nothing, while its retry (the holder already its new owner)
// extends. A plain Extend by a former owner is refused; malformed
// proclaims are InvalidInput.
func TestElectionProclaimIsCompareAndSet(t *testing.T) {
	ctx := context.Background()
	n := openElectionNode(t, kahuna.Config{})
	const res = kahuna.ElectionPrefix + "cas"
	id := string(kahuna.NewOwner())
	a, b, c := []byte(id+"a"), []byte(id+"b"), []byte(id+"c")
	do := func(r lease.Request) kahuna.Result {
		t.Helper()
		checked, why := r.Check()
		if why != "" {
			return kahuna.Result{Status: kahuna.InvalidInput, Reason: why}
		}
		_, res, err := n.Do(ctx, checked)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	proclaim := func(from, to []byte) kahuna.Result {
		return do(lease.Request{Op: lease.Extend, Resource: res, Owner: from, NewOwner: to, TTL: time.Minute, Durability: kahuna.Persistent})
	}
	lk := do(lease.Request{Op: lease.TryLock, Resource: res, Owner: a, TTL: time.Minute, Durability: kahuna.Persistent})
	for i, step := range []struct {
		got  kahuna.Result
		want kahuna.Status
	}{
		{proclaim(a, b), kahuna.Extended},
		{proclaim(a, b), kahuna.Extended}, // its retry
		{proclaim(b, c), kahuna.Extended},
		{proclaim(a, b), kahuna.InvalidOwner}, // late: changes nothing
		{do(lease.Request{Op: lease.Extend, Resource: res, Owner: b, TTL: time.Minute, Durability: kahuna.Persistent}), kahuna.InvalidOwner},
	} {
		if step.got.Status != step.want || step.want == kahuna.Extended && step.got.FencingToken != lk.FencingToken {
			t.Fatalf("step %d: %v token %d, want %v token %d", i, step.got.Status, step.got.FencingToken, step.want, lk.FencingToken)
		}
	}
	info, r, err := n.Get(ctx, res, kahuna.Persistent)
	if err != nil || r.Status != kahuna.Got || string(info.Owner) != string(c) || info.FencingToken != lk.FencingToken {
		t.Fatalf("holder %q token %d (%v %v), want %q token %d", info.Owner, info.FencingToken, r.Status, err, c, lk.FencingToken)
	}
	other := []byte(string(kahuna.NewOwner()) + "c")
	for _, bad := range []struct {
		r    lease.Request
		want string
	}{
		{lease.Request{Op: lease.Extend, Resource: res, Owner: c, NewOwner: other, TTL: time.Minute}, "keeps the candidate ID"},
		{lease.Request{Op: lease.Extend, Resource: "jobs", Owner: c, NewOwner: c, TTL: time.Minute}, "only for an election"},
		{lease.Request{Op: lease.TryLock, Resource: res, Owner: c, NewOwner: c, TTL: time.Minute}, "only for an extend"},
		{lease.Request{Op: lease.Extend, Resource: res, Owner: []byte("x"), NewOwner: []byte("y"), TTL: time.Minute}, "candidate ID of 32 bytes"},
		{lease.Request{Op: lease.Extend, Resource: res, Owner: c, NewOwner: make([]byte, lease.MaxOwnerBytes+1), TTL: time.Minute}, "new owner is 1025 bytes"},
	} {
		if got := do(bad.r); got.Status != kahuna.InvalidInput || !strings.Contains(got.Reason, bad.want) {
			t.Fatalf("%+v: %v %q, want InvalidInput %q", bad.r, got.Status, got.Reason, bad.want)
		}
	}
}

// lostAnswers applies every proclaim it is given and, while lose is set,
// loses the answer (as a connection that breaks after the request left).
type lostAnswers struct {
	*kahuna.Node
	lose atomic.Bool
}

func (l *lostAnswers) Do(ctx context.Context, req lease.Checked) (kahuna.LockInfo, kahuna.Result, error) {
	info, res, err := l.Node.Do(ctx, req)
	if req.Request().NewOwner != nil && l.lose.Load() {
		return kahuna.LockInfo{}, kahuna.Result{}, errors.New("connection reset")
	}
	return info, res, err
}

// TestElectionProclaimUnknownOutcome: a proclaim applied on the server
// whose answer was lost leaves the handle unsure which value holds the
// election; the next renewal proclaims again and settles it (a renewal by
// the old owner alone would find the new one holding: lost), and Resign
// releases whichever holds it.
func TestElectionProclaimUnknownOutcome(t *testing.T) {
	t.Parallel()
	for _, settle := range []string{"renewal", "resign"} {
		t.Run(settle, func(t *testing.T) {
			ctx := context.Background()
			l := &lostAnswers{Node: openElectionNode(t, kahuna.Config{})}
			ttl := time.Minute
			if settle == "renewal" {
				ttl = time.Second
			}
			ld, err := kahuna.Campaign(ctx, l, "unsure", []byte("v1"), kahuna.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			l.lose.Store(true)
			pctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			err = ld.Proclaim(pctx, []byte("v2"))
			cancel()
			if err == nil {
				t.Fatal("Proclaim whose answers were lost returned nil")
			}
			if v := string(ld.Value()); v != "v1" {
				t.Fatalf("Value after an unknown proclaim: %q, want v1 (unconfirmed)", v)
			}
			if info, err := kahuna.Leader(ctx, l, "unsure"); err != nil || string(info.Value) != "v2" {
				t.Fatalf("Leader: %q %v, want v2 (the proclaim applied)", info.Value, err)
			}
			l.lose.Store(false)
			if settle == "renewal" {
				waitRenewals(t, ld, ttl)
				if v := string(ld.Value()); v != "v2" {
					t.Fatalf("Value after the renewal settled it: %q, want v2", v)
				}
			}
			if err := ld.Resign(ctx); err != nil {
				t.Fatalf("Resign: %v", err)
			}
			if _, err := kahuna.Leader(ctx, l, "unsure"); !errors.Is(err, kahuna.ErrNoLeader) {
				t.Fatalf("Leader after Resign: %v, want ErrNoLeader", err)
			}
		})
	}
}

// TestElectionProclaimOverTheWire: a Client proclaims over gRPC and over
// REST through a member that does not lead the election's partition (it
// forwards the proclaim whole); a plain Locker cannot proclaim and says
// so, having sent nothing.
func TestElectionProclaimOverTheWire(t *testing.T) {
	c := startCluster(t, 4, nil)
	ctx := context.Background()
	const name = "wire"
	leader, follower := leaderAndFollower(c, kahuna.ElectionPrefix+name)
	for _, opts := range [][]kahuna.ClientOption{nil, {kahuna.WithREST()}} {
		cl, err := kahuna.Dial(ctx, []string{c.Member(follower).Endpoint}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		var ld *kahuna.Leadership
		testcluster.Eventually(t, "elected through a follower", func() bool {
			ld, err = kahuna.Campaign(ctx, cl, name, []byte("first"), kahuna.WithWait(0))
			return err == nil
		})
		if err := ld.Proclaim(ctx, []byte("second")); err != nil {
			t.Fatalf("Proclaim (REST %v): %v", opts != nil, err)
		}
		info, err := kahuna.Leader(ctx, c.Node(leader), name)
		if err != nil || string(info.Value) != "second" || info.Epoch != ld.Epoch() {
			t.Fatalf("Leader after a Proclaim over the wire: %q epoch %d (%v), want second epoch %d", info.Value, info.Epoch, err, ld.Epoch())
		}
		if err := ld.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	}

	plain, err := kahuna.Campaign(ctx, plainLocker{c.Node(leader)}, name, []byte("plain"))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Resign(ctx)
	if err := plain.Proclaim(ctx, []byte("other")); !errors.Is(err, lease.ErrNotApplied) {
		t.Fatalf("Proclaim on a plain Locker: %v, want one that says it was not applied", err)
	}
	if v := string(plain.Value()); v != "plain" {
		t.Fatalf("Value after a refused Proclaim: %q", v)
	}
}
