package main

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"
)

// TestMain serves as the floor's server process when run() starts this
// test binary as one.
func TestMain(m *testing.M) {
	if os.Getenv(serverEnv) != "" {
		if err := setHops(os.Getenv(hopsEnv)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, serve(os.Getenv(wireEnv), os.Getenv(lifoEnv) != ""))
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// The floor's lock is a FIFO: with every contender asking again at once,
// each gets its turn in nearly every round (one slow to ask again may miss
// one), so the grants per contender are even (Jain's index near 1), with
// or without the added hand-offs.
func TestFloorGrantsInTurn(t *testing.T) {
	for _, c := range []struct{ wire, hops string }{
		{wireTCP, ""}, {wireTCP, "node-worker,node-waiter,client-writer"},
		{wireGRPC, ""}, {wireGRPC, "node-worker,node-waiter,client-writer"},
	} {
		t.Run(c.wire+",hops="+c.hops, func(t *testing.T) {
			if err := setHops(c.hops); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = setHops("") }()
			res, err := run(c.wire, 16, 300*time.Millisecond, 50*time.Millisecond, false)
			if err != nil {
				t.Fatal(err)
			}
			if slices.Contains(res.grants, 0) || res.jain() < 0.99 {
				t.Fatalf("grants per contender %v, Jain's index %.3f: want every contender granted, evenly", res.grants, res.jain())
			}
			if len(res.handoffs) < res.total()-len(res.grants) {
				t.Fatalf("%d hand-offs timed for %d grants", len(res.handoffs), res.total())
			}
			t.Log(res)
		})
	}
}

// Negative control: a server that grants the newest waiter instead of the
// oldest fails the check of TestFloorGrantsInTurn, on either wire. Both run
// 16 contenders: with 8, a slow client (the race detector, a loaded
// machine) kept the newest-first queue so short that it measured as fair
// (Jain's index 0.992 once in CI, 0.75 to 0.97 over TCP locally); with 16
// it measured 0.24 to 0.80 in twelve runs under -race, the FIFO 1.000 in
// sixteen.
func TestFloorCatchesLIFO(t *testing.T) {
	for _, wire := range []string{wireTCP, wireGRPC} {
		t.Run(wire, func(t *testing.T) {
			res, err := run(wire, 16, 300*time.Millisecond, 50*time.Millisecond, true)
			if err != nil {
				t.Fatal(err)
			}
			t.Log(res)
			if !slices.Contains(res.grants, 0) && res.jain() >= 0.99 {
				t.Fatalf("a LIFO server passed as fair: grants per contender %v, Jain's index %.3f", res.grants, res.jain())
			}
		})
	}
}

func TestSetHopsRefusesUnknown(t *testing.T) {
	defer func() { _ = setHops("") }()
	if err := setHops("node-worker,sideways"); err == nil {
		t.Fatal("an unknown hand-off was accepted")
	}
}

func TestRunRefusesUnknownWire(t *testing.T) {
	if _, err := run("udp", 8, time.Millisecond, 0, false); err == nil {
		t.Fatal("an unknown wire was accepted")
	}
}
