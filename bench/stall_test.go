package bench

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// stuckLocker's TryLock ignores its context and returns only when release
// is closed: the kind of call that hangs a run.
type stuckLocker struct {
	fakeLocker
	release chan struct{}
}

func (s *stuckLocker) TryLock(context.Context, string, []byte, time.Duration, lease.Durability) (lease.Result, error) {
	<-s.release
	return lease.Result{Status: lease.Locked}, nil
}

// signalWriter collects writes and closes wrote at the first one.
type signalWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	once  sync.Once
	wrote chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.once.Do(func() { close(w.wrote) })
	return w.buf.Write(p)
}

func (w *signalWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestStallReport: a target whose call never returns makes the run print
// every goroutine's stack once it overruns its plan by stallMargin, so a
// hang leaves evidence; the run ends when the call does.
func TestStallReport(t *testing.T) {
	out := &signalWriter{wrote: make(chan struct{})}
	oldMargin, oldOut := stallMargin, stallOut
	stallMargin, stallOut = 50*time.Millisecond, out
	defer func() { stallMargin, stallOut = oldMargin, oldOut }()

	l := &stuckLocker{release: make(chan struct{})}
	c := testConfig(WorkloadLock)
	c.Concurrency, c.Timeout = 1, 100*time.Millisecond
	done := make(chan error, 1)
	go func() {
		_, err := runOne(context.Background(), c, fakeTarget("stuck", l), 1, quiet, nil)
		done <- err
	}()
	select {
	case <-out.wrote:
	case err := <-done:
		t.Fatalf("the run ended (%v) with its call stuck", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no stall report 30 s into a run planned for 400 ms")
	}
	close(l.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	report := out.String()
	if !strings.Contains(report, "kahuna-bench: stuck is still running") || !strings.Contains(report, "stuckLocker).TryLock") {
		t.Fatalf("stall report without the target or the stuck call's stack:\n%.2000s", report)
	}
}
