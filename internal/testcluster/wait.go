package testcluster

import (
	"testing"
	"time"

	"github.com/kahunago/kahuna"
)

// Eventually polls cond until it holds or 20 s pass; for states reached
// asynchronously inside Raft (elections, transfers) that offer no signal
// to wait on.
func Eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Settled retries an operation while the cluster answers MustRetry (an
// election or transfer in progress), like every client does.
func Settled(tb testing.TB, op func() (kahuna.Result, error)) kahuna.Result {
	tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := op()
		if err != nil {
			tb.Fatal(err)
		}
		if r.Status != kahuna.MustRetry {
			return r
		}
		if time.Now().After(deadline) {
			// Why, so a failure under load says which wait it was (no
			// leader, a takeover, a forward not sent, backpressure).
			tb.Fatalf("still MustRetry after 20s: %q", r.Reason)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
