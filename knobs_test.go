package kahuna_test

import (
	"context"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/internal/testknobs"
)

// The token-repeat knob, which the negative controls of the fencing
// checkers rely on, breaks the token rule for every kind: a new owner's
// grant takes the last token again. (A knob that silently stops working
// would let those controls pass against a correct engine only by luck.)
func TestTokenRepeatKnobRepeatsEveryKind(t *testing.T) {
	ctx := context.Background()
	n := openNode(t, testknobs.WithTokenRepeat(kahuna.Config{}))
	first, err := kahuna.Acquire(ctx, n, "knob/lock", kahuna.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	first.Unlock(ctx)
	second, err := kahuna.Acquire(ctx, n, "knob/lock", kahuna.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if second.FencingToken() != first.FencingToken() {
		t.Fatalf("lock: token %d after %d, want it repeated", second.FencingToken(), first.FencingToken())
	}

	sem := kahuna.NewSemaphore(n, "knob", 1)
	p, err := sem.TryAcquire(ctx, 1, kahuna.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	p.Unlock(ctx)
	q, err := sem.TryAcquire(ctx, 1, kahuna.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if q.FencingToken() != p.FencingToken() {
		t.Fatalf("semaphore: token %d after %d, want it repeated", q.FencingToken(), p.FencingToken())
	}

	rw := kahuna.NewRWLock(n, "knob")
	w, err := rw.TryLock(ctx, kahuna.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	w.Unlock(ctx)
	w2, err := rw.TryLock(ctx, kahuna.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if w2.FencingToken() != w.FencingToken() {
		t.Fatalf("rwlock: epoch %d after %d, want it repeated", w2.FencingToken(), w.FencingToken())
	}
}
