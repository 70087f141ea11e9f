// Command gc-pause runs the GC-pause trap with real processes, twice:
// without a fence and with one.
//
// A kahuna node runs in this process. Worker 1 (a process of its own)
// acquires a lock with a 2 s lease, reads the value and is then stopped
// with SIGSTOP, as a long GC pause or a frozen VM would stop it. Worker 2
// asks for the lock, waits on the node until worker 1's lease has ended,
// is granted the next token and writes 100. Worker 1 is resumed: its
// handle says the lease is lost, and it writes its stale value anyway, as
// a worker that does not look would. Without the fence that write lands
// and worker 2's is lost; with the fence (fence/sqlfence) it is rejected
// with the winning token.
//
//	go run .                                    # SQLite in a temporary directory
//	go run . --dsn postgres://user@host/db      # PostgreSQL
//
// Linux and the BSDs (SIGSTOP).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	if os.Getenv(roleEnv) == "worker" {
		os.Exit(worker())
	}
	dsn := flag.String("dsn", "", "PostgreSQL DSN (postgres://…); empty: SQLite in a temporary directory")
	ttl := flag.Duration("ttl", 2*time.Second, "worker 1's lease")
	flag.Parse()
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gc-pause:", err)
		os.Exit(1)
	}
	runs, err := run(context.Background(), self, *dsn, *ttl)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gc-pause:", err)
		os.Exit(1)
	}
	printSideBySide(os.Stdout, runs)
}
