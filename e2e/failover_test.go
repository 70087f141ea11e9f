package e2e

import (
	"syscall"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/partition"
)

// TestEphemeralLeaderLoss: A holds an ephemeral lock through its
// partition's leader, whose process then goes away.
//   - kill -9: the leader hands nothing over. The next leader serves the
//     partition only once every ephemeral lease the dead one may have
//     granted has ended (up to the reign's TTL bound): B is granted the
//     lock, with a larger token, no earlier than A's lease ends. The test
//     reports how long the partition was unavailable.
//   - SIGTERM: the leader closes cleanly and hands its live ephemeral
//     leases over. The next leader serves at once with A's lease: A keeps
//     the lock, and B is told Busy.
func TestEphemeralLeaderLoss(t *testing.T) {
	t.Parallel()
	bin := build(t)
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) { ephemeralLeaderLoss(t, bin, sig) })
	}
}

func ephemeralLeaderLoss(t *testing.T, bin binaries, sig syscall.Signal) {
	c := startPauseCluster(t, bin)
	const (
		res = "failover/job"
		ttl = 3 * time.Second
	)
	body := func(owner string) map[string]any {
		b := lockBody(res, owner, ttl)
		b["durability"] = int(kahuna.Ephemeral)
		return b
	}
	p := partition.Of(res, clusterPartitions)
	lid := c.waitLeader(p, c.ids, 20*time.Second)
	sent := time.Now()
	a := c.must(lid, "A locks", "/v1/locks/try-lock", body("A"), kahuna.Locked, -1)
	if code := c.nodes[lid].proc.signal(sig); sig == syscall.SIGTERM && code != 0 {
		t.Fatalf("node %d exited %d after SIGTERM", lid, code)
	}
	gone := time.Now()
	others := c.others(lid)
	var served time.Time // the first answer other than MustRetry
	for deadline := gone.Add(30 * time.Second); ; {
		if time.Now().After(deadline) {
			t.Fatalf("B not granted %s within 30s of node %d's %v", res, lid, sig)
		}
		r, err := c.rest(others[0], "/v1/locks/try-lock", body("B"))
		now := time.Now()
		if err != nil || r.Type == kahuna.MustRetry {
			time.Sleep(20 * time.Millisecond) // a new leader gives no signal to wait on
			continue
		}
		if served.IsZero() {
			served = now
		}
		switch {
		case sig == syscall.SIGTERM:
			if r.Type != kahuna.Busy {
				t.Fatalf("B's TryLock after the handed-over move: %v, want Busy (A's lease is live, kept by the new leader)", r)
			}
			t.Logf("SIGTERM: partition %d served again %v after node %d exited, A's lease kept", p, served.Sub(gone).Round(time.Millisecond), lid)
			return
		case r.Type == kahuna.Locked:
			if now.Before(sent.Add(ttl)) || r.FencingToken <= a.FencingToken {
				t.Fatalf("B granted token %d %v after A's grant was sent (A's lease %v, token %d)", r.FencingToken, now.Sub(sent), ttl, a.FencingToken)
			}
			t.Logf("kill -9: partition %d unavailable for %v after the kill; B granted token %d %v after A's grant was sent (A's lease %v)",
				p, served.Sub(gone).Round(time.Millisecond), r.FencingToken, now.Sub(sent).Round(time.Millisecond), ttl)
			return
		case r.Type != kahuna.Busy:
			t.Fatalf("B's TryLock after the kill: %v", r)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
