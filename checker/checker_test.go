package checker

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/kahunago/kahuna/lease"
)

const ms = time.Millisecond

// hb builds hand-made histories.
type hb struct{ h History }

func (b *hb) add(client int, kind Kind, res, owner string, ttl time.Duration, call, ret time.Duration, out Outcome, st lease.Status, token int64) *hb {
	b.h = append(b.h, Op{ID: len(b.h), Client: client, Kind: kind, Resource: res, Owner: owner, TTL: ttl, Call: call, Return: ret, Outcome: out, Status: st, Token: token})
	return b
}

func (b *hb) acq(c int, owner string, ttl, call, ret time.Duration, st lease.Status, tok int64) *hb {
	return b.add(c, Acquire, "r", owner, ttl, call, ret, Classify(st, nil), st, tok)
}

func (b *hb) acqMaybe(c int, owner string, ttl, call time.Duration) *hb {
	return b.add(c, Acquire, "r", owner, ttl, call, call+ms, Indeterminate, lease.Errored, 0)
}

func (b *hb) ext(c int, owner string, ttl, call, ret time.Duration, st lease.Status, tok int64) *hb {
	return b.add(c, Extend, "r", owner, ttl, call, ret, Classify(st, nil), st, tok)
}

func (b *hb) rel(c int, owner string, call, ret time.Duration, st lease.Status) *hb {
	return b.add(c, Release, "r", owner, 0, call, ret, Classify(st, nil), st, 0)
}

func (b *hb) relMaybe(c int, owner string, call time.Duration) *hb {
	return b.add(c, Release, "r", owner, 0, call, call+ms, Indeterminate, lease.MustRetry, 0)
}

func (b *hb) get(c int, call, ret time.Duration, st lease.Status, holder string, tok int64) *hb {
	b.add(c, Get, "r", "", 0, call, ret, Classify(st, nil), st, tok)
	b.h[len(b.h)-1].Holder = holder
	return b
}

var opts = Options{Margin: 5 * ms, Timeout: 10 * time.Second}

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		st   lease.Status
		err  error
		want Outcome
	}{
		{lease.Locked, nil, OK}, {lease.Extended, nil, OK}, {lease.Unlocked, nil, OK}, {lease.Got, nil, OK},
		{lease.Busy, nil, Fail}, {lease.InvalidOwner, nil, Fail}, {lease.LockDoesNotExist, nil, Fail}, {lease.InvalidInput, nil, Fail},
		{lease.Errored, nil, Indeterminate}, {lease.MustRetry, nil, Indeterminate}, {lease.WaitingForReplication, nil, Indeterminate},
		{lease.Aborted, nil, Indeterminate}, {lease.Locked, errors.New("deadline"), Indeterminate},
		{lease.Locked, fmt.Errorf("never sent: %w", lease.ErrNotApplied), Fail},
	} {
		if got := Classify(c.st, c.err); got != c.want {
			t.Errorf("Classify(%v, %v) = %v, want %v", c.st, c.err, got, c.want)
		}
	}
}

func TestRecorder(t *testing.T) {
	r := NewRecorder()
	p := r.Begin(Op{Client: 1, Kind: Acquire, Resource: "r", Owner: "a", TTL: time.Second})
	time.Sleep(ms)
	op := p.End(lease.Locked, 7, nil)
	if op.ID != 0 || op.Outcome != OK || op.Token != 7 || op.Return <= op.Call {
		t.Fatalf("recorded %+v", op)
	}
	g := r.Begin(Op{Client: 2, Kind: Get, Resource: "r"}).EndGet(lease.Got, 7, "a", nil)
	if g.ID != 1 || g.Holder != "a" {
		t.Fatalf("recorded %+v", g)
	}
	e := r.Begin(Op{Kind: Release, Resource: "r", Owner: "a"}).End(0, 0, errors.New("boom"))
	if e.Outcome != Indeterminate || e.Err != "boom" {
		t.Fatalf("recorded %+v", e)
	}
	if h := r.History(); len(h) != 3 || !strings.Contains(h.String(), "boom") {
		t.Fatalf("history %v", h)
	}
	if s := r.History().Stats(); s != (Stats{Ops: 3, OK: 2, Indeterminate: 1}) {
		t.Fatalf("stats %+v", s)
	}
}

