package checker

import (
	"fmt"
	"slices"
	"time"
)

// Term is one leadership of an election as its candidate lived it: the
// epoch and value it was elected with, the values it proclaimed, and the
// instants it acted as leader. An act's instant is read between two checks that the
// leadership's Context was live, so the Context was live at that instant
// (a Context that has ended never comes back): the candidate was
// certainly leader from FirstAct to LastAct.
type Term struct {
	Candidate int
	Value     string
	// Proclaimed are the values the leader proclaimed in the term, in the
	// order it asked, each whatever the outcome (an unknown one may have
	// applied).
	Proclaimed []string
	Epoch      int64
	FirstAct   time.Duration
	LastAct    time.Duration
	Acts       int // 0: elected, but never acted (its Context had ended)
}

func (t Term) String() string {
	return fmt.Sprintf("candidate %d %q epoch %d acted %d times in [%v, %v]", t.Candidate, t.Value, t.Epoch, t.Acts, t.FirstAct, t.LastAct)
}

// Observed is one event an Observe stream yielded.
type Observed struct {
	Elected    bool // a leader, else vacant
	Proclaimed bool // with Elected: a new value in the term Epoch
	Value      string
	Epoch      int64
}

func (o Observed) String() string {
	switch {
	case o.Proclaimed:
		return fmt.Sprintf("proclaimed %q epoch %d", o.Value, o.Epoch)
	case o.Elected:
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
//     term of that epoch had, elected or proclaimed (a term that acted is
//     known for sure);
//   - observe-proclaim-other-term: an observer saw a proclaim in a term
//     other than the one it saw elected last;
//   - observe-value-went-back: within one term, an observer saw a value
//     the leader had before one it saw earlier (a late proclaim undid a
//     later one).
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
	valuesOf := map[int64][]string{} // a term's values, in the order it had them
	for _, t := range acted {
		valuesOf[t.Epoch] = append([]string{t.Value}, t.Proclaimed...)
	}
	for i, seen := range observers {
		lastEpoch := int64(-1) // the highest epoch seen
		lastIndex := -1        // the position in indexEpoch's values of the last value seen
		indexEpoch := int64(-1)
		for j, ev := range seen {
			if j > 0 && seen[j-1] == ev {
				out = append(out, Violation{Checker: "election", Kind: "observe-duplicate",
					Text: fmt.Sprintf("observer %d saw %v twice in a row (event %d)", i, ev, j)})
			}
			if !ev.Elected {
				lastIndex = -1
				continue
			}
			switch {
			case ev.Proclaimed && ev.Epoch != lastEpoch:
				out = append(out, Violation{Checker: "election", Kind: "observe-proclaim-other-term",
					Text: fmt.Sprintf("observer %d saw %v after epoch %d (event %d)", i, ev, lastEpoch, j)})
			case !ev.Proclaimed && ev.Epoch <= lastEpoch:
				out = append(out, Violation{Checker: "election", Kind: "observe-epoch-not-increasing",
					Text: fmt.Sprintf("observer %d saw %v after epoch %d (event %d)", i, ev, lastEpoch, j)})
			}
			// Compared within the epoch last seen, not the highest: in a
			// broken run an older epoch may come back in between.
			if ev.Epoch != indexEpoch {
				lastIndex = -1
			}
			indexEpoch = ev.Epoch
			lastEpoch = max(lastEpoch, ev.Epoch)
			values, ok := valuesOf[ev.Epoch]
			if !ok {
				continue
			}
			k := slices.Index(values, ev.Value)
			switch {
			case k < 0:
				out = append(out, Violation{Checker: "election", Kind: "observe-unknown-term",
					Text: fmt.Sprintf("observer %d saw %v; epoch %d's values were %q", i, ev, ev.Epoch, values)})
			case k < lastIndex:
				out = append(out, Violation{Checker: "election", Kind: "observe-value-went-back",
					Text: fmt.Sprintf("observer %d saw %v after %q; epoch %d's values were %q", i, ev, values[lastIndex], ev.Epoch, values)})
			default:
				lastIndex = k
			}
		}
	}
	return out
}
