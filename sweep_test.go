package kahuna_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/internal/testknobs"
)

// sweepNode opens a node on dir whose free records are removed retention
// after their last change.
func sweepNode(t *testing.T, dir string, retention time.Duration) *kahuna.Node {
	t.Helper()
	cfg := testknobs.WithSweepEvery(kahuna.Config{DataDir: dir, Partitions: 4, LockActors: 2, ReleasedRetention: retention}, 20*time.Millisecond)
	n, err := kahuna.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitRecords polls until n stores at most want records.
func waitRecords(t *testing.T, n *kahuna.Node, want int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := testknobs.StoredRecords(n)
		if err != nil {
			t.Fatal(err)
		}
		if got <= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d records stored after 20 s, want at most %d", got, want)
		}
		time.Sleep(20 * time.Millisecond) // the sweep has no signal to wait on
	}
}

// A workload of unique names (a lock per job) leaves a store that levels
// off: records of free locks go once their retention is over, and live
// ones stay.
func TestSweepLevelsOffUniqueNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := sweepNode(t, t.TempDir(), 100*time.Millisecond)
	defer n.Close()
	const live = 10
	for i := range live {
		mustStatus(t, n, kahuna.Locked, func() (kahuna.Result, error) {
			return n.TryLock(ctx, fmt.Sprintf("live-%d", i), []byte("a"), time.Hour, kahuna.Persistent)
		})
	}
	for round := range 5 {
		for i := range 400 {
			res := fmt.Sprintf("job-%d-%d", round, i)
			mustStatus(t, n, kahuna.Locked, func() (kahuna.Result, error) {
				return n.TryLock(ctx, res, []byte("a"), time.Minute, kahuna.Persistent)
			})
			mustStatus(t, n, kahuna.Unlocked, func() (kahuna.Result, error) { return n.Unlock(ctx, res, []byte("a"), kahuna.Persistent) })
		}
		// 400 released each round: the sweep keeps up.
		waitRecords(t, n, live)
		t.Logf("round %d: records back down to the %d live ones", round, live)
	}
	if got, _ := testknobs.StoredRecords(n); got != live {
		t.Fatalf("%d records stored, want the %d live ones kept", got, live)
	}
	if s := n.Stats(); s.RecordsSwept != 2000 {
		t.Fatalf("Stats().RecordsSwept = %d, want 2000", s.RecordsSwept)
	}
}

// A name whose record was removed still gets a larger token than any it
// had, after a restart too (the token floor is stored); a held lock is
// never removed, nor is a record before its retention is over.
func TestSweepKeepsFencingTokensGrowing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	n := sweepNode(t, dir, 200*time.Millisecond)
	for want := range int64(3) {
		r := mustStatus(t, n, kahuna.Locked, func() (kahuna.Result, error) {
			return n.TryLock(ctx, "r", []byte("a"), time.Minute, kahuna.Persistent)
		})
		if r.FencingToken != want {
			t.Fatalf("grant %d: token %d", want, r.FencingToken)
		}
		mustStatus(t, n, kahuna.Unlocked, func() (kahuna.Result, error) { return n.Unlock(ctx, "r", []byte("a"), kahuna.Persistent) })
	}
	mustStatus(t, n, kahuna.Locked, func() (kahuna.Result, error) {
		return n.TryLock(ctx, "held", []byte("a"), time.Hour, kahuna.Persistent)
	})
	waitRecords(t, n, 1)
	if _, r, err := n.Get(ctx, "held", kahuna.Persistent); err != nil || r.Status != kahuna.Got {
		t.Fatalf("the held lock: %v %v", r.Status, err)
	}
	n.Close()

	n = sweepNode(t, dir, time.Hour)
	defer n.Close()
	r := mustStatus(t, n, kahuna.Locked, func() (kahuna.Result, error) {
		return n.TryLock(ctx, "r", []byte("b"), time.Minute, kahuna.Persistent)
	})
	if r.FencingToken < 3 {
		t.Fatalf("after removal and restart: token %d, want above the removed record's 2", r.FencingToken)
	}
}

// mustStatus runs op, retrying MustRetry, and fails unless it answers want.
func mustStatus(t *testing.T, n *kahuna.Node, want kahuna.Status, op func() (kahuna.Result, error)) kahuna.Result {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := op()
		if err != nil {
			t.Fatal(err)
		}
		if r.Status == kahuna.MustRetry && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
			continue
		}
		if r.Status != want {
			t.Fatalf("status %v, want %v", r.Status, want)
		}
		return r
	}
}