// legal are histories every checker must accept.
var legal = map[string]func() History{
	"sequential": func() History {
		b := &hb{}
		b.acq(0, "a", time.Minute, 0, 1*ms, lease.Locked, 0).
			ext(0, "a", time.Minute, 2*ms, 3*ms, lease.Extended, 0).
			get(1, 4*ms, 5*ms, lease.Got, "a", 0).
			rel(0, "a", 6*ms, 7*ms, lease.Unlocked).
			acq(1, "b", time.Minute, 8*ms, 9*ms, lease.Locked, 1).
			rel(1, "b", 10*ms, 11*ms, lease.Unlocked).
			get(0, 12*ms, 13*ms, lease.LockDoesNotExist, "", 0).
			rel(0, "a", 14*ms, 15*ms, lease.LockDoesNotExist)
		return b.h
	},
	"concurrent-acquires": func() History {
		b := &hb{}
		b.acq(0, "a", time.Minute, 0, 10*ms, lease.Locked, 0).
			acq(1, "b", time.Minute, 1*ms, 9*ms, lease.Busy, 0).
			acq(2, "c", time.Minute, 2*ms, 8*ms, lease.Busy, 0).
			rel(2, "c", 11*ms, 12*ms, lease.InvalidOwner).
			ext(1, "b", time.Minute, 11*ms, 12*ms, lease.InvalidOwner, 0)
		return b.h
	},
	"maybe-acquire-took-effect": func() History {
		b := &hb{}
		b.acqMaybe(0, "a", time.Minute, 0).
			acq(1, "b", time.Minute, 10*ms, 11*ms, lease.Busy, 0).
			rel(0, "a", 20*ms, 21*ms, lease.Unlocked).
			acq(1, "b", time.Minute, 30*ms, 31*ms, lease.Locked, 1)
		return b.h
	},
	"maybe-acquire-never-happened": func() History {
		b := &hb{}
		b.acqMaybe(0, "a", time.Minute, 0).
			acq(1, "b", time.Minute, 10*ms, 11*ms, lease.Locked, 0)
		return b.h
	},
	"maybe-acquire-applied-late": func() History {
		// The acquire's answer was lost; its release found nothing; the
		// acquire then took effect: b is busy.
		b := &hb{}
		b.acqMaybe(0, "a", time.Minute, 0).
			rel(0, "a", 10*ms, 11*ms, lease.LockDoesNotExist).
			acq(1, "b", time.Minute, 20*ms, 21*ms, lease.Busy, 0)
		return b.h
	},
	"maybe-release": func() History {
		b := &hb{}
		b.acq(0, "a", time.Minute, 0, 1*ms, lease.Locked, 0).
			relMaybe(0, "a", 2*ms).
			acq(1, "b", time.Minute, 10*ms, 11*ms, lease.Locked, 1)
		return b.h
	},
	"lease-lapsed": func() History {
		b := &hb{}
		b.acq(0, "a", 100*ms, 0, 1*ms, lease.Locked, 0).
			acq(1, "b", time.Minute, 200*ms, 201*ms, lease.Locked, 1).
			ext(0, "a", time.Minute, 210*ms, 211*ms, lease.InvalidOwner, 0).
			rel(0, "a", 220*ms, 221*ms, lease.InvalidOwner)
		return b.h
	},
	"lapsed-then-released-by-owner": func() History {
		b := &hb{}
		b.acq(0, "a", 100*ms, 0, 1*ms, lease.Locked, 0).
			ext(0, "a", time.Minute, 200*ms, 201*ms, lease.LockDoesNotExist, 0).
			get(1, 202*ms, 203*ms, lease.LockDoesNotExist, "", 0).
			rel(0, "a", 210*ms, 211*ms, lease.Unlocked).
			acq(1, "b", time.Minute, 220*ms, 221*ms, lease.Locked, 1)
		return b.h
	},
	"same-owner-reacquire": func() History {
		b := &hb{}
		b.acq(0, "a", time.Minute, 0, 1*ms, lease.Locked, 0).
			acq(0, "a", time.Minute, 2*ms, 3*ms, lease.Locked, 0).
			rel(0, "a", 4*ms, 5*ms, lease.Unlocked)
		return b.h
	},
	"reacquire-does-not-refresh": func() History {
		// a's first acquire was indeterminate but granted at ~0; the
		// definite re-acquire at 800ms did not refresh the lease, which
		// lapsed at ~1s: b's grant at 1.2s does not overlap a's hold.
		b := &hb{}
		b.acqMaybe(0, "a", time.Second, 0).
			acq(0, "a", time.Second, 800*ms, 801*ms, lease.Locked, 0).
			acq(1, "b", time.Second, 1200*ms, 1201*ms, lease.Locked, 1).
			rel(0, "a", 1500*ms, 1501*ms, lease.InvalidOwner)
		return b.h
	},
	"extend-chain": func() History {
		b := &hb{}
		b.acq(0, "a", 100*ms, 0, 1*ms, lease.Locked, 0).
			ext(0, "a", 100*ms, 80*ms, 81*ms, lease.Extended, 0).
			ext(0, "a", 100*ms, 160*ms, 161*ms, lease.Extended, 0).
			acq(1, "b", time.Minute, 200*ms, 201*ms, lease.Busy, 0).
			acq(1, "b", time.Minute, 300*ms, 301*ms, lease.Locked, 1)
		return b.h
	},
	"zombie-grant-after-own-release": func() History {
		// a's first acquire got no answer; a retried, held and released; the
		// first request then took effect late, after b's lease lapsed (seen
		// in the fault tests: a request queued behind a write in flight).
		b := &hb{}
		b.acqMaybe(0, "a", time.Second, 0).
			acq(0, "a", time.Second, 10*ms, 11*ms, lease.Locked, 0).
			rel(0, "a", 12*ms, 13*ms, lease.Unlocked).
			acq(1, "b", 100*ms, 20*ms, 21*ms, lease.Locked, 1).
			get(2, 300*ms, 301*ms, lease.Got, "a", 2).
			acq(2, "c", time.Second, 302*ms, 303*ms, lease.Busy, 0)
		return b.h
	},
	"grant-decided-early-seen-late": func() History {
		// a's grant was decided (its lease started) at once, and seen only
		// after b's request had been registered: it may lapse 100ms after
		// a's call, not after b's.
		b := &hb{}
		b.acqMaybe(0, "a", 100*ms, 0).acqMaybe(1, "b", time.Second, 50*ms).
			get(2, 60*ms, 61*ms, lease.Got, "a", 0).
			acq(2, "c", time.Second, 120*ms, 121*ms, lease.Locked, 1)
		return b.h
	},
	"zombie-chain": func() History {
		// Three lost acquires of owners never heard of again took the lock
		// in turn, each lease lapsing: w gets the fourth token.
		b := &hb{}
		b.acqMaybe(0, "x", 10*ms, 0).acqMaybe(1, "y", 10*ms, 1*ms).acqMaybe(2, "z", 10*ms, 2*ms).
			acq(3, "w", time.Second, 5*ms, 6*ms, lease.Busy, 0).
			acq(3, "w", time.Second, 100*ms, 101*ms, lease.Locked, 3)
		return b.h
	},
	"concurrent-grants-any-order": func() History {
		// b's grant overlaps a's release: not ordered in real time.
		b := &hb{}
		b.acq(0, "a", time.Minute, 0, 1*ms, lease.Locked, 0).
			rel(0, "a", 10*ms, 20*ms, lease.Unlocked).
			acq(1, "b", time.Minute, 5*ms, 25*ms, lease.Locked, 1)
		return b.h
	},
}

