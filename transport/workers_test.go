package transport

import (
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// A job that waits holds up no other: each is served at once, as on a
// goroutine of its own.
func TestWorkersServeEveryJobAtOnce(t *testing.T) {
	release := make(chan struct{})
	started := make(chan int, 8)
	var wg sync.WaitGroup
	w := newWorkers(func(n int) {
		defer wg.Done()
		started <- n
		<-release
	}, nil)
	defer w.close()
	wg.Add(8)
	for n := range 8 {
		w.run(n)
	}
	seen := map[int]bool{}
	for range 8 {
		select {
		case n := <-started:
			seen[n] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("jobs started: %v; the rest waited behind the blocked ones", seen)
		}
	}
	close(release)
	wg.Wait()
}

// Jobs one after another run on the same goroutines: a stream does not
// start (and grow the stack of) a goroutine per job.
func TestWorkersReuseGoroutines(t *testing.T) {
	ran := make(chan string)
	w := newWorkers(func(struct{}) { ran <- goroutineID() }, nil)
	defer w.close()
	seen := map[string]bool{}
	for range 1000 {
		w.run(struct{}{})
		seen[<-ran] = true
	}
	// A worker parks after its job; the next run may find it still
	// finishing and start one more, so allow a few.
	if len(seen) > 4 {
		t.Fatalf("1000 jobs one at a time ran on %d goroutines", len(seen))
	}
}

// goroutineID is the calling goroutine's number, from its stack's header.
func goroutineID() string {
	var buf [64]byte
	f := strings.Fields(string(buf[:runtime.Stack(buf[:], false)]))
	return f[1] // "goroutine 42 [running]:"
}

// close ends the idle workers, and a busy one once its job is done.
func TestWorkersClose(t *testing.T) {
	release := make(chan struct{})
	var wg sync.WaitGroup
	w := newWorkers(func(block bool) {
		defer wg.Done()
		if block {
			<-release
		}
	}, nil)
	base := runtime.NumGoroutine()
	wg.Add(3)
	w.run(true)
	w.run(false)
	w.run(false)
	w.close()
	close(release)
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines left after close, %d before the jobs", runtime.NumGoroutine(), base)
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
}
