package fence

import (
	"context"
	"fmt"
)

// HolderCheck asks the lock service whether tok is the fencing token of
// its lock's live holder (held, lease not ended), and returns the live
// holder's token, -1 when no one holds the lock. kahuna.CheckToken answers
// it for a mutex:
//
//	check := func(ctx context.Context, tok fence.Token) (bool, int64, error) {
//		c, err := kahuna.CheckToken(ctx, client, tok.Lock, int64(tok.Value), kahuna.Persistent)
//		return c.Valid, c.Current, err
//	}
type HolderCheck func(ctx context.Context, tok Token) (live bool, current int64, err error)

// Checked returns a Store that admits a write only if inner admits it (tok
// at or above the mark) and then, inside inner's atomic step, check says
// tok is the live holder's token. A check that says no is a *StaleError:
// with the live holder's token as Current when a later holder has the lock,
// with Lapsed set when no one holds it or tok's lease has ended. A failed
// check (the lock service unreachable, say) is returned wrapped, is never
// a *StaleError, and write does not run: the store fails closed.
//
// What the check adds to the mark: a high-water mark stops a stale write
// only once a later holder has written; the check also stops the stale
// holder whose lease ended before anyone else wrote (the GC-pause trap's
// first write). What it does not: the lease can still end between the
// check's answer and the write landing, a span as long as the check's
// return trip plus the write; and each write costs one call to the lock
// service.
func Checked(inner Store, check HolderCheck) Store {
	return &checkedStore{inner: inner, check: check}
}

type checkedStore struct {
	inner Store
	check HolderCheck
}

// Fence implements Store.
func (s *checkedStore) Fence(ctx context.Context, resource string, tok Token, write func(ctx context.Context) error) error {
	return s.inner.Fence(ctx, resource, tok, func(ctx context.Context) error {
		live, current, err := s.check(ctx, tok)
		if err != nil {
			return fmt.Errorf("asking the lock service about %s: %w", tok, err)
		}
		if !live {
			if current > int64(tok.Value) {
				return &StaleError{Resource: resource, Token: tok, Current: uint64(current)}
			}
			return &StaleError{Resource: resource, Token: tok, Current: uint64(max(current, 0)), Lapsed: true}
		}
		return write(ctx)
	})
}
