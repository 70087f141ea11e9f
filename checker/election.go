package checker

import (
	"fmt"
	"slices"
	"time"
)

// Term is one leadership of an election as its candidate lived it: the
// epoch and value it was elected with, and the instants it acted as
// leader. An act's instant is read between two checks that the
// leadership's Context was live, so the Context was live at that instant
// (a Context that has ended never comes back): the candidate was
// certainly leader from FirstAct to LastAct.
type Term struct {
	Candidate int
	Value     string
	Epoch     int64
	FirstAct  time.Duration
	LastAct   time.Duration
	Acts      int // 0: elected, but never acted (its Context had ended)
}

func (t Term) String() string {
	return fmt.Sprintf("candidate %d %q epoch %d acted %d times in [%v, %v]", t.Candidate, t.Value, t.Epoch, t.Acts, t.FirstAct, t.LastAct)
}

// Observed is one event an Observe stream yielded.
type Observed struct {
	Elected bool // else vacant
	Value   string
	Epoch   int64
}

func (o Observed) String() string {
	if o.Elected {
		return fmt.Sprintf("elected %q epoch %d", o.Value, o.Epoch)
	}
	return fmt.Sprintf("vacant after epoch %d", o.Epoch)
}

// CheckElection checks one election's terms and what its observers saw:
//
//   - two-leaders: two terms acted in intervals that meet, so two
//     candidates had a live leadership Context at one instant;
//   - epoch-not-increasing: a term that acted after another has an epoch
//     no greater than the other's;
//   - observe-epoch-not-increasing: an observer saw an Elected epoch no
//     greater than the one it saw before;
//   - observe-duplicate: an observer saw the same event twice in a row;
//   - observe-unknown-term: an observer saw a leader with a value that no
//     term of that epoch had (a term that acted is known for sure).
//
// Terms that never acted are not compared: a candidate elected too late
// to act (its Context had ended when Campaign returned) was never leader
// as far as anything it protects can tell.
func CheckElection(terms []Term, observers [][]Observed) []Violation {
	var out []Violation
	var acted []Term
	for _, t := range terms {
		if t.Acts > 0 {
			acted = append(acted, t)
		}
	}
	slices.SortFunc(acted, func(a, b Term) int { return cmpDur(a.FirstAct, b.FirstAct) })
	for i := 1; i < len(acted); i++ {
		a, b := acted[i-1], acted[i]
		// Sorted by FirstAct, a term meets a later one exactly when it
		// meets the next; keep the one that reaches furthest on.
		if a.LastAct >= b.FirstAct {
			out = append(out, Violation{Checker: "election", Kind: "two-leaders",
				Text: fmt.Sprintf("%v and %v were both leader at %v", a, b, b.FirstAct)})
		}
		if b.Epoch <= a.Epoch {
			out = append(out, Violation{Checker: "election", Kind: "epoch-not-increasing",
				Text: fmt.Sprintf("%v followed %v", b, a)})
		}
		if a.LastAct > b.LastAct {
			acted[i] = a
		}
	}
	valueOf := map[int64]string{}
	for _, t := range acted {
		valueOf[t.Epoch] = t.Value
	}
	for i, seen := range observers {
		lastEpoch := int64(-1)
		for j, ev := range seen {
			if j > 0 && seen[j-1] == ev {
				out = append(out, Violation{Checker: "election", Kind: "observe-duplicate",
					Text: fmt.Sprintf("observer %d saw %v twice in a row (event %d)", i, ev, j)})
			}
			if !ev.Elected {
				continue
			}
			if ev.Epoch <= lastEpoch {
				out = append(out, Violation{Checker: "election", Kind: "observe-epoch-not-increasing",
					Text: fmt.Sprintf("observer %d saw %v after epoch %d (event %d)", i, ev, lastEpoch, j)})
			}
			lastEpoch = max(lastEpoch, ev.Epoch)
			if v, ok := valueOf[ev.Epoch]; ok && v != ev.Value {
				out = append(out, Violation{Checker: "election", Kind: "observe-unknown-term",
					Text: fmt.Sprintf("observer %d saw %v; epoch %d was %q's", i, ev, ev.Epoch, v)})
			}
		}
	}
	return out
}
