//go:build unix

// Command electioncandidate is a candidate process of the e2e election
// test: it campaigns, leads for a while acting in a loop, resigns, and
// again, until SIGTERM. Each act's instant is read between two checks that
// the leadership's Context is live, on CLOCK_MONOTONIC, which every process
// of the machine shares, so the test can compare the terms of all
// candidates. Each term is appended to -out as it ends, one line:
//
//	candidate value epoch first-act-ns last-act-ns acts
//
// The test freezes the process with SIGSTOP, as a GC pause or a VM freeze
// would, and resumes it with SIGCONT.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kahunago/kahuna"
)

func main() {
	endpoints := flag.String("endpoints", "", "comma-separated node URLs")
	name := flag.String("name", "", "the election")
	id := flag.Int("id", 0, "this candidate's number")
	ttl := flag.Duration("ttl", time.Second, "leadership TTL")
	out := flag.String("out", "", "file to append terms to")
	flag.Parse()
	if err := run(strings.Split(*endpoints, ","), *name, *id, *ttl, *out); err != nil {
		fmt.Fprintln(os.Stderr, "electioncandidate:", err)
		os.Exit(1)
	}
}

// now is CLOCK_MONOTONIC in nanoseconds: the same clock in every process.
func now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

func run(endpoints []string, name string, id int, ttl time.Duration, out string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	client, err := kahuna.Dial(ctx, endpoints)
	if err != nil {
		return err
	}
	defer client.Close()
	rng := rand.New(rand.NewPCG(uint64(id), uint64(time.Now().UnixNano())))
	fmt.Println("campaigning")
	for round := 0; ctx.Err() == nil; round++ {
		value := fmt.Sprintf("cand-%d-%d", id, round)
		ld, err := kahuna.Campaign(ctx, client, name, []byte(value), kahuna.WithTTL(ttl))
		if err != nil {
			if ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "campaign %s: %v\n", value, err)
				time.Sleep(50 * time.Millisecond)
			}
			continue
		}
		var first, last, acts int64
		// The term's work: a number of acts (about 0.2 to 2 s of them), so
		// a pause does not use it up: a leader that wakes goes on working.
		tenure := int64(200 + rng.IntN(1800))
		lctx := ld.Context()
		for acts < tenure && ctx.Err() == nil {
			if lctx.Err() != nil {
				break
			}
			at := now()
			if lctx.Err() != nil {
				break
			}
			if acts > 0 && at-last > int64(100*time.Millisecond) {
				// Resumed from a pause: say what it saw, for a report.
				fmt.Fprintf(os.Stderr, "%s epoch %d: acted at %d after a gap of %v; deadline %v away; Context now %v\n",
					value, ld.Epoch(), at, time.Duration(at-last), time.Until(ld.Expires()), lctx.Err())
			}
			if acts == 0 {
				first = at
			}
			last, acts = at, acts+1
			time.Sleep(time.Millisecond)
		}
		if _, err := fmt.Fprintf(f, "%d %s %d %d %d %d\n", id, value, ld.Epoch(), first, last, acts); err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = ld.Resign(rctx)
		cancel()
	}
	return nil
}