// illegal are negative controls: each names the checkers that must
// reject it.
var illegal = map[string]struct {
	lin, excl, fence bool
	h                func() History
}{
	"double-grant": {true, true, true, func() History {
		b := &hb{}
		b.acq(0, "a", time.Minute, 0, 1*ms, lease.Locked, 0).
			acq(1, "b", time.Minute, 10*ms, 11*ms, lease.Locked, 0).
			rel(0, "a", 20*ms, 21*ms, lease.Unlocked)
		return b.h
	}},
	"double-grant-new-token": {true, true, false, func() History {
		b := &hb{}
		b.acq(0, "a", time.Minute, 0, 1*ms, lease.Locked, 0).
			acq(1, "b", time.Minute, 10*ms, 11*ms, lease.Locked, 1).
			rel(0, "a", 20*ms, 21*ms, lease.Unlocked)
		return b.h
	}},
	"early-expiry": {true, true, false, func() History {
		b := &hb{}
		b.acq(0, "a", time.Second, 0, 1*ms, lease.Locked, 0).
			acq(1, "b", time.Second, 500*ms, 501*ms, lease.Locked, 1)
		return b.h
	}},
	"extended-lease-ignored": {true, true, false, func() History {
		b := &hb{}
		b.acq(0, "a", 100*ms, 0, 1*ms, lease.Locked, 0).
			ext(0, "a", 100*ms, 80*ms, 81*ms, lease.Extended, 0).
			acq(1, "b", time.Minute, 150*ms, 151*ms, lease.Locked, 1).
			rel(0, "a", 170*ms, 171*ms, lease.InvalidOwner)
		return b.h
	}},
	"token-went-backwards": {true, false, true, func() History {
		// An ephemeral leader change: tokens restart at 0.
		b := &hb{}
		b.acq(0, "a", time.Minute, 0, 1*ms, lease.Locked, 0).
			rel(0, "a", 2*ms, 3*ms, lease.Unlocked).
			acq(0, "a2", time.Minute, 4*ms, 5*ms, lease.Locked, 1).
			rel(0, "a2", 6*ms, 7*ms, lease.Unlocked).
			acq(1, "b", time.Minute, 10*ms, 11*ms, lease.Locked, 0)
		return b.h
	}},
	"token-reused-concurrently": {true, false, true, func() History {
		b := &hb{}
		b.acq(0, "a", time.Minute, 0, 1*ms, lease.Locked, 0).
			rel(0, "a", 2*ms, 3*ms, lease.Unlocked).
			acq(1, "b", time.Minute, 10*ms, 30*ms, lease.Locked, 1).
			rel(1, "b", 31*ms, 32*ms, lease.Unlocked).
			acq(2, "c", time.Minute, 12*ms, 40*ms, lease.Locked, 1)
		return b.h
	}},
	"busy-when-free": {true, false, false, func() History {
		b := &hb{}
		b.acq(0, "a", time.Minute, 0, 1*ms, lease.Busy, 0)
		return b.h
	}},
	"stale-get": {true, false, false, func() History {
		b := &hb{}
		b.acq(0, "a", time.Minute, 0, 1*ms, lease.Locked, 0).
			rel(0, "a", 2*ms, 3*ms, lease.Unlocked).
			get(1, 4*ms, 5*ms, lease.Got, "a", 0)
		return b.h
	}},
	"lost-grant": {true, false, false, func() History {
		b := &hb{}
		b.acq(0, "a", time.Minute, 0, 1*ms, lease.Locked, 0).
			get(1, 4*ms, 5*ms, lease.LockDoesNotExist, "", 0)
		return b.h
	}},
	"extend-after-release": {true, false, false, func() History {
		b := &hb{}
		b.acq(0, "a", time.Minute, 0, 1*ms, lease.Locked, 0).
			rel(0, "a", 2*ms, 3*ms, lease.Unlocked).
			ext(0, "a", time.Minute, 4*ms, 5*ms, lease.Extended, 0)
		return b.h
	}},
	"zombie-applied-twice": {true, false, false, func() History {
		// One lost acquire cannot grant twice.
		b := &hb{}
		b.acqMaybe(0, "a", time.Minute, 0).
			get(1, 10*ms, 11*ms, lease.Got, "a", 0).
			rel(1, "a", 12*ms, 13*ms, lease.Unlocked).
			get(1, 20*ms, 21*ms, lease.Got, "a", 1)
		return b.h
	}},
	"effect-before-call": {true, false, false, func() History {
		b := &hb{}
		b.get(1, 0, 1*ms, lease.Got, "a", 0).
			acqMaybe(0, "a", time.Minute, 5*ms)
		return b.h
	}},
	"zombie-chain-token-skipped": {true, false, false, func() History {
		b := &hb{}
		b.acqMaybe(0, "x", 10*ms, 0).acqMaybe(1, "y", 10*ms, 1*ms).acqMaybe(2, "z", 10*ms, 2*ms).
			acq(3, "w", time.Second, 5*ms, 6*ms, lease.Busy, 0).
			acq(3, "w", time.Second, 100*ms, 101*ms, lease.Locked, 4)
		return b.h
	}},
	"zombie-lease-too-short": {true, false, false, func() History {
		// A lost acquire applied after its call holds its lease a TTL, ≥ 1s.
		b := &hb{}
		b.acqMaybe(0, "x", time.Second, 0).
			acq(1, "w", time.Second, 50*ms, 51*ms, lease.Busy, 0).
			acq(1, "w", time.Second, 500*ms, 501*ms, lease.Locked, 1)
		return b.h
	}},
	"late-extend-overwritten": {true, true, false, func() History {
		// A late Extend overwritten: a's Extend is decided by the old leader,
		// queued, and committed through the new one, whose stale cache
		// lets a's first lease lapse and grants b; a is told Extended
		// after b is told Locked.
		b := &hb{}
		b.acq(0, "a", 100*ms, 0, 1*ms, lease.Locked, 0).
			ext(0, "a", time.Minute, 50*ms, 300*ms, lease.Extended, 0).
			acq(1, "b", time.Minute, 150*ms, 151*ms, lease.Locked, 1).
			rel(0, "a", 310*ms, 311*ms, lease.InvalidOwner)
		return b.h
	}},
	"late-release-stale-cache": {true, false, false, func() History {
		// The same with a's Unlock: acknowledged late, while the new
		// leader's stale cache still says a holds.
		b := &hb{}
		b.acq(0, "a", time.Second, 0, 1*ms, lease.Locked, 0).
			rel(0, "a", 50*ms, 300*ms, lease.Unlocked).
			get(1, 310*ms, 311*ms, lease.Got, "a", 0).
			acq(1, "b", time.Minute, 320*ms, 321*ms, lease.Busy, 0)
		return b.h
	}},
	"token-skipped": {true, false, false, func() History {
		b := &hb{}
		b.acq(0, "a", time.Minute, 0, 1*ms, lease.Locked, 0).
			rel(0, "a", 2*ms, 3*ms, lease.Unlocked).
			acq(1, "b", time.Minute, 4*ms, 5*ms, lease.Locked, 2)
		return b.h
	}},
}

