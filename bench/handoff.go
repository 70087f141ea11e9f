package bench

import (
	"sync"
	"time"
)

// handoffs measures, per key, the time from a release to the next
// successful acquire by another worker: how long a contended lock sits
// free (or how long the service takes to tell the next caller it is free).
//
// A release counts from the moment the holder's Unlock returned (the
// release is committed by then). An acquire that returns before the
// releaser has even heard back from its Unlock is a handoff of 0. An
// acquire after a holder's lease lapsed (its Unlock failed) is no handoff.
//
// With fromCall (the hot-wait workload, see hotwait.go) a release counts
// instead from just before the holder called Unlock: the handoff is then
// the whole path from "I let go" to "the next caller knows it holds" (the
// Unlock's trip to the service, the service's hand-off, the grant's trip
// back), never clamped, and an acquire that returns while the Unlock is
// still in flight is measured, not 0.
type handoffs struct {
	keys     []handoffKey
	fromCall bool
}

type handoffKey struct {
	mu         sync.Mutex
	holder     int // worker holding the key, -1 if none
	releasing  bool
	callAt     time.Time // fromCall: when the holder's Unlock was called
	releasedBy int       // worker whose release is waiting for the next acquire, -1 if none
	releasedAt time.Time
}

func newHandoffs(keys int) *handoffs {
	h := &handoffs{keys: make([]handoffKey, keys)}
	for i := range h.keys {
		h.keys[i].holder, h.keys[i].releasedBy = -1, -1
	}
	return h
}

// acquired notes that worker w got key k at t. It returns the handoff
// latency, and false if this acquire is not a handoff.
func (h *handoffs) acquired(k, w int, t time.Time) (time.Duration, bool) {
	s := &h.keys[k]
	s.mu.Lock()
	defer s.mu.Unlock()
	var d time.Duration
	ok := false
	switch {
	case s.holder == -1 && s.releasedBy >= 0 && s.releasedBy != w:
		d, ok = max(t.Sub(s.releasedAt), 0), true
	case s.holder >= 0 && s.holder != w && s.releasing:
		ok = true // the release took effect before its Unlock returned
		if h.fromCall {
			d = max(t.Sub(s.callAt), 0)
		}
	}
	s.holder, s.releasing, s.releasedBy = w, false, -1
	return d, ok
}

// releasing notes that worker w is about to Unlock key k.
func (h *handoffs) releasing(k, w int) { h.releasingAt(k, w, time.Time{}) }

// releasingAt notes that worker w is about to Unlock key k, at t.
func (h *handoffs) releasingAt(k, w int, t time.Time) {
	s := &h.keys[k]
	s.mu.Lock()
	if s.holder == w {
		s.releasing, s.callAt = true, t
	}
	s.mu.Unlock()
}

// released notes that worker w's Unlock of key k returned at t; ok is
// false if it failed (the lock stays held until its lease lapses).
func (h *handoffs) released(k, w int, t time.Time, ok bool) {
	s := &h.keys[k]
	s.mu.Lock()
	if s.holder == w { // nobody took the key in between
		s.releasing = false
		if ok {
			s.holder, s.releasedBy, s.releasedAt = -1, w, t
			if h.fromCall {
				s.releasedAt = s.callAt
			}
		}
	}
	s.mu.Unlock()
}
