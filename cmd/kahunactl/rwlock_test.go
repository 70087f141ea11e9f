package main

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestLockReadWrite: readers share a read/write lock under one epoch, a
// writer is busy while they hold it and takes the next epoch after; a
// reader's CMD runs with its mode and epoch; bad combinations are usage
// errors.
func TestLockReadWrite(t *testing.T) {
	_, ep := startNode(t)
	r := ctl(t, "lock", "--read", "index", "--ttl", "1m", "--owner", "r1", "--endpoints", ep).want(t, exitOK, "first reader")
	if r.stdout != "locked rwlock:index for read owner r1 fencing token 0\n" {
		t.Fatalf("first reader: %s", r)
	}
	ctl(t, "lock", "--read", "index", "--ttl", "1m", "--owner", "r2", "--endpoints", ep).want(t, exitOK, "second reader beside the first")
	ctl(t, "lock", "--write", "index", "--endpoints", ep).want(t, exitBusy, "a writer while readers hold")
	ctl(t, "lock", "rwlock:index", "--endpoints", ep).want(t, exitBusy, "a plain lock of the entry is the write lock")
	for _, owner := range []string{"r1", "r2"} {
		ctl(t, "unlock", "rwlock:index", "--owner", owner, "--endpoints", ep).want(t, exitOK, "unlock "+owner)
	}
	r = ctl(t, "lock", "--write", "index", "--owner", "w", "--format", "json", "--endpoints", ep).want(t, exitOK, "the writer once the readers left")
	if !strings.Contains(r.stdout, `"fencingToken":1`) || !strings.Contains(r.stdout, `"mode":"write"`) {
		t.Fatalf("writer: %s", r)
	}
	ctl(t, "lock", "--read", "index", "--endpoints", ep).want(t, exitBusy, "a reader while the writer holds")
	ctl(t, "unlock", "rwlock:index", "--owner", "w", "--endpoints", ep).want(t, exitOK, "unlock the writer")

	dir := t.TempDir()
	gate := dir + "/go-on"
	s := start("lock", "--read", "index", "--endpoints", ep, "--", "sh", "-c",
		`echo "$KAHUNA_LOCK_RESOURCE|$KAHUNA_LOCK_MODE|$KAHUNA_FENCING_TOKEN"; while [ ! -e "$1" ]; do sleep 0.02; done`, "sh", gate)
	await(t, s.stdout.seen("\n"), 30*time.Second, "CMD's line", s)
	if want := "rwlock:index|read|1\n"; s.stdout.String() != want {
		t.Fatalf("CMD saw %q, want %q", s.stdout.String(), want)
	}
	ctl(t, "lock", "--write", "index", "--endpoints", ep).want(t, exitBusy, "a writer while CMD reads")
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s.result(t, 30*time.Second).want(t, exitOK, "lock --read -- sh")
	ctl(t, "lock", "--write", "index", "--endpoints", ep).want(t, exitOK, "a writer after CMD exited")

	for _, args := range [][]string{
		{"--read", "--write", "index"},
		{"--read", "index", "--durability", "ephemeral"},
		{"--read", "a", "b", "--", "true"},
	} {
		ctl(t, append(append([]string{"lock"}, args...), "--endpoints", ep)...).want(t, exitUsage, strings.Join(args, " "))
	}
}