func TestLegalHistories(t *testing.T) {
	for name, h := range legal {
		t.Run(name, func(t *testing.T) {
			r := Check(h(), opts)
			if err := r.Err(); err != nil {
				t.Fatalf("legal history rejected:\n%v\n%s", err, History(h()))
			}
		})
	}
}

// TestNegativeControls: every checker flags the illegal histories it is
// meant to see.
func TestNegativeControls(t *testing.T) {
	for name, c := range illegal {
		t.Run(name, func(t *testing.T) {
			h := c.h()
			r := Check(h, opts)
			if got := r.Linearizable.Result != Linearizable; got != c.lin {
				t.Errorf("linearizability flagged=%v, want %v (%s)", got, c.lin, r.Linearizable.Result)
			}
			if c.lin && r.Linearizable.Result != NotLinearizable {
				t.Errorf("linearizability: %s, want a definite verdict", r.Linearizable.Result)
			}
			if got := len(r.Exclusion) > 0; got != c.excl {
				t.Errorf("exclusion flagged=%v, want %v: %v", got, c.excl, r.Exclusion)
			}
			if got := len(r.Fencing) > 0; got != c.fence {
				t.Errorf("fencing flagged=%v, want %v: %v", got, c.fence, r.Fencing)
			}
			if t.Failed() {
				t.Logf("history:\n%s", h)
			}
		})
	}
}

