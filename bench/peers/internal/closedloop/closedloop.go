// Package closedloop runs the floors' callers: each makes one call at a
// time, again and again, through a warm-up and then a measured window,
// and the samples they record in the window are gathered and sorted.
package closedloop

import (
	"bufio"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Window is a run's timing and the hooks at its measured window's edges.
type Window struct {
	Warmup, Duration time.Duration
	// Broken, if not nil, ends the run with its failure (a broken
	// connection).
	Broken *Breakage
	// Opened and Closed, if not nil, run as the measured window opens and
	// closes (a server's counters read); an error ends the run.
	Opened, Closed func() error
}

// Caller is one caller, as its step sees it.
type Caller struct {
	ID        int
	measuring *atomic.Bool
	samples   []time.Duration
}

// Measuring reports whether the measured window is open.
func (c *Caller) Measuring() bool { return c.measuring.Load() }

// Record keeps d as a sample if the measured window is open.
func (c *Caller) Record(d time.Duration) {
	if c.measuring.Load() {
		c.samples = append(c.samples, d)
	}
}

// Run starts callers goroutines, each calling step until it returns false
// (its connection broke) or the run ends, waits out w, lets every caller
// finish its step in progress, and returns the samples recorded in the
// window, sorted.
func Run(callers int, w Window, step func(*Caller) bool) ([]time.Duration, error) {
	var (
		measuring atomic.Bool
		stop      atomic.Bool
		mu        sync.Mutex
		samples   []time.Duration
		wg        sync.WaitGroup
	)
	for id := range callers {
		wg.Go(func() {
			c := &Caller{ID: id, measuring: &measuring}
			for !stop.Load() {
				if !step(c) {
					break
				}
			}
			mu.Lock()
			samples = append(samples, c.samples...)
			mu.Unlock()
		})
	}
	err := func() error {
		if err := wait(w.Warmup, w.Broken); err != nil {
			return err
		}
		if err := call(w.Opened); err != nil {
			return err
		}
		measuring.Store(true)
		if err := wait(w.Duration, w.Broken); err != nil {
			return err
		}
		measuring.Store(false)
		return call(w.Closed)
	}()
	stop.Store(true)
	if err != nil {
		return nil, err // the callers end as the caller closes what they use
	}
	wg.Wait()
	if err := w.Broken.failure(); err != nil { // while the callers finished
		return nil, err
	}
	slices.Sort(samples)
	return samples, nil
}

func wait(d time.Duration, b *Breakage) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-b.Done():
		return b.failure()
	case <-t.C:
		return nil
	}
}

// Breakage is a run's first failure: its connections' readers report
// what broke with Fail, and callers waiting for an answer give up when
// Done is closed.
type Breakage struct {
	once sync.Once
	err  error
	done chan struct{}
}

// NewBreakage returns a Breakage with no failure yet.
func NewBreakage() *Breakage { return &Breakage{done: make(chan struct{})} }

// Fail records err, unless a failure came first, and closes Done.
func (b *Breakage) Fail(err error) {
	b.once.Do(func() {
		b.err = err
		close(b.done)
	})
}

// Done is closed once something failed (never, for a nil Breakage).
func (b *Breakage) Done() <-chan struct{} {
	if b == nil {
		return nil
	}
	return b.done
}

// failure is the first failure, or nil if none came yet.
func (b *Breakage) failure() error {
	select {
	case <-b.Done():
		return b.err
	default:
		return nil
	}
}

// ReadAnswers reads r's fixed-size messages of size bytes, one after
// another, and hands each to deliver, until a read fails or deliver
// refuses a message: that error fails b. m is reused for the next read.
// It is a connection's reader: run it on a goroutine of its own.
func ReadAnswers(r io.Reader, size int, b *Breakage, deliver func(m []byte) error) {
	br := bufio.NewReader(r)
	m := make([]byte, size)
	for {
		if _, err := io.ReadFull(br, m); err != nil {
			b.Fail(err)
			return
		}
		if err := deliver(m); err != nil {
			b.Fail(err)
			return
		}
	}
}

// Await waits for answer, or for the run to break (false).
func Await[T any](answer <-chan T, b *Breakage) (T, bool) {
	select {
	case v := <-answer:
		return v, true
	case <-b.Done():
		var zero T
		return zero, false
	}
}

func call(f func() error) error {
	if f == nil {
		return nil
	}
	return f()
}

// Quantile is the p-quantile of sorted samples, to the microsecond (0 if
// there are none).
func Quantile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(p*float64(len(sorted)-1))].Round(time.Microsecond)
}
