package kahuna_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
)

func TestRWLockReadersShareAndWritersTakeTheNextEpoch(t *testing.T) {
	ctx := context.Background()
	n := openNode(t, kahuna.Config{})
	rw := kahuna.NewRWLock(n, "index")
	r1, err := rw.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := rw.TryRLock(ctx)
	if err != nil {
		t.Fatalf("a second reader: %v", err)
	}
	if r1.FencingToken() != r2.FencingToken() {
		t.Fatalf("readers of one epoch: tokens %d and %d", r1.FencingToken(), r2.FencingToken())
	}
	if _, err := rw.TryLock(ctx); !errors.Is(err, kahuna.ErrBusy) {
		t.Fatalf("writer while two read: %v, want busy", err)
	}
	r1.Unlock(ctx)
	r2.Unlock(ctx)
	w, err := rw.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if w.FencingToken() != r1.FencingToken()+1 {
		t.Fatalf("writer's epoch %d, want the readers' %d + 1", w.FencingToken(), r1.FencingToken())
	}
	if _, err := rw.TryRLock(ctx); !errors.Is(err, kahuna.ErrBusy) {
		t.Fatalf("reader while the writer holds: %v, want busy", err)
	}
	w.Unlock(ctx)
	r3, err := rw.TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r3.FencingToken() != w.FencingToken() {
		t.Fatalf("reader after the write reads under epoch %d, want the writer's %d", r3.FencingToken(), w.FencingToken())
	}
}

// A writer waiting blocks the readers after it: they are not let in with
// the reader that holds the lock, so the writer is not starved.
func TestRWLockWaitingWriterIsNotStarved(t *testing.T) {
	ctx := context.Background()
	n := openNode(t, kahuna.Config{})
	rw := kahuna.NewRWLock(n, "index")
	reader, err := rw.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		lk  *kahuna.Lock
		err error
	}
	writer, later := make(chan res, 1), make(chan res, 1)
	go func() { lk, err := rw.Lock(ctx); writer <- res{lk, err} }()
	waitUntil(t, "the writer waits", func() bool { return n.Stats().Waiters == 1 })
	if _, err := rw.TryRLock(ctx); !errors.Is(err, kahuna.ErrBusy) {
		t.Fatalf("a new reader while a writer waits: %v, want busy", err)
	}
	go func() { lk, err := rw.RLock(ctx); later <- res{lk, err} }()
	waitUntil(t, "a reader waits behind the writer", func() bool { return n.Stats().Waiters == 2 })
	reader.Unlock(ctx)
	w := <-writer
	if w.err != nil {
		t.Fatal(w.err)
	}
	select {
	case r := <-later:
		t.Fatalf("a reader was let in while the writer holds: %+v", r)
	default:
	}
	w.lk.Unlock(ctx)
	if r := <-later; r.err != nil || r.lk.FencingToken() != w.lk.FencingToken() {
		t.Fatalf("the later reader: %+v, want epoch %d", r, w.lk.FencingToken())
	}
}

func TestRWLockUpgradeIsRefused(t *testing.T) {
	ctx := context.Background()
	n := openNode(t, kahuna.Config{})
	rw := kahuna.NewRWLock(n, "index")
	owner := kahuna.NewOwner()
	if _, err := rw.RLock(ctx, kahuna.WithOwner(owner)); err != nil {
		t.Fatal(err)
	}
	_, err := rw.Lock(ctx, kahuna.WithOwner(owner))
	if st, reason, ok := statusOf(err); !ok || st != kahuna.InvalidInput || reason == "" {
		t.Fatalf("upgrade: %v, want InvalidInput at once", err)
	}
	if _, err := kahuna.NewRWLock(n, "").TryLock(ctx); !isInvalid(err, "name is empty") {
		t.Fatalf("empty name: %v", err)
	}
}

// A write lock is a plain lock request: Kahuna's own wire carries it; a
// read lock needs a Locker that sends the request whole, as the Client
// does over gRPC and over REST.
func TestRWLockOverTheWire(t *testing.T) {
	ctx := context.Background()
	n := openNode(t, kahuna.Config{ListenAddress: "127.0.0.1:0"})
	ep := "http://" + n.ListenAddress()
	grpc, err := kahuna.Dial(ctx, []string{ep})
	if err != nil {
		t.Fatal(err)
	}
	defer grpc.Close()
	rest, err := kahuna.Dial(ctx, []string{ep}, kahuna.WithREST())
	if err != nil {
		t.Fatal(err)
	}
	defer rest.Close()
	r, err := kahuna.NewRWLock(grpc, "docs").TryRLock(ctx, kahuna.WithTTL(time.Minute))
	if err != nil {
		t.Fatalf("read lock over gRPC: %v", err)
	}
	if _, err := kahuna.NewRWLock(rest, "docs").TryLock(ctx); !errors.Is(err, kahuna.ErrBusy) {
		t.Fatalf("write lock over REST while a reader holds: %v, want busy", err)
	}
	r2, err := kahuna.NewRWLock(rest, "docs").TryRLock(ctx, kahuna.WithTTL(time.Minute))
	if err != nil || r2.FencingToken() != r.FencingToken() {
		t.Fatalf("read lock over REST beside a gRPC reader: %v (epoch %v, the other reader's %d)", err, r2, r.FencingToken())
	}
	r.Unlock(ctx)
	if _, err := kahuna.NewRWLock(rest, "docs").TryLock(ctx); !errors.Is(err, kahuna.ErrBusy) {
		t.Fatalf("write lock over REST while a REST reader holds: %v, want busy", err)
	}
	// A writer over REST that waits (it polls: REST queues nothing on the
	// server) is granted once the reader lets go.
	got := make(chan *kahuna.Lock, 1)
	go func() {
		w, err := kahuna.NewRWLock(rest, "docs").Lock(ctx, kahuna.WithWait(time.Minute))
		if err != nil {
			t.Errorf("write lock over REST: %v", err)
		}
		got <- w
	}()
	r2.Unlock(ctx)
	w := <-got
	if w == nil || w.FencingToken() != r.FencingToken()+1 {
		t.Fatalf("write lock over REST: epoch %v after %d", w, r.FencingToken())
	}
}
