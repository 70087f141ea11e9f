package main

import (
	"strings"
	"testing"
)

func TestRoundTripBetweenTwoCPUs(t *testing.T) {
	allowed, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	if len(allowed) < 2 {
		t.Skipf("this machine lets the test run on %d CPU; the tool needs two", len(allowed))
	}
	d, err := roundTrip(allowed[0], allowed[1], 10_000)
	if err != nil {
		t.Fatal(err)
	}
	// A cache line's round trip between cores takes tens to hundreds of
	// nanoseconds; anything near a scheduler's time slice means the two
	// threads shared a CPU, which the pinning is there to rule out.
	if d <= 0 || d > 100_000 {
		t.Fatalf("round trip %v: want between 0 and 100µs", d)
	}
}

func TestBadCPUsAreRefused(t *testing.T) {
	for _, tc := range []struct{ cpus, want string }{
		{"0,0", "two different CPUs"},
		{"0", "two CPU numbers"},
		{"a,1", "two CPU numbers"},
		{"-1,1", "two CPU numbers"},
	} {
		if _, _, err := pickCPUs(tc.cpus); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--cpus %q: %v, want an error saying %q", tc.cpus, err, tc.want)
		}
	}
	// A CPU the process may not use fails when its thread is pinned, and
	// the round ends with the error instead of spinning forever.
	if _, err := roundTrip(0, 1<<12, 10); err == nil {
		t.Fatal("a round on CPU 4096 measured something")
	}
}
