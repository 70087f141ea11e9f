package kahuna_test

import (
	"context"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/internal/testcluster"
	"github.com/kahunago/kahuna/internal/testknobs"
)

// Ephemeral locks live in their leader's memory, so a new leader (or a
// node restarted on its data dir) does not know them. By default it waits
// them out before it serves the partition: nobody else is granted a lock
// its old holder may still believe it holds. EphemeralFencingOnly serves at
// once instead; the tokens still rise.

// graceProbe asks l for res as another owner until it is granted, and
// returns when that was, failing on any answer but MustRetry before.
func graceProbe(t *testing.T, l kahuna.Locker, res string, within time.Duration) (kahuna.Result, time.Time) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		r, err := l.TryLock(context.Background(), res, []byte("bee"), time.Minute, kahuna.Ephemeral)
		now := time.Now()
		switch {
		case err != nil:
			t.Fatal(err)
		case r.Status == kahuna.Locked:
			return r, now
		case r.Status != kahuna.MustRetry:
			t.Fatalf("another owner's TryLock: %+v, want MustRetry until the old lease ends, then Locked", r)
		case now.After(deadline):
			t.Fatalf("still MustRetry after %v", within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestEphemeralGraceAfterRestart(t *testing.T) {
	t.Parallel()
	for _, fencingOnly := range []bool{false, true} {
		name := map[bool]string{false: "wait", true: "fencing-only"}[fencingOnly]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := kahuna.Config{DataDir: dir, EphemeralFencingOnly: fencingOnly}
			n, err := kahuna.Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			const ttl = 2 * time.Second
			sent := time.Now()
			a, err := n.TryLock(context.Background(), "grace/x", []byte("a"), ttl, kahuna.Ephemeral)
			if err != nil || a.Status != kahuna.Locked {
				t.Fatalf("a: %+v %v", a, err)
			}
			if err := n.Close(); err != nil {
				t.Fatal(err)
			}
			n, err = kahuna.Open(cfg) // a's holder still holds, as far as it knows
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			b, at := graceProbe(t, n, "grace/x", 3*ttl)
			if b.FencingToken <= a.FencingToken {
				t.Fatalf("bee's token %d, a's %d", b.FencingToken, a.FencingToken)
			}
			aEnds := sent.Add(ttl)
			switch {
			case !fencingOnly && at.Before(aEnds):
				t.Fatalf("bee granted %v before a's lease ends: two holders", aEnds.Sub(at))
			case fencingOnly && !at.Before(aEnds):
				t.Fatalf("fencing-only: bee granted only %v after a's lease ended, want at once", at.Sub(aEnds))
			}
			t.Logf("%s: bee granted %v after a's grant was sent (a's lease %v)", name, at.Sub(sent).Round(time.Millisecond), ttl)
		})
	}
}

// TestEphemeralGraceAfterCleanClose: a node that closes records how long
// its live ephemeral leases still run, so after a restart it waits only
// that, not the longest TTL the reign granted (a minute here).
func TestEphemeralGraceAfterCleanClose(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	n, err := kahuna.Open(kahuna.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	n.TryLock(ctx, "grace/long", []byte("a"), time.Minute, kahuna.Ephemeral)
	if r, _ := n.Unlock(ctx, "grace/long", []byte("a"), kahuna.Ephemeral); r.Status != kahuna.Unlocked {
		t.Fatalf("unlock: %+v", r)
	}
	const ttl = time.Second
	sent := time.Now()
	if r, _ := n.TryLock(ctx, "grace/short", []byte("a"), ttl, kahuna.Ephemeral); r.Status != kahuna.Locked {
		t.Fatalf("short: %+v", r)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n, err = kahuna.Open(kahuna.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	_, at := graceProbe(t, n, "grace/long", 20*time.Second) // the reign's bound would keep it over a minute
	if aEnds := sent.Add(ttl); at.Before(aEnds) {
		t.Fatalf("granted %v before the live lease ends", aEnds.Sub(at))
	}
	t.Logf("granted %v after the live 1 s lease's grant was sent (the reign granted 1 min)", at.Sub(sent).Round(time.Millisecond))
}

// TestClusterEphemeralGraceAcrossTransfer: A holds an ephemeral lock
// through the partition's leader; leadership moves without a hand-over
// (Raft asked directly, as when a transfer reaches a leader that did not
// request it); B asks the new leader, which answers MustRetry until A's
// lease has ended. (A planned move hands the lease over: handover_test.go.)
func TestClusterEphemeralGraceAcrossTransfer(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	c := startCluster(t, 1, nil)
	n1 := c.Node(1)
	leader, _ := n1.Leader(0)
	sent := time.Now()
	a := testcluster.Settled(t, func() (kahuna.Result, error) {
		return c.Node(leader).TryLock(context.Background(), "grace-transfer", []byte("a"), ttl, kahuna.Ephemeral)
	})
	if a.Status != kahuna.Locked {
		t.Fatalf("a: %+v", a)
	}
	to := leader%3 + 1
	asked := time.Time{}
	testcluster.Eventually(t, "the transfer", func() bool {
		l, _ := c.Node(to).Leader(0)
		if l != to && time.Since(asked) > time.Second { // Raft may drop a request (its target lagging)
			asked = time.Now()
			if err := testknobs.TransferUnrelinquished(c.Node(leader), 0, to); err != nil {
				t.Logf("transfer: %v", err)
			}
		}
		return l == to
	})
	b, at := graceProbe(t, c.Node(to), "grace-transfer", 3*ttl)
	if aEnds := sent.Add(ttl); at.Before(aEnds) {
		t.Fatalf("b granted token %d through node %d %v before a's lease (token %d) ends: two holders", b.FencingToken, to, aEnds.Sub(at), a.FencingToken)
	}
	if b.FencingToken <= a.FencingToken {
		t.Fatalf("b's token %d, a's %d", b.FencingToken, a.FencingToken)
	}
	t.Logf("b granted %v after a's grant was sent (a's lease %v)", at.Sub(sent).Round(time.Millisecond), ttl)
}
