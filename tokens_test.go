package kahuna_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/internal/testcluster"
)

// Fencing tokens of one name never go backwards, ephemeral ones included:
// not after the entry is evicted, nor after a restart or a leader change,
// nor when durabilities mix on the name. A resource that saw token t must
// never be handed a lower one by a later holder.

// TestEphemeralTokenAfterEviction: an idle released ephemeral entry is
// evicted; the next grant of its name is above its last token, though no
// store ever saw that token.
func TestEphemeralTokenAfterEviction(t *testing.T) {
	clk := newClock()
	n := openNode(t, kahuna.Config{LockActors: 1, CacheEntryTTL: time.Nanosecond, CacheEntriesToRemove: 1000, Clock: clk.Now})
	ctx := context.Background()
	var last int64
	for i, owner := range []string{"a", "b"} {
		r, err := n.TryLock(ctx, "evicted", []byte(owner), time.Hour, kahuna.Ephemeral)
		if err != nil || r.Status != kahuna.Locked || r.FencingToken != int64(i) {
			t.Fatalf("grant %d: %+v %v", i, r, err)
		}
		last = r.FencingToken
		n.Unlock(ctx, "evicted", []byte(owner), kahuna.Ephemeral)
	}
	for i := 0; n.Stats().CachedEntries < 300; i++ {
		n.TryLock(ctx, fmt.Sprintf("idle-%d", i), []byte("a"), time.Hour, kahuna.Ephemeral)
		n.Unlock(ctx, fmt.Sprintf("idle-%d", i), []byte("a"), kahuna.Ephemeral)
	}
	clk.Advance(time.Second)
	for i := 0; i < 500 && n.Stats().Evictions == 0; i++ {
		n.Get(ctx, "idle-0", kahuna.Ephemeral)
	}
	n.Get(ctx, "idle-0", kahuna.Ephemeral) // answered after the pass is over
	if s := n.Stats(); s.CachedEntries > 10 {
		t.Fatalf("not evicted: %+v", s)
	}
	for _, d := range []kahuna.Durability{kahuna.Ephemeral, kahuna.Persistent} {
		r, err := n.TryLock(ctx, "evicted", []byte("c-"+d.String()), time.Hour, d)
		if err != nil || r.Status != kahuna.Locked || r.FencingToken <= last {
			t.Fatalf("%v grant after eviction: %+v %v, want a token above %d", d, r, err, last)
		}
		last = r.FencingToken
		n.Unlock(ctx, "evicted", []byte("c-"+d.String()), d)
	}
}

// TestEphemeralTokensAcrossRestart: ephemeral grants die with the node,
// their tokens must not: after a restart on the same data dir a name's
// next grant, of either kind, is above every token granted before.
func TestEphemeralTokensAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	n, err := kahuna.Open(kahuna.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	var last int64 = -1
	for i := range 3 {
		r, err := n.TryLock(ctx, "restart/e", []byte(fmt.Sprint("o", i)), time.Hour, kahuna.Ephemeral)
		if err != nil || r.Status != kahuna.Locked || r.FencingToken != int64(i) {
			t.Fatalf("grant %d: %+v %v (a fresh node's first grant is 0, the next 1)", i, r, err)
		}
		last = r.FencingToken
		n.Unlock(ctx, "restart/e", []byte(fmt.Sprint("o", i)), kahuna.Ephemeral)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n, err = kahuna.Open(kahuna.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	for _, d := range []kahuna.Durability{kahuna.Persistent, kahuna.Ephemeral} {
		owner := []byte("after-" + d.String())
		r, err := n.TryLock(ctx, "restart/e", owner, time.Hour, d)
		if err != nil || r.Status != kahuna.Locked || r.FencingToken <= last {
			t.Fatalf("%v grant after restart: %+v %v, want a token above %d", d, r, err, last)
		}
		last = r.FencingToken
		n.Unlock(ctx, "restart/e", owner, d)
	}
}

// TestClusterEphemeralTokensAcrossTransfers moves each partition's
// leadership after every grant, with the durability of the grants mixed on
// each name: every grant's token is above the one before.
func TestClusterEphemeralTokensAcrossTransfers(t *testing.T) {
	t.Parallel()
	const partitions = 2
	// Fencing-only, so the transfers need not wait out the ephemeral
	// leases: tokens rise in both modes.
	c := startCluster(t, partitions, func(_ uint64, cfg *kahuna.Config) { cfg.EphemeralFencingOnly = true })
	ctx := context.Background()
	n1 := c.Node(1)
	resources := map[int]string{}
	for i := 0; len(resources) < partitions; i++ {
		r := fmt.Sprintf("eph-transfer-%d", i)
		if _, ok := resources[n1.Partition(r)]; !ok {
			resources[n1.Partition(r)] = r
		}
	}
	kinds := []kahuna.Durability{kahuna.Ephemeral, kahuna.Ephemeral, kahuna.Persistent, kahuna.Ephemeral, kahuna.Persistent}
	last := map[string]int64{}
	for round, d := range kinds {
		for p, res := range resources {
			owner := []byte(fmt.Sprintf("owner-%d", round))
			r := testcluster.Settled(t, func() (kahuna.Result, error) { return n1.TryLock(ctx, res, owner, time.Minute, d) })
			if r.Status != kahuna.Locked {
				t.Fatalf("round %d %s: %+v", round, res, r)
			}
			if prev, ok := last[res]; ok && r.FencingToken <= prev {
				t.Fatalf("round %d (%v) %s: token %d after %d", round, d, res, r.FencingToken, prev)
			}
			last[res] = r.FencingToken
			if round == len(kinds)-1 {
				continue // the last holder stays: the next check is a live one
			}
			if r := testcluster.Settled(t, func() (kahuna.Result, error) { return c.Node(2).Unlock(ctx, res, owner, d) }); r.Status != kahuna.Unlocked {
				t.Fatalf("round %d unlock %s: %+v", round, res, r)
			}
			leader, _ := n1.Leader(p)
			c.Transfer(p, leader%3+1)
		}
	}
}
