//go:build unix

// Command sessionholder is a holder process of the e2e session test: it
// opens a session, takes every lock of -locks in it (in the order given,
// waiting for each), works on them in a loop, closes the session, and
// again, until SIGTERM. Each act on the locks is read between two checks
// that the session's Context is live (a live session means every lock it
// holds is live), on CLOCK_MONOTONIC, which every process of
// the machine shares, so the test can compare the holds of all holders.
// Each hold is appended as it ends to -out's file for its lock
// (OUT.LOCKINDEX), one line:
//
//	holder hold-name fencing-token first-act-ns last-act-ns acts
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
	locks := flag.String("locks", "", "comma-separated lock names, taken in this order")
	id := flag.Int("id", 0, "this holder's number")
	ttl := flag.Duration("ttl", time.Second, "session TTL")
	out := flag.String("out", "", "file name prefix for the holds")
	flag.Parse()
	if err := run(strings.Split(*endpoints, ","), strings.Split(*locks, ","), *id, *ttl, *out); err != nil {
		fmt.Fprintln(os.Stderr, "sessionholder:", err)
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

// hold is one lock's acts in one session.
type hold struct {
	lock              *kahuna.Lock
	first, last, acts int64
}

func run(endpoints, names []string, id int, ttl time.Duration, out string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	files := make([]*os.File, len(names))
	for i := range names {
		f, err := os.OpenFile(fmt.Sprintf("%s.%d", out, i), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		files[i] = f
	}
	client, err := kahuna.Dial(ctx, endpoints)
	if err != nil {
		return err
	}
	defer client.Close()
	rng := rand.New(rand.NewPCG(uint64(id), uint64(time.Now().UnixNano())))
	fmt.Println("holding")
	for round := 0; ctx.Err() == nil; round++ {
		s, err := kahuna.NewSession(ctx, client, kahuna.WithTTL(ttl))
		if err != nil {
			if ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "round %d: session: %v\n", round, err)
				time.Sleep(50 * time.Millisecond)
			}
			continue
		}
		fmt.Println("session", s.ID()) // the test maps lock owners to holders by it
		holds := make([]*hold, 0, len(names))
		for _, name := range names {
			lk, err := kahuna.Acquire(ctx, client, name, kahuna.WithSession(s), kahuna.WithWait(30*time.Second))
			if err != nil {
				if ctx.Err() == nil {
					fmt.Fprintf(os.Stderr, "round %d: %s: %v\n", round, name, err)
				}
				break
			}
			holds = append(holds, &hold{lock: lk})
		}
		if len(holds) == len(names) {
			work(ctx, s.Context(), holds, int64(200+rng.IntN(1800)), fmt.Sprintf("holder-%d-%d", id, round))
		}
		for i, h := range holds {
			if _, err := fmt.Fprintf(files[i], "%d holder-%d-%d %d %d %d %d\n", id, id, round, h.lock.FencingToken(), h.first, h.last, h.acts); err != nil {
				return err
			}
		}
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = s.Close(cctx)
		cancel()
	}
	return nil
}

// work acts on the held locks, a number of rounds (about 0.2 to 2 s of
// them), so a pause does not use it up: a holder that wakes goes on
// working. Every act is under the session's Context alone.
func work(ctx, sctx context.Context, holds []*hold, rounds int64, name string) {
	var last int64
	for r := int64(0); r < rounds && ctx.Err() == nil; r++ {
		if sctx.Err() != nil {
			return
		}
		at := now()
		if sctx.Err() != nil {
			return
		}
		for _, h := range holds {
			if h.acts == 0 {
				h.first = at
			}
			h.last, h.acts = at, h.acts+1
		}
		if last > 0 && at-last > int64(100*time.Millisecond) {
			fmt.Fprintf(os.Stderr, "%s: acted at %d after a gap of %v\n", name, at, time.Duration(at-last))
		}
		last = at
		time.Sleep(time.Millisecond)
	}
}
