package bench

import (
	"context"
	"sync"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// MutexTarget is the baseline: one map behind one mutex, deciding with the
// same lease rules as kahuna (lease.Decide). No actors, no Raft, no network:
// what a lock op costs on this machine when nothing else is in the way.
func MutexTarget() Target {
	return Target{
		Name:      "mutex",
		About:     "baseline: a mutex-guarded map deciding with kahuna's lease rules (the machine's limit)",
		InProcess: true,
		Open: func(context.Context, Settings) (System, error) {
			return Shared{L: NewMutexLocker()}, nil
		},
	}
}

// MutexLocker is a lease.Locker over a mutex-guarded map. Durability is
// accepted and ignored: everything is in memory.
type MutexLocker struct {
	mu      sync.Mutex
	entries map[string]*mutexEntry
}

// mutexEntry keeps the owner's bytes in a buffer of its own, reused across
// grants, so a steady lock/unlock loop does not allocate.
type mutexEntry struct {
	lease.Entry
	ownerBuf []byte
}

var _ lease.Locker = (*MutexLocker)(nil)

// NewMutexLocker returns an empty MutexLocker.
func NewMutexLocker() *MutexLocker { return &MutexLocker{entries: map[string]*mutexEntry{}} }

func (m *MutexLocker) apply(op lease.Op, resource string, owner []byte, ttl time.Duration, d lease.Durability) (lease.Decision, *mutexEntry) {
	if !lease.Valid(op, resource, owner, ttl, d) {
		return lease.Decision{Status: lease.InvalidInput}, nil
	}
	now := time.Now()
	e := m.entries[resource]
	if e == nil {
		if op != lease.TryLock { // only a grant creates an entry
			return lease.Decide(lease.Entry{}, op, owner, ttl, now), nil
		}
		e = &mutexEntry{}
		m.entries[resource] = e
	}
	dec := lease.Decide(e.Entry, op, owner, ttl, now)
	if dec.Write {
		if op == lease.TryLock { // Decide's Next aliases the caller's owner
			e.ownerBuf = append(e.ownerBuf[:0], owner...)
			dec.Next.Owner = e.ownerBuf
		}
		e.Entry = dec.Next
	}
	return dec, e
}

// TryLock implements lease.Locker.
func (m *MutexLocker) TryLock(_ context.Context, resource string, owner []byte, ttl time.Duration, d lease.Durability) (lease.Result, error) {
	m.mu.Lock()
	dec, _ := m.apply(lease.TryLock, resource, owner, ttl, d)
	m.mu.Unlock()
	return lease.Result{Status: dec.Status, FencingToken: dec.Token}, nil
}

// Extend implements lease.Locker.
func (m *MutexLocker) Extend(_ context.Context, resource string, owner []byte, ttl time.Duration, d lease.Durability) (lease.Result, error) {
	m.mu.Lock()
	dec, _ := m.apply(lease.Extend, resource, owner, ttl, d)
	m.mu.Unlock()
	return lease.Result{Status: dec.Status, FencingToken: dec.Token}, nil
}

// Unlock implements lease.Locker.
func (m *MutexLocker) Unlock(_ context.Context, resource string, owner []byte, d lease.Durability) (lease.Result, error) {
	m.mu.Lock()
	dec, _ := m.apply(lease.Unlock, resource, owner, 0, d)
	m.mu.Unlock()
	return lease.Result{Status: dec.Status}, nil
}

// Get implements lease.Locker.
func (m *MutexLocker) Get(_ context.Context, resource string, d lease.Durability) (lease.LockInfo, lease.Result, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	dec, e := m.apply(lease.Get, resource, nil, 0, d)
	if dec.Status != lease.Got {
		return lease.LockInfo{}, lease.Result{Status: dec.Status}, nil
	}
	info := lease.LockInfo{
		Owner:        append([]byte(nil), e.Owner...),
		Expires:      time.UnixMilli(e.Expires.UnixMilli()),
		FencingToken: e.Token,
	}
	return info, lease.Result{Status: lease.Got, FencingToken: dec.Token}, nil
}
