package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

// TestSemaphorePermits: permits are taken up to the limit and printed
// with their slots and tokens; past it the answer is busy; a limit that
// differs from the server's, or bad input, is refused with the reason.
func TestSemaphorePermits(t *testing.T) {
	_, ep := startNode(t)
	r := ctl(t, "semaphore", "pool", "--limit", "2", "--endpoints", ep).want(t, exitOK, "first permit")
	if !strings.HasPrefix(r.stdout, "semaphore pool: 1 of 2 permits, owner ") || !strings.HasSuffix(r.stdout, ", slots 0, fencing tokens 1, 1 left free\n") {
		t.Fatalf("first permit: %s", r)
	}
	r = ctl(t, "semaphore", "pool", "--limit", "2", "--format", "json", "--endpoints", ep).want(t, exitOK, "second permit")
	var got struct {
		PermitsFree int `json:"permitsFree"`
		Permits     []struct {
			Slot         int   `json:"slot"`
			FencingToken int64 `json:"fencingToken"`
		} `json:"permits"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || len(got.Permits) != 1 || got.Permits[0].Slot != 1 || got.Permits[0].FencingToken != 1 || got.PermitsFree != 0 {
		t.Fatalf("second permit as JSON: %s (%v)", r, err)
	}
	ctl(t, "semaphore", "pool", "--limit", "2", "--endpoints", ep).want(t, exitBusy, "a third permit of 2")
	r = ctl(t, "semaphore", "pool", "--limit", "3", "--endpoints", ep).want(t, exitError, "another limit")
	if !strings.Contains(r.stdout, "semaphore limit is 2; this request states 3") {
		t.Fatalf("another limit: %s", r)
	}
	for _, args := range [][]string{{"pool"}, {"pool", "--limit", "0"}, {"pool", "--limit", "2", "-n", "3"}, {"--limit", "2"}} {
		ctl(t, append(append([]string{"semaphore"}, args...), "--endpoints", ep)...).want(t, exitUsage, strings.Join(args, " "))
	}
	r = ctl(t, "lock", "semaphore:pool", "--endpoints", ep).want(t, exitUsage, "a lock call on a semaphore's name")
	if !strings.Contains(r.stdout+r.stderr, "a lock call cannot take it") {
		t.Fatalf("lock on a semaphore's name: %s", r)
	}
}

// TestSemaphoreRun: CMD runs with its permits' slots and tokens in its
// environment and holds them while it runs; they are free once it exits.
func TestSemaphoreRun(t *testing.T) {
	_, ep := startNode(t)
	dir := t.TempDir()
	gate := dir + "/go-on"
	s := start("semaphore", "runners", "--limit", "2", "-n", "2", "--endpoints", ep, "--", "sh", "-c",
		`echo "$KAHUNA_SEMAPHORE_NAME|$KAHUNA_SEMAPHORE_SLOT|$KAHUNA_SEMAPHORE_SLOTS|$KAHUNA_FENCING_TOKEN|$KAHUNA_FENCING_TOKENS"; while [ ! -e "$1" ]; do sleep 0.02; done`, "sh", gate)
	await(t, s.stdout.seen("\n"), 30*time.Second, "CMD's line", s)
	if want := `runners|0|0,1|1|{"0":1,"1":1}` + "\n"; s.stdout.String() != want {
		t.Fatalf("CMD saw %q, want %q", s.stdout.String(), want)
	}
	ctl(t, "semaphore", "runners", "--limit", "2", "--endpoints", ep).want(t, exitBusy, "a permit while CMD holds both")
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s.result(t, 30*time.Second).want(t, exitOK, "semaphore -- sh")
	r := ctl(t, "semaphore", "runners", "--limit", "2", "-n", "2", "--endpoints", ep).want(t, exitOK, "both permits after CMD exited")
	if !strings.HasSuffix(r.stdout, "slots 0,1, fencing tokens 2,2, 0 left free\n") {
		t.Fatalf("after CMD: %s, want both slots at their second generation", r)
	}
}

// TestSemaphoreSetLimit: --set-limit grows a semaphore online and shrinks
// it; bad values are usage errors.
func TestSemaphoreSetLimit(t *testing.T) {
	_, ep := startNode(t)
	ctl(t, "semaphore", "pool", "--limit", "1", "--ttl", "1m", "--endpoints", ep).want(t, exitOK, "the one permit")
	ctl(t, "semaphore", "pool", "--limit", "1", "--endpoints", ep).want(t, exitBusy, "a second permit of 1")
	r := ctl(t, "semaphore", "pool", "--set-limit", "2", "--endpoints", ep).want(t, exitOK, "grow to 2")
	if r.stdout != "semaphore pool: limit set to 2\n" {
		t.Fatalf("grow: %s", r)
	}
	r = ctl(t, "semaphore", "pool", "--limit", "2", "--endpoints", ep).want(t, exitOK, "the grown permit")
	if !strings.HasPrefix(r.stdout, "semaphore pool: 1 of 2 permits") || !strings.HasSuffix(r.stdout, "slots 1, fencing tokens 1, 0 left free\n") {
		t.Fatalf("the grown permit: %s", r)
	}
	ctl(t, "semaphore", "pool", "--limit", "1", "--endpoints", ep).want(t, exitError, "the old limit")
	for _, args := range [][]string{{"pool", "--set-limit", "0"}, {"pool", "--set-limit", "300"}, {"pool", "--set-limit", "2", "--", "true"}} {
		ctl(t, append([]string{"semaphore", "--endpoints", ep}, args...)...).want(t, exitUsage, strings.Join(args, " "))
	}
}
