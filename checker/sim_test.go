package checker

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// sim is an in-memory lock service built on lease.Decide, with answers that
// get lost and requests that apply late, and optional bugs. It checks the
// checkers: histories of the correct service must pass, the buggy ones
// must be flagged.
type sim struct {
	mu      sync.Mutex
	entries map[string]lease.Entry
	bug     string // "", "reset-tokens", "ignore-busy", "early-expiry"
	ops     int
	rng     *rand.Rand
	late    sync.WaitGroup
	losses  atomic.Int64 // answers lost so far (simMaxLosses)
}

// simMaxLosses bounds the answers a run loses. A lost answer leaves its
// operation open to the end of the history, and the linearizability
// search tries each one applied at every point after its call, or never:
// a loaded machine stretches a run (runSim goes on until it has its hold
// windows) and with it the lost answers, and 81 of them once kept the
// search of one resource undecided for 2.5 minutes under the race
// detector. A few dozen still leave every run with several.
const simMaxLosses = 24

var errLost = errors.New("answer lost")

// apply decides and applies one operation in a single critical section,
// at one instant read inside it, and returns everything the answer says
// (status, token, and for a Got the holder), so the answer is exactly the
// state the operation saw: nothing else can run between deciding and
// reading what to report.
func (s *sim) apply(kind Kind, res, owner string, ttl time.Duration) (lease.Status, int64, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ops++
	if s.bug == "reset-tokens" && s.ops%40 == 0 {
		clear(s.entries) // an ephemeral leader change
	}
	if s.bug == "early-expiry" {
		ttl /= 3
	}
	op := map[Kind]lease.Op{Acquire: lease.TryLock, Extend: lease.Extend, Release: lease.Unlock, Get: lease.Get}[kind]
	now := time.Now()
	e := s.entries[res]
	d := lease.Decide(e, op, []byte(owner), ttl, now)
	if s.bug == "ignore-busy" && d.Status == lease.Busy && s.rng.IntN(4) == 0 {
		d = lease.Decide(lease.Entry{State: lease.Released, Token: e.Token, Revision: e.Revision}, op, []byte(owner), ttl, now)
	}
	var holder string
	if d.Status == lease.Got {
		holder = string(e.Owner) // the entry Decide saw, not a later one
	}
	if d.Write {
		d.Next.Owner = append([]byte(nil), d.Next.Owner...)
		s.entries[res] = d.Next
	}
	return d.Status, d.Token, holder
}

// call runs one operation: it applies somewhere inside [call, return], or
// its answer is lost (applied or not, maybe after the caller gave up).
func (s *sim) call(rng *rand.Rand, kind Kind, res, owner string, ttl time.Duration) (lease.Status, int64, string, error) {
	time.Sleep(time.Duration(rng.IntN(1000)) * time.Microsecond)
	x := rng.IntN(40)
	if x <= 2 && s.losses.Add(1) > simMaxLosses {
		x = 3 // answered: the run has lost enough
	}
	switch {
	case x == 0: // applied, answer lost
		s.apply(kind, res, owner, ttl)
		return 0, 0, "", errLost
	case x == 1: // never applied
		return 0, 0, "", errLost
	case x == 2: // applied after the caller gave up
		delay := time.Duration(rng.IntN(20)) * time.Millisecond
		s.late.Add(1)
		go func() {
			defer s.late.Done()
			time.Sleep(delay)
			s.apply(kind, res, owner, ttl)
		}()
		return 0, 0, "", errLost
	}
	st, tok, holder := s.apply(kind, res, owner, ttl)
	time.Sleep(time.Duration(rng.IntN(1000)) * time.Microsecond)
	return st, tok, holder, nil
}

// simMargin is the clock margin the simulated histories are checked with.
const simMargin = 2 * ms

// simMinWindows is how many definite hold windows a run gathers before it
// may stop (TestSimulatedService wants at least 20): a loaded machine
// serves fewer operations in the run's time, and answers later, so fewer
// grants return before their lease ends; the run goes on instead of
// yielding a history too weak to test the checkers with.
const simMinWindows = 30

