package fence

import (
	"context"
	"fmt"
	"sync"
)

// Store keeps high-water marks and runs fenced writes under them.
//
// Fence runs write only if tok.Value is at least the mark of (resource,
// tok.Lock, tok.Slot), or there is no mark yet, and then raises the mark to
// tok.Value. The check, write and raise are one atomic step: while write
// runs no other Fence on the same key is checked, so no write with a lower
// token lands after it, and the raise stands only if write returns nil
// (a failed write leaves the mark as it was). When tok is below the mark,
// write does not run and Fence returns a *StaleError with the mark. An
// invalid tok is an error matching ErrInvalid, write not run. Any other
// failure (the store's own, write's, ctx's) is returned wrapped and is never
// a *StaleError.
//
// The ctx passed to write is Fence's ctx, possibly with values a store
// adds (sqlfence puts its transaction there, for write to use).
//
// A store that cannot hold the key across write (one that asks the lock
// service whether the token is current, say) must say in its own comment
// which part of this contract it keeps.
type Store interface {
	Fence(ctx context.Context, resource string, tok Token, write func(ctx context.Context) error) error
}

// MemoryStore is a Store in this process's memory: each key has a lock
// held from the check until write returns, so the check and a write done
// by write (to state of this process) are one step.
//
// Its limits: the marks die with the process, so after a restart a stale
// token is accepted until a current holder writes again; it fences only
// writes that go through this process (several replicas behind a load
// balancer each keep their own marks: use a shared Store such as
// sqlfence's); and marks are never forgotten, one small entry per key ever
// fenced. Writes to one key are serialised, and a write that calls Fence
// on its own key again waits for itself until its ctx ends.
type MemoryStore struct {
	mu    sync.Mutex
	marks map[memKey]*memEntry
}

type memKey struct{ resource, lock, slot string }

type memEntry struct {
	held chan struct{} // holds one value while a Fence runs on the key
	mark uint64        // mark and set: under MemoryStore.mu
	set  bool
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{marks: make(map[memKey]*memEntry)}
}

func (s *MemoryStore) entry(k memKey) *memEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.marks[k]
	if e == nil {
		e = &memEntry{held: make(chan struct{}, 1)}
		s.marks[k] = e
	}
	return e
}

// Fence implements Store.
func (s *MemoryStore) Fence(ctx context.Context, resource string, tok Token, write func(ctx context.Context) error) error {
	if err := tok.Validate(); err != nil {
		return err
	}
	e := s.entry(memKey{resource, tok.Lock, tok.Slot})
	select {
	case e.held <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("fence: waiting for resource %q: %w", resource, context.Cause(ctx))
	}
	defer func() { <-e.held }()
	s.mu.Lock()
	mark, set := e.mark, e.set
	s.mu.Unlock()
	if !Admit(mark, set, tok.Value) {
		return &StaleError{Resource: resource, Token: tok, Current: mark}
	}
	if err := write(ctx); err != nil {
		return fmt.Errorf("fence: write to resource %q: %w", resource, err)
	}
	s.mu.Lock()
	e.mark, e.set = tok.Value, true
	s.mu.Unlock()
	return nil
}

// Mark returns the mark of (resource, lock, slot); ok is false when no
// write has landed there.
func (s *MemoryStore) Mark(resource, lock, slot string) (mark uint64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.marks[memKey{resource, lock, slot}]; e != nil {
		return e.mark, e.set
	}
	return 0, false
}
