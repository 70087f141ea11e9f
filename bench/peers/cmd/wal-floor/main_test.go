package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestMain serves as the floor's server process when run() starts this
// test binary as one.
func TestMain(m *testing.M) {
	if os.Getenv(serverEnv) != "" {
		var size int
		if _, err := fmt.Sscan(os.Getenv(recordEnv), &size); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, serve(os.Getenv(dirEnv), size, os.Getenv(skipAppendEnv) != ""))
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// loggedRun runs 16 callers and returns the run and how many records its
// log holds.
func loggedRun(t *testing.T, skipAppend bool) (result, int64) {
	t.Helper()
	dir := t.TempDir()
	const record = 64
	res, err := run(16, 2, record, 300*time.Millisecond, 50*time.Millisecond, dir, skipAppend)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res)
	return res, fi.Size() / record
}

// Every answered write is in the log: the server answers only what it
// appended (and fdatasynced), and several writes share an fdatasync.
func TestFloorAnswersOnlyWhatItLogged(t *testing.T) {
	res, logged := loggedRun(t, false)
	if res.answered == 0 || len(res.latencies) == 0 || res.rounds == 0 {
		t.Fatalf("answered %d writes, %d measured, in %d fdatasyncs", res.answered, len(res.latencies), res.rounds)
	}
	if logged < res.answered {
		t.Fatalf("%d writes answered, %d in the log", res.answered, logged)
	}
}

// Negative control: a server that answers writes it never appended is
// caught by the same comparison.
func TestFloorReportsUnloggedAnswers(t *testing.T) {
	res, logged := loggedRun(t, true)
	if res.answered == 0 || logged >= res.answered {
		t.Fatalf("answered %d writes without appending them, %d in the log: not caught", res.answered, logged)
	}
}
