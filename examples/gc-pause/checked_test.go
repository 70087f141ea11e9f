package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/fence"
)

// TestCheckedStoreAgainstNode: fence.Checked asking a real node through
// kahuna.CheckToken refuses the first write of a holder whose lease ended,
// the write a high-water mark alone lets through, since no later holder
// has written yet.
func TestCheckedStoreAgainstNode(t *testing.T) {
	ctx := context.Background()
	node, err := kahuna.Open(kahuna.Config{}) // in memory
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	check := func(ctx context.Context, tok fence.Token) (bool, int64, error) {
		c, err := kahuna.CheckToken(ctx, node, tok.Lock, int64(tok.Value), kahuna.Persistent)
		return c.Valid, c.Current, err
	}
	marks := fence.NewMemoryStore()
	checked := fence.Checked(marks, check)

	const ttl = 300 * time.Millisecond
	r, err := node.TryLock(ctx, "jobs/report", []byte("worker-1"), ttl, kahuna.Persistent)
	if err != nil || r.Status != kahuna.Locked {
		t.Fatalf("TryLock: %v %v", r, err)
	}
	tok, err := fence.TokenOf("jobs/report", "", r.FencingToken)
	if err != nil {
		t.Fatal(err)
	}
	write := func(context.Context) error { return nil }
	if err := checked.Fence(ctx, "report", tok, write); err != nil {
		t.Fatalf("write under a live lease: %v", err)
	}
	// The holder pauses past its lease; nobody else has the lock yet.
	time.Sleep(ttl + 50*time.Millisecond) // the lease's own end, on the clock it is measured by
	if err := marks.Fence(ctx, "report", tok, write); err != nil {
		t.Fatalf("the mark alone refused the lapsed holder's write (%v): the case the check is for did not arise", err)
	}
	var stale *fence.StaleError
	if err := checked.Fence(ctx, "report", tok, write); !errors.As(err, &stale) || !stale.Lapsed {
		t.Fatalf("write after the lease ended: %v, want a lapsed StaleError", err)
	}
	// A later holder: the old token is refused with the new one.
	r2, err := node.TryLock(ctx, "jobs/report", []byte("worker-2"), time.Minute, kahuna.Persistent)
	if err != nil || r2.Status != kahuna.Locked {
		t.Fatalf("second TryLock: %v %v", r2, err)
	}
	if err := checked.Fence(ctx, "report", tok, write); !errors.As(err, &stale) || stale.Lapsed || stale.Current != uint64(r2.FencingToken) {
		t.Fatalf("write of the superseded holder: %v, want a StaleError with current %d", err, r2.FencingToken)
	}
}
