package main

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/kahunago/kahuna/bench/peers/internal/maplocks"
)

// TestMain serves as the floor's server process when run() starts this
// test binary as one.
func TestMain(m *testing.M) {
	if os.Getenv(serverEnv) != "" {
		fmt.Fprintln(os.Stderr, serve(os.Getenv(wireEnv), os.Getenv(forgetEnv) != ""))
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// onEachWire runs 16 callers on 4 names over each wire, the server
// forgetting its grants if forget, and hands each run's result to check.
func onEachWire(t *testing.T, forget bool, check func(*testing.T, maplocks.Result)) {
	for _, wire := range []string{wireTCP, wireGRPC} {
		t.Run(wire, func(t *testing.T) {
			res, err := run(wire, 16, 2, 4, 300*time.Millisecond, 50*time.Millisecond, forget)
			if err != nil {
				t.Fatal(err)
			}
			t.Log(res)
			check(t, res)
		})
	}
}

// With 16 callers on 4 names, TryLocks meet held locks and are refused,
// and every Unlock of a lock its caller holds succeeds, on either wire.
func TestFloorExcludes(t *testing.T) {
	onEachWire(t, false, func(t *testing.T, res maplocks.Result) {
		if len(res.Latencies) == 0 || res.Busy == 0 || res.Wrong != 0 {
			t.Fatalf("%d ops, %d TryLocks busy, %d Unlocks of a held lock refused: want ops, some busy, none refused",
				len(res.Latencies), res.Busy, res.Wrong)
		}
	})
}

// Negative control: a server that forgets the locks it grants is caught,
// on either wire.
func TestFloorReportsForgottenLocks(t *testing.T) {
	onEachWire(t, true, func(t *testing.T, res maplocks.Result) {
		if res.Wrong == 0 {
			t.Fatal("a server that forgets its locks was not caught")
		}
	})
}

func TestRunRefusesUnknownWire(t *testing.T) {
	if _, err := run("udp", 16, 2, 4, time.Millisecond, 0, false); err == nil {
		t.Fatal("an unknown wire was accepted")
	}
}