// runSim runs six clients against a simulated service for at least d, and
// on until the history holds simMinWindows hold windows and an
// indeterminate operation (at most 20·d).
func runSim(t *testing.T, seed uint64, bug string, d time.Duration) History {
	s := &sim{entries: map[string]lease.Entry{}, bug: bug, rng: rand.New(rand.NewPCG(seed, 0))}
	rec := NewRecorder()
	const ttl = 40 * time.Millisecond
	resources := []string{"r1", "r2"}
	var windows, unknown atomic.Int64
	start := time.Now()
	more := func() bool {
		el := time.Since(start)
		return el < d || (el < 20*d && (windows.Load() < simMinWindows || unknown.Load() == 0))
	}
	var wg sync.WaitGroup
	for c := 0; c < 6; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(c)+1))
			do := func(kind Kind, res, owner string, ttl time.Duration) Op {
				p := rec.Begin(Op{Client: c, Kind: kind, Resource: res, Owner: owner, TTL: ttl})
				st, tok, holder, err := s.call(rng, kind, res, owner, ttl)
				o := p.EndGet(st, tok, holder, err)
				switch {
				case o.Outcome == Indeterminate:
					unknown.Add(1)
				case kind == Acquire && o.Outcome == OK && o.Status == lease.Locked && o.Return < o.Call+ttl-simMargin:
					// A grant that returned before its lease surely ended:
					// the exclusion checker's hold window (see HoldWindows).
					windows.Add(1)
				}
				return o
			}
			release := func(res, owner string) {
				for i := 0; i < 5; i++ {
					if do(Release, res, owner, 0).Outcome != Indeterminate {
						return
					}
				}
			}
			for n := 0; more(); n++ {
				res := resources[rng.IntN(len(resources))]
				owner := fmt.Sprintf("c%d-%d", c, n)
				if rng.IntN(8) == 0 {
					do(Get, res, "", 0)
				}
				a := do(Acquire, res, owner, ttl)
				switch a.Outcome {
				case Indeterminate:
					release(res, owner)
					continue
				case Fail:
					time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
					continue
				}
				// Hold, sometimes past the lease, sometimes extending it.
				for i := rng.IntN(3); i > 0; i-- {
					time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond)
					if do(Extend, res, owner, ttl).Status != lease.Extended {
						break
					}
				}
				time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
				release(res, owner)
			}
		}()
	}
	wg.Wait()
	s.late.Wait()
	return rec.History()
}

// checkSim checks a simulated history; a linearizability search that timed
// out is searched again with four times the budget before anyone reads the
// report (what is still undecided then is neither a pass nor a finding).
func checkSim(t *testing.T, h History) Report {
	t.Helper()
	r := Check(h, Options{Margin: simMargin, Timeout: 30 * time.Second})
	if r.Undecided() {
		t.Logf("linearizability undecided on %v after %v: searching again", r.Linearizable.Undecided, r.Linearizable.Elapsed.Round(time.Millisecond))
		r = r.Recheck(h, Options{Margin: simMargin, Timeout: 2 * time.Minute})
	}
	return r
}

// TestSimulatedService runs the checkers on histories of a correct
// in-memory service with lost answers and late applies (all must pass), and
// of buggy ones (each bug must be flagged by the checkers meant to see it).
func TestSimulatedService(t *testing.T) {
	d := 700 * time.Millisecond
	if testing.Short() {
		d = 300 * time.Millisecond
	}
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint("correct/seed=", seed), func(t *testing.T) {
			t.Parallel()
			h := runSim(t, seed, "", d)
			r := checkSim(t, h)
			t.Logf("%+v windows=%d grants=%d lin=%v in %v", r.Stats, r.HoldWindows, r.FencedGrants, r.Linearizable.Result, r.Linearizable.Elapsed)
			if r.Stats.Indeterminate == 0 || r.HoldWindows < 20 {
				t.Errorf("weak history: %+v, %d windows", r.Stats, r.HoldWindows)
			}
			if err := r.Err(); err != nil {
				t.Fatalf("correct service flagged: %v", err)
			}
		})
	}
	for _, c := range []struct {
		bug              string
		lin, excl, fence bool // the checkers that must flag it (others may)
	}{
		{"reset-tokens", true, false, true},
		{"ignore-busy", true, true, false},
		{"early-expiry", true, true, false},
	} {
		t.Run(c.bug, func(t *testing.T) {
			t.Parallel()
			h := runSim(t, 7, c.bug, d)
			r := checkSim(t, h)
			t.Logf("%+v lin=%v exclusion=%d fencing=%d", r.Stats, r.Linearizable.Result, len(r.Exclusion), len(r.Fencing))
			// Only a definite verdict catches the bug: a search that timed
			// out (Unknown) saw nothing.
			if c.lin && r.Linearizable.Result != NotLinearizable {
				t.Errorf("linearizability checker missed the bug (%s)", r.Linearizable.Result)
			}
			if c.excl && len(r.Exclusion) == 0 {
				t.Error("exclusion checker missed the bug")
			}
			if c.fence && len(r.Fencing) == 0 {
				t.Error("fencing checker missed the bug")
			}
		})
	}
}
