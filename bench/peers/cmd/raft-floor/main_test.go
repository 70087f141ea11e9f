package main

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// TestMain serves as a member process when run() starts this test binary
// as one.
func TestMain(m *testing.M) {
	if id := os.Getenv(memberEnv); id != "" {
		fmt.Fprintln(os.Stderr, serveMember(id, os.Getenv(setupEnv)))
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// smallRun runs 8 callers over 2 shards with one proposal in flight per
// shard, so writes queue behind it and leave together: with 4 in flight,
// as many as a shard's callers, each proposal carried about one write, and
// a loaded machine measured 167 writes in 168 proposals.
func smallRun(t *testing.T, answerUnproposed bool) result {
	t.Helper()
	res, err := run(options{members: 3, shards: 2, callers: 8, record: 64, inFlight: 1,
		transport: "kahuna", rtt: 10 * time.Millisecond, duration: 400 * time.Millisecond, warmup: 100 * time.Millisecond,
		dir: t.TempDir(), answerUnproposed: answerUnproposed})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res)
	return res
}

// Every answered write is applied on its shard's leader, several writes
// share a proposal, and the shards' leaders are spread over the members.
func TestFloorAnswersOnlyWhatItApplied(t *testing.T) {
	res := smallRun(t, false)
	if res.answered == 0 || len(res.latencies) == 0 || res.proposals == 0 {
		t.Fatalf("answered %d writes, %d measured, in %d proposals", res.answered, len(res.latencies), res.proposals)
	}
	if uint64(len(res.latencies)) < res.proposals {
		t.Fatalf("%d writes measured in %d proposals: fewer than one a proposal", len(res.latencies), res.proposals)
	}
	if res.applied < uint64(res.answered) {
		t.Fatalf("%d writes answered, %d applied", res.answered, res.applied)
	}
	if fmt.Sprint(res.leaders) != "[1 1 0]" {
		t.Fatalf("shards led per member %v, want [1 1 0]", res.leaders)
	}
}

// Negative control: members that answer writes without proposing them are
// reported.
func TestFloorReportsWritesAnsweredUnapplied(t *testing.T) {
	res := smallRun(t, true)
	if res.answered == 0 || res.applied >= uint64(res.answered) {
		t.Fatalf("answered %d writes without proposing them, %d applied: not caught", res.answered, res.applied)
	}
}
