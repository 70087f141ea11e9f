package transport

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// TestAnswersWakeEveryCallerInTurn: the callers of one answer message are
// woken one after another, each by the one before it (wakeInTurn). A
// caller whose context ends after its answer was matched still wakes the
// next, so no caller is left waiting behind one that left. Callers 2 and 5
// of 8 see their contexts end just before the turn starts; each run gives
// them the chance to leave their wait through the context first.
func TestAnswersWakeEveryCallerInTurn(t *testing.T) {
	const callers, runs = 8, 200
	s := &batchStream{wake: make(chan struct{}, 1), allRan: make(chan struct{}, 1), ctx: context.Background()}
	for run := range runs {
		calls := make([]*call, callers)
		cancels := make([]context.CancelFunc, callers)
		returned := make(chan int, callers)
		for i := range calls {
			c := newCall()
			c.op = lease.TryLock
			calls[i] = c
			ctx, cancel := context.WithCancel(context.Background())
			cancels[i] = cancel
			go func() {
				if err := s.doLate(ctx, c, nil); err != nil {
					t.Errorf("run %d: caller %d: %v, want its answer", run, i, err)
				}
				returned <- i
			}()
		}
		// The reader's part: every call sent and answered by one message.
		for queued := 0; queued < callers; runtime.Gosched() {
			s.mu.Lock()
			queued = len(s.queue)
			s.mu.Unlock()
		}
		s.mu.Lock()
		for _, c := range s.queue {
			c.state, c.woken = callIdle, true
			c.reply = reply{res: lease.Result{Status: lease.Locked}}
		}
		clear(s.queue)
		s.queue = s.queue[:0]
		s.mu.Unlock()
		cancels[2]()
		cancels[5]()
		runtime.Gosched()
		wakeInTurn(calls)

		guard := time.After(10 * time.Second) // a guard against a hang, not a wait for a signal
		for range callers {
			select {
			case <-returned:
			case <-guard:
				t.Fatalf("run %d: a caller still waits 10 s after the turn started", run)
			}
		}
		for _, cancel := range cancels {
			cancel()
		}
	}
}