func TestFencingKinds(t *testing.T) {
	kinds := func(h History) []string {
		var ks []string
		for _, v := range CheckFencing(h) {
			ks = append(ks, v.Kind)
		}
		return ks
	}
	if got := kinds(illegal["token-went-backwards"].h()); !contains(got, "token-went-backwards") {
		t.Errorf("backwards: %v", got)
	}
	if got := kinds(illegal["double-grant"].h()); !contains(got, "token-reused-by-other-owner") || !contains(got, "token-not-increased") {
		t.Errorf("double grant: %v", got)
	}
	if got := kinds(illegal["token-reused-concurrently"].h()); len(got) != 1 || got[0] != "token-reused-by-other-owner" {
		t.Errorf("reuse: %v", got)
	}
}

func contains(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

func TestHoldWindows(t *testing.T) {
	h := legal["extend-chain"]()
	ws := HoldWindows(h, opts)
	if len(ws) != 2 {
		t.Fatalf("windows %v", ws)
	}
	// a: from its grant's return to the last extend's call + TTL − margin.
	if w := ws[0]; w.Owner != "a" || w.Start != 1*ms || w.End != 160*ms+100*ms-opts.Margin {
		t.Errorf("a's window %v", w)
	}
	if w := ws[1]; w.Owner != "b" || w.Start != 301*ms || w.End != 300*ms+time.Minute-opts.Margin {
		t.Errorf("b's window %v", w)
	}
	// A release call ends the window.
	ws = HoldWindows(legal["sequential"](), opts)
	if len(ws) != 2 || ws[0].End != 6*ms || ws[1].End != 10*ms {
		t.Errorf("sequential windows %v", ws)
	}
	// Indeterminate acquires have none; the re-acquire's ends at the
	// indeterminate grant's call + TTL.
	ws = HoldWindows(legal["reacquire-does-not-refresh"](), opts)
	if len(ws) != 2 || ws[0].Owner != "a" || ws[0].End != time.Second-opts.Margin {
		t.Errorf("re-acquire windows %v", ws)
	}
}

func TestVisualizeOnFailure(t *testing.T) {
	path := t.TempDir() + "/lin.html"
	o := opts
	o.VisualizePath = path
	if r := CheckLinearizable(illegal["double-grant"].h(), o); r.Result != NotLinearizable || len(r.Failed) != 1 || r.Failed[0] != "r" {
		t.Fatalf("%+v", r)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
}

// An owner's Extended of a later grant (another token) says nothing of its
// earlier grant's lease: that window still ends at the earlier TTL, so it
// does not overlap the holder in between.
func TestHoldWindowIgnoresOtherGrantsExtends(t *testing.T) {
	b := &hb{}
	b.acq(0, "o", 100*ms, 0, 1*ms, lease.Locked, 0).
		acq(1, "p", time.Second, 150*ms, 151*ms, lease.Locked, 1).
		acqMaybe(0, "o", time.Second, 1300*ms). // granted token 2, maybe
		ext(0, "o", time.Second, 1400*ms, 1401*ms, lease.Extended, 2)
	ws := HoldWindows(b.h, opts)
	for _, w := range ws {
		if w.Owner == "o" && w.End != 100*ms-opts.Margin {
			t.Errorf("o's first window %v, want it to end at 95ms", w)
		}
	}
	if v := CheckExclusion(b.h, opts); len(v) != 0 {
		t.Errorf("false overlap: %v", v)
	}
}

// A call that failed before it was sent (an error wrapping
// lease.ErrNotApplied) had no effect and says nothing of the lock, whatever
// zero status it carries.
func TestNotSentCallHasNoEffect(t *testing.T) {
	b := &hb{}
	b.acq(0, "a", time.Minute, 0, 1*ms, lease.Locked, 0)
	b.add(0, Release, "r", "a", 0, 2*ms, 3*ms, Fail, lease.Locked, 0)
	b.h[len(b.h)-1].Err = "transport: request not sent"
	b.get(1, 4*ms, 5*ms, lease.Got, "a", 0).
		acq(1, "b", time.Minute, 6*ms, 7*ms, lease.Busy, 0)
	if r := Check(b.h, opts); r.Violations() != 0 {
		t.Fatalf("violations: %v", r.Err())
	}
}

// A linearizability search that times out is neither a finding nor a
// pass: Definite does not count it, Violations and Err do, and Recheck
// decides the resources it left undecided (and only those).
func TestUndecidedIsNeitherCaughtNorClean(t *testing.T) {
	bad := illegal["busy-when-free"].h() // only linearizability sees it
	for i := range bad {
		bad[i].Resource = "s"
	}
	h := append(legal["sequential"](), bad...)
	for i := range h {
		h[i].ID = i
	}

	// Every search times out.
	checkOperations = func(porcupine.Model, []porcupine.Operation, time.Duration) porcupine.CheckResult {
		return porcupine.Unknown
	}
	r := Check(h, opts)
	checkOperations = porcupine.CheckOperationsTimeout
	if l := r.Linearizable; l.Result != Unknown || !slices.Equal(l.Failed, []string{"r", "s"}) || !slices.Equal(l.Undecided, []string{"r", "s"}) {
		t.Fatalf("timed out: %+v", l)
	}
	if r.Definite() != 0 || r.DefiniteErr() != nil || !r.Undecided() {
		t.Errorf("timed out: definite %d (%v), undecided %v: want no definite finding, undecided", r.Definite(), r.DefiniteErr(), r.Undecided())
	}
	if r.Violations() != 1 || r.Err() == nil {
		t.Errorf("timed out: violations %d, err %v: want it counted against a run that must be clean", r.Violations(), r.Err())
	}

	// Searched again, with time: s is not linearizable, r is.
	again := r.Recheck(h, opts)
	if l := again.Linearizable; l.Result != NotLinearizable || !slices.Equal(l.Failed, []string{"s"}) || len(l.Undecided) != 0 {
		t.Fatalf("rechecked: %+v", l)
	}
	if again.Definite() != 1 || again.DefiniteErr() == nil || again.Undecided() {
		t.Errorf("rechecked: definite %d (%v), undecided %v", again.Definite(), again.DefiniteErr(), again.Undecided())
	}

	// Only r timed out, s was found not linearizable: the verdict stays,
	// and the recheck clears r.
	r.Linearizable = LinearizabilityResult{Result: NotLinearizable, Resources: 2, Failed: []string{"r", "s"}, Undecided: []string{"r"}}
	if r.Definite() != 1 || !r.Undecided() {
		t.Errorf("one illegal, one undecided: definite %d, undecided %v", r.Definite(), r.Undecided())
	}
	if l := r.Recheck(h, opts).Linearizable; l.Result != NotLinearizable || !slices.Equal(l.Failed, []string{"s"}) || len(l.Undecided) != 0 {
		t.Errorf("rechecked r alone: %+v", l)
	}

	// A legal history left undecided is clean once rechecked.
	legalOnly := legal["sequential"]()
	u := Report{Linearizable: LinearizabilityResult{Result: Unknown, Resources: 1, Failed: []string{"r"}, Undecided: []string{"r"}}}
	if c := u.Recheck(legalOnly, opts); c.Violations() != 0 || c.Err() != nil || c.Undecided() {
		t.Errorf("legal history rechecked: %+v", c.Linearizable)
	}
	// Nothing undecided: nothing searched again.
	if c := again.Recheck(nil, opts); !slices.Equal(c.Linearizable.Failed, again.Linearizable.Failed) || c.Linearizable.Result != again.Linearizable.Result {
		t.Errorf("recheck of a decided report changed it: %+v", c.Linearizable)
	}
}

// A Hold is the holder's belief: the late short Extend shortened a's lease
// (the server's windows end early, and b's grant is legal), but a's handle
// went on believing until 3 s. Only the exclusion checker reads it: the
// history is linearizable, and the same history with a Hold that ends in
// time passes.
func TestHoldBeliefOverlaps(t *testing.T) {
	history := func(believed time.Duration) History {
		b := &hb{}
		b.acq(0, "a", 2*time.Second, 0, 1*ms, lease.Locked, 0).
			ext(0, "a", 500*ms, 100*ms, 1200*ms, lease.Extended, 0). // sent at 100ms, delivered late
			ext(0, "a", 10*time.Second, 200*ms, 201*ms, lease.Extended, 0).
			acq(1, "b", time.Second, 1800*ms, 1801*ms, lease.Locked, 1)
		b.h = append(b.h, Op{ID: len(b.h), Client: 0, Kind: Hold, Resource: "r", Owner: "a", Token: 0, Call: 1 * ms, Return: believed, Outcome: OK})
		return b.h
	}
	r := Check(history(3*time.Second), opts)
	if r.Linearizable.Result != Linearizable || len(r.Fencing) != 0 || len(r.StaleLeader) != 0 {
		t.Fatalf("a Hold read by other checkers: %v", r.Err())
	}
	if len(r.Exclusion) != 1 || !strings.Contains(r.Exclusion[0].Text, "as its holder believed") {
		t.Fatalf("exclusion: %v, want the belief to overlap b's grant", r.Exclusion)
	}
	if r.Stats.Holds != 1 || r.Stats.Ops != 4 {
		t.Errorf("stats %+v", r.Stats)
	}
	if r := Check(history(600*ms), opts); r.Violations() != 0 {
		t.Fatalf("a belief that ended in time: %v", r.Err())
	}
	// An ephemeral reign (no grace) ends a belief as it ends a lease.
	h := history(3 * time.Second)
	for i := range h {
		h[i].Ephemeral = true
	}
	h = append(h, Op{ID: len(h), Kind: Reign, Resource: "r", Node: 2, Token: 3, Call: 1000 * ms, Return: 1010 * ms, Outcome: OK, Ephemeral: true})
	if v := CheckExclusion(h, opts); len(v) != 0 {
		t.Fatalf("a belief past an ephemeral reign: %v", v)
	}
}

// A grant whose outcome is unknown is decided when it is called, and its
// Raft record may commit much later (its proposal timed out; replication
// resumed with the same leader, which went on serving from the committed
// state meanwhile): the lease it sets ends TTL after the decision. Here a's
// grant commits after its own Unlock found nothing to release, with its
// lease already over, and b is granted the next token.
func TestLateEffectLeaseFromCall(t *testing.T) {
	history := func(bCall time.Duration) History {
		b := &hb{}
		b.acq(0, "c", 2*time.Second, 0, 10*ms, lease.Locked, 0).
			rel(0, "c", 200*ms, 210*ms, lease.Unlocked).
			acqMaybe(1, "a", 2*time.Second, 300*ms).
			rel(1, "a", 1330*ms, 1332*ms, lease.LockDoesNotExist).
			acq(2, "b", 2*time.Second, bCall, bCall+10*ms, lease.Locked, 2)
		return b.h
	}
	if r := CheckLinearizable(history(2400*ms), opts); r.Result != Linearizable {
		t.Errorf("b granted after a's late grant's lease: %s", r.Result)
	}
	// Before a's lease can have ended, wherever its grant took effect.
	if r := CheckLinearizable(history(1000*ms), opts); r.Result != NotLinearizable {
		t.Errorf("b granted within a's lease: %s", r.Result)
	}
	// So too when nothing mentions a any more (its pending grant is
	// anonymous): its call still bounds the lease it may set.
	b := &hb{}
	b.acq(0, "c", 2*time.Second, 3000*ms, 3010*ms, lease.Locked, 0).
		rel(0, "c", 3200*ms, 3210*ms, lease.Unlocked).
		acqMaybe(1, "a", 2*time.Second, 3300*ms).
		get(2, 3900*ms, 3910*ms, lease.LockDoesNotExist, "", 0).
		acq(2, "b", 2*time.Second, 4000*ms, 4010*ms, lease.Locked, 2)
	if r := CheckLinearizable(b.h, opts); r.Result != NotLinearizable {
		t.Errorf("b granted within anonymous a's lease: %s", r.Result)
	}
}
