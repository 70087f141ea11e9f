package kahuna_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
)

// TestInvalidInputReason: the embedded node says why it refused a request
// (Result.Reason, lease.Check's words), and nothing else carries a reason.
func TestInvalidInputReason(t *testing.T) {
	n := openNode(t, kahuna.Config{Partitions: 2})
	ctx := context.Background()
	big := strings.Repeat("r", 2000)
	for _, c := range []struct {
		name string
		call func() (kahuna.Result, error)
		want string
	}{
		{"ttl", func() (kahuna.Result, error) {
			return n.TryLock(ctx, "x", []byte("a"), 1000*time.Hour, kahuna.Persistent)
		}, "ttl 1000h0m0s is over the limit of 596h31m23.647s"},
		{"resource", func() (kahuna.Result, error) {
			return n.TryLock(ctx, big, []byte("a"), time.Second, kahuna.Ephemeral)
		}, "resource is 2000 bytes, over the limit of 1024"},
		{"owner", func() (kahuna.Result, error) { return n.Unlock(ctx, "x", nil, kahuna.Persistent) }, "owner is empty"},
		{"durability", func() (kahuna.Result, error) {
			_, r, err := n.Get(ctx, "x", 5)
			return r, err
		}, "durability 5 is unknown (0 ephemeral, 1 persistent)"},
		{"wait", func() (kahuna.Result, error) {
			return n.Lock(ctx, "x", []byte("a"), time.Second, -time.Second, kahuna.Persistent)
		}, "wait -1s is negative (only WaitForever, -1ns, waits without a limit)"},
		{"wait over", func() (kahuna.Result, error) {
			return n.Lock(ctx, "x", []byte("a"), time.Second, kahuna.MaxWait+time.Second, kahuna.Persistent)
		}, "wait 596h31m24.647s is over the limit of 596h31m23.647s"},
	} {
		r, err := c.call()
		if err != nil || r.Status != kahuna.InvalidInput || r.Reason != c.want {
			t.Errorf("%s: %+v %v, want InvalidInput with reason %q", c.name, r, err, c.want)
		}
	}
	if r, err := n.TryLock(ctx, "x", []byte("a"), time.Minute, kahuna.Persistent); err != nil || r.Status != kahuna.Locked || r.Reason != "" {
		t.Fatalf("valid lock: %+v %v, want Locked without a reason", r, err)
	}
	if r, err := n.TryLock(ctx, "x", []byte("b"), time.Minute, kahuna.Persistent); err != nil || r.Status != kahuna.Busy || r.Reason != "" {
		t.Fatalf("busy lock: %+v %v, want Busy without a reason", r, err)
	}
}

// TestStatusErrorText: the handle's errors say why in words, carry the
// reason of an InvalidInput, cut a long resource, and still match the
// sentinels.
func TestStatusErrorText(t *testing.T) {
	n := openNode(t, kahuna.Config{Partitions: 2})
	ctx := context.Background()

	_, err := kahuna.Acquire(ctx, n, "x", kahuna.WithTTL(1000*time.Hour))
	var se *kahuna.StatusError
	if !errors.As(err, &se) || se.Status != kahuna.InvalidInput || se.Reason == "" {
		t.Fatalf("Acquire with ttl 1000h: %v, want a *StatusError with InvalidInput and a reason", err)
	}
	if want := "kahuna: lock x: invalid input: ttl 1000h0m0s is over the limit of 596h31m23.647s"; err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}

	_, err = kahuna.Acquire(ctx, n, "x", kahuna.WithWait(-2*time.Second))
	if want := "kahuna: lock x: invalid input: wait -2s is negative (only WaitForever, -1ns, waits without a limit)"; err == nil || err.Error() != want {
		t.Fatalf("Acquire with wait -2s: %v, want %q", err, want)
	}

	long := strings.Repeat("n", 2000)
	_, err = kahuna.Acquire(ctx, n, long)
	if !errors.As(err, &se) || se.Resource != long {
		t.Fatalf("Acquire of a 2000-byte name: %v, want a *StatusError with the whole resource", err)
	}
	if want := "kahuna: lock " + strings.Repeat("n", 64) + "…(2000 bytes): invalid input: resource is 2000 bytes, over the limit of 1024"; err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}

	// A lock lost to another owner: a sentence, and still ErrLockLost.
	l, err := kahuna.Acquire(ctx, n, "y", kahuna.WithTTL(time.Minute), kahuna.WithDurability(kahuna.Ephemeral))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := n.Unlock(ctx, "y", l.Owner(), kahuna.Ephemeral); err != nil || r.Status != kahuna.Unlocked {
		t.Fatalf("unlock behind the handle: %+v %v", r, err)
	}
	if r, err := n.TryLock(ctx, "y", []byte("other"), time.Minute, kahuna.Ephemeral); err != nil || r.Status != kahuna.Locked {
		t.Fatalf("lock by another owner: %+v %v", r, err)
	}
	err = l.Extend(ctx, time.Minute)
	if !errors.Is(err, kahuna.ErrLockLost) || err.Error() != "kahuna: extend y: held by another owner" {
		t.Fatalf("extend of a lock taken by another owner: %q, want ErrLockLost, held by another owner", err)
	}

	// The other refusals, as the handle reports them.
	for _, c := range []struct {
		e    kahuna.StatusError
		want string
		is   error
	}{
		{kahuna.StatusError{Op: "lock", Resource: "r", Status: kahuna.Busy}, "kahuna: lock r: busy (held by another owner)", kahuna.ErrBusy},
		{kahuna.StatusError{Op: "unlock", Resource: "r", Status: kahuna.LockDoesNotExist}, "kahuna: unlock r: no such lock (never locked, released or expired)", kahuna.ErrLockLost},
		{kahuna.StatusError{Op: "lock", Resource: "r", Status: kahuna.MustRetry}, "kahuna: lock r: must retry (the node cannot serve it now; nothing was applied)", nil},
		{kahuna.StatusError{Op: "lock", Resource: "r", Status: kahuna.Errored}, "kahuna: lock r: outcome unknown (the request may or may not have been applied)", nil},
		{kahuna.StatusError{Op: "lock", Resource: "r", Status: kahuna.InvalidInput}, "kahuna: lock r: invalid input", nil},
	} {
		err := error(&c.e)
		if err.Error() != c.want {
			t.Errorf("%v: %q, want %q", c.e.Status, err, c.want)
		}
		if c.is != nil && !errors.Is(err, c.is) {
			t.Errorf("%v: errors.Is(%v) = false", c.e.Status, c.is)
		}
		if c.is == nil && (errors.Is(err, kahuna.ErrBusy) || errors.Is(err, kahuna.ErrLockLost)) {
			t.Errorf("%v: matches a sentinel", c.e.Status)
		}
	}
}
