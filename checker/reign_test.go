package checker

import (
	"slices"
	"testing"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// on marks the last operation as answered by node on its own Locker.
func (b *hb) on(node uint64) *hb {
	b.h[len(b.h)-1].Node, b.h[len(b.h)-1].Local = node, true
	return b
}

// refused marks the last operation as a call that failed with err,
// certainly not applied: no answer came (its Status is the zero value).
func (b *hb) refused(err string) *hb {
	o := &b.h[len(b.h)-1]
	o.Outcome, o.Status, o.Token, o.Err = Fail, 0, 0, err
	return b
}

// reign adds a Reign event.
func (b *hb) reign(node, term uint64, from, to time.Duration) *hb {
	b.h = append(b.h, Op{ID: len(b.h), Kind: Reign, Resource: "r", Node: node, Token: int64(term), Call: from, Return: to, Outcome: OK})
	return b
}

// grace marks the last operation, a reign, as one whose leader waited out
// the earlier ephemeral leases (Op.Grace).
func (b *hb) grace() *hb {
	b.h[len(b.h)-1].Grace = true
	return b
}

// ephemeral marks every operation and reign as ephemeral.
func (b *hb) ephemeral() History {
	for i := range b.h {
		b.h[i].Ephemeral = true
	}
	return b.h
}

type reignCase struct {
	lin, excl, fence, stale bool // the checkers that must flag it
	h                       func() History
	staleKinds              []string // if set, the stale-leader kinds expected
}

var reignCases = map[string]reignCase{
	// Legal.
	"ephemeral-tokens-rise-across-reign": {h: func() History {
		// The new leader's tokens start above the old one's window.
		b := &hb{}
		b.reign(1, 2, 0, 1*ms).
			acq(0, "a", time.Minute, 10*ms, 11*ms, lease.Locked, 0).on(1).
			rel(0, "a", 12*ms, 13*ms, lease.Unlocked).on(1).
			acq(0, "a2", time.Minute, 14*ms, 15*ms, lease.Locked, 1).on(1).
			reign(2, 3, 20*ms, 22*ms).
			acq(1, "b", time.Minute, 30*ms, 31*ms, lease.Locked, 1026).on(2).
			rel(1, "b", 32*ms, 33*ms, lease.Unlocked).on(2).
			acq(1, "b2", time.Minute, 34*ms, 35*ms, lease.Locked, 1027).on(2)
		return b.ephemeral()
	}},
	"ephemeral-hold-lost-with-reign": {h: func() History {
		b := &hb{}
		b.reign(1, 2, 0, 1*ms).
			acq(0, "a", time.Minute, 10*ms, 11*ms, lease.Locked, 0).on(1).
			reign(2, 3, 20*ms, 22*ms).
			get(2, 25*ms, 26*ms, lease.LockDoesNotExist, "", 0).on(2).
			acq(1, "b", time.Minute, 30*ms, 31*ms, lease.Locked, 1025).on(2).
			ext(0, "a", time.Minute, 40*ms, 41*ms, lease.InvalidOwner, 0).on(2).
			rel(0, "a", 42*ms, 43*ms, lease.InvalidOwner).on(2)
		return b.ephemeral()
	}},
	"ephemeral-grant-may-straddle-reign": {h: func() History {
		// b's grant may have been given by the new leader or the old one
		// (then lost).
		b := &hb{}
		b.reign(1, 2, 0, 1*ms).
			acq(0, "a", time.Minute, 10*ms, 11*ms, lease.Locked, 0).
			rel(0, "a", 12*ms, 13*ms, lease.Unlocked).
			acq(1, "b", time.Minute, 15*ms, 25*ms, lease.Locked, 1).
			reign(2, 3, 20*ms, 22*ms).
			acq(2, "c", time.Minute, 30*ms, 31*ms, lease.Locked, 1025)
		return b.ephemeral()
	}},
	"old-leader-answered-before-the-new-reign": {h: func() History {
		b := &hb{}
		b.reign(1, 2, 0, 1*ms).
			acq(0, "a", time.Minute, 10*ms, 11*ms, lease.Locked, 0).on(1).
			acq(0, "a", time.Minute, 15*ms, 30*ms, lease.Locked, 0).on(1). // called before the new reign began
			reign(2, 3, 20*ms, 22*ms).
			get(1, 40*ms, 41*ms, lease.LockDoesNotExist, "", 0).on(2)
		return b.ephemeral()
	}},
	"persistent-lock-outlives-reign": {h: func() History {
		b := &hb{}
		b.reign(1, 2, 0, 1*ms).
			acq(0, "a", time.Minute, 10*ms, 11*ms, lease.Locked, 0).on(1).
			reign(2, 3, 20*ms, 22*ms).
			acq(1, "b", time.Minute, 30*ms, 31*ms, lease.Busy, 0).on(2).
			acq(0, "a", time.Minute, 32*ms, 33*ms, lease.Locked, 0).on(2)
		return b.h
	}},
	"node-leads-again-later": {h: func() History {
		b := &hb{}
		b.reign(1, 2, 0, 1*ms).reign(2, 3, 20*ms, 22*ms).reign(1, 5, 40*ms, 42*ms).
			acq(0, "a", time.Minute, 50*ms, 51*ms, lease.Locked, 0).on(1)
		return b.h
	}},
	"unknown-term-reign-not-judged": {h: func() History {
		b := &hb{}
		b.reign(1, 2, 0, 1*ms).reign(2, 3, 20*ms, 22*ms).reign(1, 0, 40*ms, 42*ms).
			acq(0, "a", time.Minute, 50*ms, 51*ms, lease.Locked, 0).on(1)
		return b.h
	}},

	"ephemeral-grace-reign-after-lapse": {h: func() History {
		// a's lease (1 s) lapsed before the new leader began: it is gone.
		b := &hb{}
		b.reign(1, 2, 0, 1*ms).
			acq(0, "a", time.Second, 10*ms, 11*ms, lease.Locked, 0).on(1).
			reign(2, 3, 1500*ms, 1501*ms).grace().
			rel(1, "b", 1600*ms, 1601*ms, lease.LockDoesNotExist).on(2).
			acq(1, "b", time.Minute, 1602*ms, 1603*ms, lease.Locked, 1025).on(2)
		return b.ephemeral()
	}},

	// Illegal.
	"ephemeral-grace-reign-while-live": {lin: true, excl: true, h: func() History {
		// a's lease (1 min) was live when the new leader began, which
		// promised to have waited it out; b is granted under it.
		b := &hb{}
		b.reign(1, 2, 0, 1*ms).
			acq(0, "a", time.Minute, 10*ms, 11*ms, lease.Locked, 0).on(1).
			reign(2, 3, 20*ms, 22*ms).grace().
			acq(1, "b", time.Minute, 30*ms, 31*ms, lease.Locked, 1025).on(2)
		return b.ephemeral()
	}},
	"ephemeral-tokens-back-across-reign": {lin: true, fence: true, h: func() History {
		b := &hb{}
		b.reign(1, 2, 0, 1*ms).
			acq(0, "a", time.Minute, 10*ms, 11*ms, lease.Locked, 0).on(1).
			rel(0, "a", 12*ms, 13*ms, lease.Unlocked).on(1).
			acq(0, "a2", time.Minute, 14*ms, 15*ms, lease.Locked, 1).on(1).
			reign(2, 3, 20*ms, 22*ms).
			acq(1, "b", time.Minute, 30*ms, 31*ms, lease.Locked, 0).on(2)
		return b.ephemeral()
	}},
	"ephemeral-two-holders-in-one-reign": {lin: true, excl: true, fence: true, h: func() History {
		b := &hb{}
		b.reign(1, 2, 0, 1*ms).
			acq(0, "a", time.Minute, 10*ms, 11*ms, lease.Locked, 0).on(1).
			acq(1, "b", time.Minute, 20*ms, 21*ms, lease.Locked, 0).on(1)
		return b.ephemeral()
	}},
	"ephemeral-tokens-restart-without-reign": {lin: true, fence: true, h: func() History {
		b := &hb{}
		b.reign(1, 2, 0, 1*ms).
			acq(0, "a", time.Minute, 10*ms, 11*ms, lease.Locked, 0).on(1).
			rel(0, "a", 12*ms, 13*ms, lease.Unlocked).on(1).
			acq(1, "b", time.Minute, 20*ms, 21*ms, lease.Locked, 0)
		return b.ephemeral()
	}},
	"answer-from-a-node-that-never-led": {stale: true, h: func() History {
		b := &hb{}
		b.reign(1, 2, 0, 1*ms).
			get(0, 10*ms, 11*ms, lease.LockDoesNotExist, "", 0).on(3)
		return b.h
	}},
	"ephemeral-stale-relock-by-the-old-leader": {lin: true, excl: true, fence: true, stale: true, h: func() History {
		// The bug: a re-locks on the old leader after b locked on the new
		// one, and the old leader answers from its memory.
		b := &hb{}
		b.reign(1, 2, 0, 1*ms).
			acq(0, "a", time.Minute, 10*ms, 11*ms, lease.Locked, 0).on(1).
			reign(2, 3, 20*ms, 22*ms).
			acq(1, "b", time.Minute, 30*ms, 31*ms, lease.Locked, 0).on(2).
			acq(0, "a", time.Minute, 40*ms, 2000*ms, lease.Locked, 0).on(1)
		return b.ephemeral()
	}},
	"ephemeral-old-leader-keeps-granting": {lin: true, excl: true, fence: true, stale: true, h: func() History {
		b := &hb{}
		b.reign(1, 2, 0, 1*ms).
			acq(0, "a", time.Minute, 10*ms, 11*ms, lease.Locked, 0).on(1).
			rel(0, "a", 12*ms, 13*ms, lease.Unlocked).on(1).
			reign(2, 3, 20*ms, 22*ms).
			acq(1, "b", time.Minute, 30*ms, 31*ms, lease.Locked, 1025).on(2).
			acq(2, "c", time.Minute, 40*ms, 41*ms, lease.Locked, 1).on(1)
		return b.ephemeral()
	}},
	"persistent-stale-write-committed": {lin: true, excl: true, fence: true, stale: true, staleKinds: []string{"write-from-deposed-leader"}, h: func() History {
		// Issue scenario 2, as the client sees it: the old leader grants c
		// the token the new one gave b, and its record commits.
		b := &hb{}
		b.reign(1, 2, 0, 1*ms).
			reign(2, 3, 20*ms, 22*ms).
			acq(1, "b", time.Minute, 30*ms, 31*ms, lease.Locked, 0).on(2).
			acq(2, "c", time.Minute, 40*ms, 60*ms, lease.Locked, 0).on(1)
		return b.h
	}},
	"persistent-stale-busy-from-the-old-leader": {stale: true, staleKinds: []string{"answer-from-deposed-leader"}, h: func() History {
		// Consistent with the state, but given by a deposed leader.
		b := &hb{}
		b.reign(1, 2, 0, 1*ms).
			reign(2, 3, 20*ms, 22*ms).
			acq(1, "b", time.Minute, 30*ms, 31*ms, lease.Locked, 0).on(2).
			acq(2, "c", time.Minute, 40*ms, 41*ms, lease.Busy, 0).on(1)
		return b.h
	}},
	"persistent-stale-relock-from-the-old-leader": {lin: true, excl: true, fence: true, stale: true, staleKinds: []string{"answer-from-deposed-leader"}, h: func() History {
		// Issue scenario 1: a unlocks and b locks through the new leader;
		// a's TryLock on the old one is answered Locked, token 0.
		b := &hb{}
		b.reign(1, 2, 0, 1*ms).
			acq(0, "a", time.Minute, 10*ms, 11*ms, lease.Locked, 0).on(1).
			reign(2, 3, 20*ms, 22*ms).
			rel(0, "a", 30*ms, 31*ms, lease.Unlocked).on(2).
			acq(1, "b", time.Minute, 32*ms, 33*ms, lease.Locked, 1).on(2).
			acq(0, "a", time.Minute, 40*ms, 41*ms, lease.Locked, 0).on(1)
		return b.h
	}},
	"ephemeral-call-refused-by-a-deposed-node": {h: func() History {
		// A call to a node that is shutting down, after a later reign
		// began, fails with "not applied": no answer, nothing to flag
		// (its Status is the zero value, Locked, which is no answer).
		b := &hb{}
		b.reign(1, 2, 0, 1*ms).
			reign(2, 3, 20*ms, 22*ms).
			acq(0, "a", time.Minute, 30*ms, 31*ms, lease.Locked, 0).on(1).refused("kahuna: node closed (lease: request not applied)")
		return b.ephemeral()
	}},
	"persistent-tokens-restart-across-reign": {lin: true, fence: true, h: func() History {
		b := &hb{}
		b.reign(1, 2, 0, 1*ms).
			acq(0, "a", time.Minute, 10*ms, 11*ms, lease.Locked, 0).on(1).
			rel(0, "a", 12*ms, 13*ms, lease.Unlocked).on(1).
			reign(2, 3, 20*ms, 22*ms).
			acq(1, "b", time.Minute, 30*ms, 31*ms, lease.Locked, 0).on(2)
		return b.h
	}},
}

func TestReigns(t *testing.T) {
	for name, c := range reignCases {
		t.Run(name, func(t *testing.T) {
			h := c.h()
			r := Check(h, opts)
			if got := r.Linearizable.Result != Linearizable; got != c.lin {
				t.Errorf("linearizability flagged=%v, want %v (%s)", got, c.lin, r.Linearizable.Result)
			}
			if got := len(r.Exclusion) > 0; got != c.excl {
				t.Errorf("exclusion flagged=%v, want %v: %v", got, c.excl, r.Exclusion)
			}
			if got := len(r.Fencing) > 0; got != c.fence {
				t.Errorf("fencing flagged=%v, want %v: %v", got, c.fence, r.Fencing)
			}
			if got := len(r.StaleLeader) > 0; got != c.stale {
				t.Errorf("stale-leader flagged=%v, want %v: %v", got, c.stale, r.StaleLeader)
			}
			if c.staleKinds != nil {
				var kinds []string
				for _, v := range r.StaleLeader {
					kinds = append(kinds, v.Kind)
				}
				if !slices.Equal(kinds, c.staleKinds) {
					t.Errorf("stale-leader kinds %v, want %v", kinds, c.staleKinds)
				}
			}
			if t.Failed() {
				t.Logf("history:\n%s", h)
			}
		})
	}
}

func TestHoldWindowEndsAtReign(t *testing.T) {
	b := &hb{}
	b.acq(0, "a", time.Minute, 10*ms, 11*ms, lease.Locked, 0).
		reign(2, 3, 20*ms, 22*ms).
		acq(1, "b", time.Minute, 21*ms, 23*ms, lease.Locked, 0) // may be granted before the reset: no window
	ws := HoldWindows(b.ephemeral(), opts)
	if len(ws) != 1 || ws[0].Owner != "a" || ws[0].End != 20*ms || ws[0].EndedBy == nil || ws[0].EndedBy.Kind != Reign {
		t.Fatalf("windows %v", ws)
	}
	if s := History(b.h).Stats(); s.Ops != 2 || s.Reigns != 1 {
		t.Fatalf("stats %+v", s)
	}
}
