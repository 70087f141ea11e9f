package faults_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/internal/testknobs"
)

// A leader transfer lets its target campaign past the voters' stickiness
// (TimeoutNow), so the target can win while the old leader's lease still
// runs. The old leader drops its lease before it asks Raft (Relinquish),
// but dragonboat does not always ask the leader that dropped it:
//
//   - a transfer requested by a node deposed a moment before is forwarded
//     by its replica to the new leader, whose lease is live;
//   - a target paused (SIGSTOP) with the TimeoutNow in its socket buffer
//     campaigns when it resumes, after the old leader's grace ran out and
//     it renewed its lease.
//
// Both are "a leader with a live lease hands over". The scenario makes one
// on every partition and asks, at the instant the target begins to serve
// (the serve hook), whether the old leader still serves; and then has B
// lock an ephemeral lock through the target while A, its holder, re-locks
// it through the old leader.
//
//	go test -run 'TestTransferTarget' -count=10 ./tests/faults

// handOverSeen is what the scenario saw on one partition.
type handOverSeen struct {
	p int
	// oldServes: the old leader served at the instant the target began.
	oldServes bool
	// twoHolders: A's re-lock through the old leader and B's lock through
	// the target were both answered Locked.
	twoHolders bool
	what       string // the transfer and the answers
}

// transferOverlaps runs the scenario with tune applied to every node and
// returns what it saw on each partition. fastOnly (the takeover wait off,
// so a target serves as soon as it is elected) counts a round only if the
// target began within half the old leader's lease of the cut: a later one
// was most likely not elected by the TimeoutNow (the old leader sends it
// only once it hears that the target caught up, and it hears nothing) but
// by an ordinary election, once the old lease may have run out, which is
// not the scenario.
func transferOverlaps(t *testing.T, tune func(kahuna.Config) kahuna.Config, fastOnly bool) []handOverSeen {
	c := safetyCluster(t, 30, tune)
	type began struct {
		oldServes bool      // the old leader served at the instant the target began
		at        time.Time // that instant
	}
	var (
		mu    sync.Mutex
		watch func(node uint64, p int) (chan<- began, uint64) // set per round: the target's channel and the old leader
		rival func(node uint64, p int)                        // set per round: told of any other reign of the partition
	)
	sink := func(node uint64, p int, _ uint64, serve func()) {
		serve()
		mu.Lock()
		w, r := watch, rival
		mu.Unlock()
		if w == nil {
			return
		}
		if r != nil {
			r(node, p)
		}
		if ch, old := w(node, p); ch != nil {
			n := c.Node(old)
			ch <- began{oldServes: n != nil && testknobs.ServingNow(n, p), at: time.Now()}
		}
	}
	c.reignSink.Store(&sink)

	var seen []handOverSeen
	resources := c.resourcesOnPartitions("handover", 1)
	// round makes the transfer of p once; false: Raft elected another node
	// than the target (its TimeoutNow was not sent in time: the old
	// leader, hearing nothing, stepped down first), or with fastOnly the
	// target by an ordinary election, so try again.
	round := func(p int, res string) bool {
		z := c.WaitServing(p, 0)
		_, _, zTerm := testknobs.ServingTerm(c.Node(z), p)
		others := c.Others(z)
		y := others[0]
		setupOp(t, c.Node(z).Local(), "A locks "+res, opTryLock(res, ownerA, time.Minute, kahuna.Ephemeral), kahuna.Locked, -1)

		ch := make(chan began, 1)
		other := make(chan struct{}, 1) // another node than the target began a reign of p
		mu.Lock()
		watch = func(node uint64, q int) (chan<- began, uint64) {
			if node == y && q == p {
				return ch, z
			}
			return nil, 0
		}
		rival = func(node uint64, q int) {
			if node != y && node != z && q == p {
				select {
				case other <- struct{}{}:
				default:
				}
			}
		}
		mu.Unlock()
		var cut time.Time
		defer func() {
			mu.Lock()
			watch, rival = nil, nil
			mu.Unlock()
			c.net.Heal()
			// The next round starts from a leader that no longer serves.
			if err := waitNotServing(c, z, p, zTerm, cut); err != nil {
				t.Fatal(err)
			}
		}()

		// z keeps sending and hears nothing: it learns of no election.
		c.net.Isolate(z, others, false, true)
		cut = time.Now()
		if err := testknobs.TransferUnrelinquished(c.Node(z), p, y); err != nil {
			t.Fatalf("partition %d: transfer %d → %d: %v", p, z, y, err)
		}
		var b began
		deadline := time.After(safetyWait)
	wait:
		for {
			select {
			case b = <-ch:
				break wait
			case <-other: // a reign begins through the serve hook
				if serving, leads, term := testknobs.ServingTerm(c.Node(others[1]), p); serving && leads && term > zTerm {
					t.Logf("partition %d: node %d was elected in term %d instead of the target %d; again", p, others[1], term, y)
					return false
				}
			case <-deadline:
				var views []string
				for _, id := range c.IDs() {
					serving, leads, term := testknobs.ServingTerm(c.Node(id), p)
					views = append(views, fmt.Sprintf("node %d: serving %v, leads %v, term %d", id, serving, leads, term))
				}
				t.Fatalf("partition %d: node %d did not begin to serve within %v of the transfer from %d; %v", p, y, safetyWait, z, views)
			}
		}
		// The old leader renews its lease every quarter of it, each
		// renewal confirmed within a round trip, so at the cut more than
		// half of it is left: a target elected by the TimeoutNow, which
		// begins within milliseconds, begins inside it.
		if lease := testknobs.LeaderLease(c.Node(z)); fastOnly && b.at.Sub(cut) > lease/2 {
			t.Logf("partition %d: node %d began %v after the cut, past half the old leader's lease %v: not elected by the transfer's TimeoutNow; again", p, y, b.at.Sub(cut).Round(time.Millisecond), lease)
			return false
		}
		// Both at once, while the old leader may still answer from memory.
		var wg sync.WaitGroup
		var aOnZ, bOnY probeAnswer
		wg.Add(2)
		go func() {
			defer wg.Done()
			aOnZ = callWithin(c.Node(z).Local(), opTryLock(res, ownerA, time.Minute, kahuna.Ephemeral))
		}()
		go func() {
			defer wg.Done()
			bOnY = callWithin(c.Node(y).Local(), opTryLock(res, ownerB, time.Minute, kahuna.Ephemeral))
		}()
		wg.Wait()

		seen = append(seen, handOverSeen{p: p, oldServes: b.oldServes, twoHolders: aOnZ.is(kahuna.Locked) && bOnY.is(kahuna.Locked),
			what: fmt.Sprintf("partition %d: %d → %d: target began %v after the cut, old leader serving then %v; A on %d: %v; B on %d: %v", p, z, y, b.at.Sub(cut).Round(time.Millisecond), b.oldServes, z, aOnZ, y, bOnY)})
		t.Log(seen[len(seen)-1].what)
		return true
	}
	// A round that did not make the transfer asked for is not the
	// scenario, and is made again: a quarter of them with fastOnly on an
	// idle machine (the old leader, cut off right after the window raise
	// of A's grant, often does not hear the target ack it, and so never
	// sends the TimeoutNow), and most of them while the rest of the suite
	// loads the machine under -race, where ten in a row once failed. So
	// rounds are made again for a while, not a number of times.
	for p, res := range resources {
		giveUp := time.Now().Add(transferRetries)
		for attempt := 1; !round(p, res); attempt++ {
			if time.Now().After(giveUp) {
				t.Fatalf("partition %d: the transfer did not happen as asked (another node elected, or the target elected by an ordinary election) %d times in %v", p, attempt, transferRetries)
			}
		}
	}
	return seen
}

