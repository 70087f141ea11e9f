package checker

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Act is one act of a holder of a semaphore's permit or of a read/write
// lock, done between two checks that its handle's Context was live, so the
// holder certainly held over [Start, End] (recorder times).
type Act struct {
	Holder     int   // one per grant
	Slot       int   // a permit's slot (0 for a read/write lock)
	Write      bool  // a read/write lock's write lock (else a read lock)
	Token      int64 // the slot's fencing token, or the write epoch
	Start, End time.Duration
}

func (a Act) String() string {
	return fmt.Sprintf("holder %d slot %d write %v token %d [%v, %v]", a.Holder, a.Slot, a.Write, a.Token, a.Start, a.End)
}

// CheckPermits checks the acts of one semaphore's permit holders against
// its promises (checker "semaphore"):
//
//   - over-limit: more than limit holders acted at one instant;
//   - token-twice: two holders acted with one slot's token (a slot's
//     token names one grant);
//   - token-backwards: a holder acted with a slot's token below one that
//     had already acted on the slot (a fence keeping the slot's high-water
//     mark would refuse it).
func CheckPermits(acts []Act, limit int) []Violation {
	var out []Violation
	if most, at := mostAtOnce(acts); most > limit {
		out = append(out, Violation{Checker: "semaphore", Kind: "over-limit",
			Text: fmt.Sprintf("%d holders acted at once at %v, over the limit of %d", most, at, limit)})
	}
	byToken := map[[2]int64]Act{}
	for _, a := range acts {
		k := [2]int64{int64(a.Slot), a.Token}
		if b, ok := byToken[k]; ok && b.Holder != a.Holder {
			out = append(out, Violation{Checker: "semaphore", Kind: "token-twice",
				Text: fmt.Sprintf("slot %d token %d granted to two holders: %v and %v", a.Slot, a.Token, b, a)})
			break
		}
		byToken[k] = a
	}
	high := map[int]Act{}
	for _, a := range byStart(acts) {
		if h, ok := high[a.Slot]; ok && a.Token < h.Token && a.Start > h.End {
			out = append(out, Violation{Checker: "semaphore", Kind: "token-backwards",
				Text: fmt.Sprintf("slot %d: token %d acted after token %d had: %v after %v", a.Slot, a.Token, h.Token, a, h)})
			break
		}
		if a.Token > high[a.Slot].Token {
			high[a.Slot] = a
		}
	}
	return out
}

// CheckRWLock checks the acts of one read/write lock's holders against its
// promises (checker "rwlock"):
//
//   - writer-beside-holder: a writer acted while another holder did;
//   - epoch-two-writers: two writers acted under one epoch;
//   - epoch-backwards: a holder acted under an epoch older than that of a
//     write that had already acted (a fenced resource would refuse it).
func CheckRWLock(acts []Act) []Violation {
	var out []Violation
	sorted := byStart(acts)
	for i, a := range sorted {
		for _, b := range sorted[i+1:] {
			if b.Start >= a.End {
				break
			}
			if (a.Write || b.Write) && a.Holder != b.Holder {
				out = append(out, Violation{Checker: "rwlock", Kind: "writer-beside-holder",
					Text: fmt.Sprintf("a writer acted beside another holder: %v and %v", a, b)})
				break
			}
		}
		if len(out) > 0 {
			break
		}
	}
	writers := map[int64]Act{}
	var last Act // the write with the highest epoch that has acted
	for _, a := range sorted {
		if a.Write {
			if b, ok := writers[a.Token]; ok && b.Holder != a.Holder {
				out = append(out, Violation{Checker: "rwlock", Kind: "epoch-two-writers",
					Text: fmt.Sprintf("epoch %d held by two writers: %v and %v", a.Token, b, a)})
				break
			}
			writers[a.Token] = a
		}
		if last.Write && a.Token < last.Token && a.Start > last.End {
			out = append(out, Violation{Checker: "rwlock", Kind: "epoch-backwards",
				Text: fmt.Sprintf("an act under epoch %d after a write of epoch %d: %v after %v", a.Token, last.Token, a, last)})
			break
		}
		if a.Write && a.Token > last.Token {
			last = a
		}
	}
	return out
}

// mostAtOnce is the most acts going on at one instant, and that instant
// (one holder's acts follow one another, so that is holders).
func mostAtOnce(acts []Act) (most int, at time.Duration) {
	type edge struct {
		at    time.Duration
		delta int
	}
	edges := make([]edge, 0, 2*len(acts))
	for _, a := range acts {
		edges = append(edges, edge{a.Start, +1}, edge{a.End, -1})
	}
	slices.SortFunc(edges, func(x, y edge) int {
		if c := cmp.Compare(x.at, y.at); c != 0 {
			return c
		}
		return x.delta - y.delta // an end before a start at one instant
	})
	acting := 0
	for _, e := range edges {
		acting += e.delta
		if acting > most {
			most, at = acting, e.at
		}
	}
	return most, at
}

func byStart(acts []Act) []Act {
	sorted := slices.Clone(acts)
	slices.SortStableFunc(sorted, func(x, y Act) int { return cmp.Compare(x.Start, y.Start) })
	return sorted
}
