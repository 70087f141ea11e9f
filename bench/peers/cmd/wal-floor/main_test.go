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
		fmt.Fprintln(os.Stderr, serve(os.Getenv(dirEnv), size))
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// Every answered write is in the log: the server answers only what it
// appended (and fdatasynced), and several writes share an fdatasync.
func TestFloorAnswersOnlyWhatItLogged(t *testing.T) {
	dir := t.TempDir()
	const record = 64
	res, err := run(16, 2, record, 300*time.Millisecond, 50*time.Millisecond, dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	if res.answered == 0 || len(res.latencies) == 0 || res.rounds == 0 {
		t.Fatalf("answered %d writes, %d measured, in %d fdatasyncs", res.answered, len(res.latencies), res.rounds)
	}
	if logged := fi.Size() / record; logged < res.answered {
		t.Fatalf("%d writes answered, %d in the log", res.answered, logged)
	}
	t.Log(res)
}