// transferRetries is how long transferOverlaps makes a partition's round
// again before it gives up; a round takes about a third of a second.
const transferRetries = time.Minute

// callWithin runs op on l with the probes' deadline.
func callWithin(l kahuna.Locker, op lockOp) probeAnswer {
	ctx, cancel := context.WithTimeout(context.Background(), safetyCall)
	defer cancel()
	start := time.Now()
	a := op(ctx, l)
	a.took = time.Since(start)
	return a
}

// waitNotServing waits until node id, whose inbound links were cut at cut
// while it served p in term term, no longer serves that reign. Nothing
// signals its end: it ends when the node hears of a later term (a leader
// event inside the node), or when its leader lease runs out. Cut off from
// its peers' answers, the node could renew that lease only by a
// confirmation begun before cut, so the lease runs out by cut +
// LeaderLease: wait until then at most, and if the reign still
// serves after that, it is an error.
func waitNotServing(c *faultCluster, id uint64, p int, term uint64, cut time.Time) error {
	n := c.Node(id)
	if n == nil {
		return nil
	}
	stale := func() bool {
		// A reign of a later term (the node elected again) is not the one
		// that was cut off.
		serving, leads, now := testknobs.ServingTerm(n, p)
		return serving && !(leads && now > term)
	}
	if !stale() {
		return nil
	}
	lease := testknobs.LeaderLease(n)
	time.Sleep(time.Until(cut.Add(lease))) // the lease's end: the reign's last possible instant
	if stale() {
		return fmt.Errorf("node %d still serves partition %d (term %d) %v after it was cut off, past its leader lease %v", id, p, term, time.Since(cut).Round(time.Millisecond), lease)
	}
	return nil
}

// TestTransferTargetWaitsOutOldLease: a new leader begins to serve only once
// every lease an earlier leader may hold has run out, however it was
// elected: no instant with two serving leaders, no two holders.
func TestTransferTargetWaitsOutOldLease(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster run")
	}
	for _, s := range transferOverlaps(t, nil, false) {
		if s.oldServes || s.twoHolders {
			t.Errorf("%s: old leader served when the target began %v, two holders %v", s.what, s.oldServes, s.twoHolders)
		}
	}
}

// TestTransferTargetNegativeControl runs the scenario with the takeover
// wait switched off: on every partition the old leader must be seen
// serving when the target began, and both A and B holding the lock, or
// the scenario cannot see the bug it guards against.
func TestTransferTargetNegativeControl(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster run")
	}
	for _, s := range transferOverlaps(t, testknobs.WithoutTakeoverWait, true) {
		if !s.oldServes || !s.twoHolders {
			t.Errorf("negative control not caught on partition %d: without the takeover wait, old leader served when the target began %v, two holders %v (%s)", s.p, s.oldServes, s.twoHolders, s.what)
		}
	}
}
