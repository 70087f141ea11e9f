package bench

import (
	"context"
	"testing"
	"time"
)

func TestWatchdogCancelsOnlyTheOperationThatRanLate(t *testing.T) {
	w := &worker{runCtx: context.Background()}
	w.ctx, w.cancel = context.WithCancelCause(w.runCtx)

	first := w.begin(5)
	w.expire(5)
	if !isTimeout(first, first.Err()) {
		t.Fatalf("late operation: err %v, cause %v; want a timeout", first.Err(), context.Cause(first))
	}
	w.end()
	second := w.begin(10)
	if second.Err() != nil {
		t.Fatal("the next operation inherited the cancelled context")
	}
	w.expire(5) // a stale stamp: that operation is over
	w.end()
	w.expire(10) // idle worker
	if second.Err() != nil {
		t.Errorf("an operation cancelled after it ended or for another's stamp: %v", context.Cause(second))
	}
	if w.inFlight() {
		t.Error("idle worker reported in flight")
	}
}

func TestWatchdogScans(t *testing.T) {
	w := &worker{runCtx: context.Background()}
	w.ctx, w.cancel = context.WithCancelCause(w.runCtx)
	base := time.Now()
	stop := startWatchdog(context.Background(), []*worker{w}, 10*time.Millisecond, base)
	defer stop()
	ctx := w.begin(time.Since(base))
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("operation not cancelled past its timeout")
	}
	if !isTimeout(ctx, ctx.Err()) {
		t.Errorf("cause = %v", context.Cause(ctx))
	}
}
