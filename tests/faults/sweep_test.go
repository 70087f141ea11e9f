package faults_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/internal/testcluster"
	"github.com/kahunago/kahuna/internal/testknobs"
)

// On a cluster the removal and the floor are replicated: once the leader
// removed a record, every member's store drops it, and a new leader (the
// old one killed) still grants the name a larger token.
func TestSweepClusterFloorSurvivesFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster run")
	}
	c := startFaultCluster(t, 40, 3, func(cfg kahuna.Config) kahuna.Config {
		cfg.ReleasedRetention = 200 * time.Millisecond
		return testknobs.WithSweepEvery(cfg, 20*time.Millisecond)
	})
	const res = "swept"
	p := c.Node(c.IDs()[0]).Partition(res)
	lid := c.WaitServing(p, 0)
	l := c.Node(lid).Local()
	for want := range int64(3) {
		setupOp(t, l, "A locks", opTryLock(res, ownerA, time.Minute, kahuna.Persistent), kahuna.Locked, want)
		setupOp(t, l, "A unlocks", opUnlock(res, ownerA, kahuna.Persistent), kahuna.Unlocked, 0)
	}
	for _, id := range c.IDs() {
		n := c.Node(id)
		testcluster.Eventually(t, fmt.Sprintf("node %d to store no record", id), func() bool {
			got, err := testknobs.StoredRecords(n)
			if err != nil {
				t.Fatal(err)
			}
			return got == 0
		})
	}
	c.kill(lid, false)
	next := c.WaitServing(p, lid)
	setupOp(t, c.Node(next).Local(), "B locks on the new leader", opTryLock(res, ownerB, time.Minute, kahuna.Persistent), kahuna.Locked, 3)
}
