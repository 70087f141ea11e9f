// Command core-rtt measures how long one cache line takes to go from one
// CPU to another and back: two threads, each pinned to its CPU, take turns
// writing one shared word. On a virtual machine the figure says how the
// host has placed its vCPUs (on cores that share a cache, or not), which
// moves what every hand-off between two processes' threads costs. This
// project's 2-vCPU machine has measured about 150 ns and about 450 ns on
// the same day, and kahuna's ephemeral rows over the wire moved with it,
// so a sitting quotes it beside tcp-rtt.
//
//	go run ./cmd/core-rtt                 # the first two CPUs this process may use
//	go run ./cmd/core-rtt --cpus 2,5 --rounds 9
//
// Linux only: it pins its threads with sched_setaffinity.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

func main() {
	cpus := flag.String("cpus", "", "the two CPUs, as A,B (default: the first two this process may run on)")
	n := flag.Int("n", 200_000, "round trips a round")
	rounds := flag.Int("rounds", 5, "rounds; the line gives their median, fastest and slowest")
	flag.Parse()
	if err := run(*cpus, *n, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "core-rtt:", err)
		os.Exit(1)
	}
}

func run(cpus string, n, rounds int) error {
	if n < 1 || rounds < 1 {
		return errors.New("--n and --rounds must be at least 1")
	}
	a, b, err := pickCPUs(cpus)
	if err != nil {
		return err
	}
	per := make([]time.Duration, rounds)
	for i := range per {
		if per[i], err = roundTrip(a, b, n); err != nil {
			return err
		}
	}
	slices.Sort(per)
	fmt.Printf("cross-core round trip of a cache line between CPUs %d and %d, %d rounds of %d: median %v  fastest %v  slowest %v\n",
		a, b, rounds, n, per[rounds/2], per[0], per[rounds-1])
	return nil
}

// pickCPUs parses "A,B", or takes the first two CPUs the process may use.
func pickCPUs(s string) (int, int, error) {
	if s == "" {
		allowed, err := allowedCPUs()
		if err != nil {
			return 0, 0, err
		}
		if len(allowed) < 2 {
			return 0, 0, fmt.Errorf("this process may run on %d CPU; two are needed", len(allowed))
		}
		return allowed[0], allowed[1], nil
	}
	as, bs, ok := strings.Cut(s, ",")
	a, errA := strconv.Atoi(as)
	b, errB := strconv.Atoi(bs)
	if !ok || errA != nil || errB != nil || a < 0 || b < 0 {
		return 0, 0, fmt.Errorf("--cpus %q: two CPU numbers, as 0,1", s)
	}
	if a == b {
		// Two spinning threads on one CPU take turns only when the
		// scheduler preempts one: that measures the scheduler.
		return 0, 0, fmt.Errorf("--cpus %q: two different CPUs", s)
	}
	return a, b, nil
}

// line is one cache line to itself, so nothing else shares its transfers.
type line struct {
	_ [64]byte
	v atomic.Int64
	_ [64]byte
}

// roundTrip returns the mean time for the word to go from a thread on
// CPU a to a thread on CPU b and back, over n round trips. Both threads
// are locked to their goroutines, which end with the round, so the pinned
// threads end too instead of going back to the runtime's pool.
func roundTrip(a, b, n int) (time.Duration, error) {
	type result struct {
		took time.Duration
		err  error
	}
	out := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if err := pin(a); err != nil {
			out <- result{err: err}
			return
		}
		var l line
		ready := make(chan error, 1)
		go func() {
			runtime.LockOSThread()
			if err := pin(b); err != nil {
				ready <- err
				return
			}
			ready <- nil
			for i := int64(0); i < int64(n); i++ {
				for l.v.Load() != 2*i+1 {
				}
				l.v.Store(2*i + 2)
			}
		}()
		if err := <-ready; err != nil {
			out <- result{err: err}
			return
		}
		start := time.Now()
		for i := int64(0); i < int64(n); i++ {
			l.v.Store(2*i + 1)
			for l.v.Load() != 2*i+2 {
			}
		}
		out <- result{took: time.Since(start) / time.Duration(n)}
	}()
	r := <-out
	return r.took, r.err
}
