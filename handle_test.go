package kahuna_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
)

// scripted is a Locker that answers TryLock from a script, then Locked.
type scripted struct {
	kahuna.Locker
	answers []kahuna.Status
	calls   atomic.Int64
}

func (s *scripted) TryLock(ctx context.Context, resource string, owner []byte, ttl time.Duration, d kahuna.Durability) (kahuna.Result, error) {
	i := int(s.calls.Add(1)) - 1
	if i < len(s.answers) {
		return kahuna.Result{Status: s.answers[i]}, nil
	}
	return kahuna.Result{Status: kahuna.Locked, FencingToken: 42}, nil
}

func TestAcquireRetriesMustRetry(t *testing.T) {
	l := &scripted{answers: []kahuna.Status{kahuna.MustRetry, kahuna.MustRetry, kahuna.MustRetry}}
	lock, err := kahuna.Acquire(context.Background(), l, "r")
	if err != nil {
		t.Fatal(err)
	}
	if lock.FencingToken() != 42 || l.calls.Load() != 4 {
		t.Fatalf("token %d after %d calls", lock.FencingToken(), l.calls.Load())
	}
}

func TestAcquireStopsOnOtherStatuses(t *testing.T) {
	l := &scripted{answers: []kahuna.Status{kahuna.Errored}}
	_, err := kahuna.Acquire(context.Background(), l, "r")
	var se *kahuna.StatusError
	if !errors.As(err, &se) || se.Status != kahuna.Errored || l.calls.Load() != 1 {
		t.Fatalf("err %v after %d calls", err, l.calls.Load())
	}
}

func TestAcquireContextEndsMustRetryLoop(t *testing.T) {
	answers := make([]kahuna.Status, 100_000)
	for i := range answers {
		answers[i] = kahuna.MustRetry
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := kahuna.Acquire(ctx, &scripted{answers: answers}, "r"); err != context.DeadlineExceeded {
		t.Fatalf("got %v, want ctx.Err() unchanged", err)
	}
}

func TestHandleOnNode(t *testing.T) {
	clk := newClock()
	n := openNode(t, kahuna.Config{Clock: clk.Now})
	ctx := context.Background()
	for _, d := range durabilities {
		t.Run(d.String(), func(t *testing.T) {
			res := "handle/" + d.String()
			a, err := kahuna.Acquire(ctx, n, res, kahuna.WithTTL(time.Second), kahuna.WithDurability(d))
			if err != nil {
				t.Fatal(err)
			}
			if a.Resource() != res || len(a.Owner()) != 32 || a.FencingToken() != 0 || a.Durability() != d {
				t.Fatalf("handle %q owner %q token %d", a.Resource(), a.Owner(), a.FencingToken())
			}
			_, err = kahuna.Acquire(ctx, n, res, kahuna.WithDurability(d))
			if !errors.Is(err, kahuna.ErrBusy) {
				t.Fatalf("second acquire: %v, want ErrBusy", err)
			}
			if err := a.Extend(ctx, 2*time.Second); err != nil {
				t.Fatal(err)
			}
			clk.Advance(3 * time.Second) // a's lease lapses
			err = a.Extend(ctx, time.Second)
			var se *kahuna.StatusError
			if !errors.Is(err, kahuna.ErrLockLost) || !errors.As(err, &se) || se.Status != kahuna.LockDoesNotExist {
				t.Fatalf("extend after lapse: %v", err)
			}
			b, err := kahuna.Acquire(ctx, n, res, kahuna.WithDurability(d), kahuna.WithOwner([]byte("bee")))
			if err != nil || b.FencingToken() != 1 || string(b.Owner()) != "bee" {
				t.Fatalf("acquire after lapse: %v", err)
			}
			if err := a.Unlock(ctx); !errors.Is(err, kahuna.ErrLockLost) || !errors.As(err, &se) || se.Status != kahuna.InvalidOwner {
				t.Fatalf("unlock by the lost owner: %v", err)
			}
			if err := b.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// busySignal tells when a TryLock through it was refused as Busy.
type busySignal struct {
	kahuna.Locker
	busy chan struct{}
}

func (b *busySignal) TryLock(ctx context.Context, resource string, owner []byte, ttl time.Duration, d kahuna.Durability) (kahuna.Result, error) {
	r, err := b.Locker.TryLock(ctx, resource, owner, ttl, d)
	if r.Status == kahuna.Busy {
		select {
		case b.busy <- struct{}{}:
		default:
		}
	}
	return r, err
}

func TestAcquireWaitsForRelease(t *testing.T) {
	n := openNode(t, kahuna.Config{})
	waiter := &busySignal{Locker: n, busy: make(chan struct{}, 1)}
	ctx := context.Background()
	first, err := kahuna.Acquire(ctx, n, "wait/r", kahuna.WithDurability(kahuna.Ephemeral))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *kahuna.Lock, 1)
	errc := make(chan error, 1)
	go func() {
		l, err := kahuna.Acquire(ctx, waiter, "wait/r", kahuna.WithDurability(kahuna.Ephemeral), kahuna.WithWait(10*time.Second))
		got <- l
		errc <- err
	}()
	<-waiter.busy // the waiter was refused at least once
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if l := <-got; l.FencingToken() != 1 {
		t.Fatalf("token %d, want 1", l.FencingToken())
	}
}

func TestAcquireWaitReturnsCtxErr(t *testing.T) {
	n := openNode(t, kahuna.Config{})
	ctx := context.Background()
	if _, err := kahuna.Acquire(ctx, n, "ctx/r"); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := kahuna.Acquire(cctx, n, "ctx/r", kahuna.WithWait(time.Hour))
		errc <- err
	}()
	cancel()
	if err := <-errc; err != context.Canceled {
		t.Fatalf("got %v, want context.Canceled unchanged", err)
	}
}
