package checker

import (
	"slices"
	"testing"
	"time"
)

func TestCheckElection(t *testing.T) {
	term := func(c int, v string, epoch int64, first, last int) Term {
		return Term{Candidate: c, Value: v, Epoch: epoch, FirstAct: ms * time.Duration(first), LastAct: ms * time.Duration(last), Acts: 2}
	}
	el := func(v string, e int64) Observed { return Observed{Elected: true, Value: v, Epoch: e} }
	vac := func(e int64) Observed { return Observed{Epoch: e} }
	pr := func(v string, e int64) Observed { return Observed{Elected: true, Proclaimed: true, Value: v, Epoch: e} }
	proclaiming := func(t Term, values ...string) Term { t.Proclaimed = values; return t }
	for _, tc := range []struct {
		name      string
		terms     []Term
		observers [][]Observed
		want      []string
	}{
		{"clean", []Term{term(1, "a", 0, 0, 10), term(2, "b", 1, 11, 20), {Candidate: 3, Value: "c", Epoch: 2}, term(1, "d", 3, 25, 30)},
			[][]Observed{{vac(-1), el("a", 0), vac(0), el("b", 1), el("d", 3)}, {el("b", 1), vac(1)}}, nil},
		{"two leaders", []Term{term(1, "a", 0, 0, 12), term(2, "b", 1, 11, 20)}, nil, []string{"two-leaders"}},
		{"two leaders, not neighbours", []Term{term(1, "a", 0, 0, 30), term(2, "b", 1, 11, 20), term(3, "c", 2, 25, 40)}, nil, []string{"two-leaders", "two-leaders"}},
		{"epoch repeated", []Term{term(1, "a", 3, 0, 10), term(2, "b", 3, 11, 20)}, nil, []string{"epoch-not-increasing"}},
		{"epoch backwards", []Term{term(1, "a", 3, 0, 10), term(2, "b", 0, 11, 20)}, nil, []string{"epoch-not-increasing"}},
		{"observed backwards", []Term{term(1, "a", 0, 0, 10), term(2, "b", 1, 11, 20)}, [][]Observed{{el("b", 1), el("a", 0)}}, []string{"observe-epoch-not-increasing"}},
		{"observed twice", nil, [][]Observed{{el("b", 1), el("b", 1)}}, []string{"observe-duplicate", "observe-epoch-not-increasing"}},
		{"vacant twice", nil, [][]Observed{{vac(1), vac(1)}}, []string{"observe-duplicate"}},
		{"observed wrong value", []Term{term(1, "a", 0, 0, 10)}, [][]Observed{{el("z", 0)}}, []string{"observe-unknown-term"}},
		{"proclaims", []Term{proclaiming(term(1, "a", 0, 0, 10), "a2", "a3"), term(2, "b", 1, 11, 20)},
			[][]Observed{{el("a", 0), pr("a2", 0), pr("a3", 0), vac(0), el("b", 1)}, {el("a2", 0), pr("a3", 0)}, {el("a", 0), pr("a3", 0), el("b", 1)}}, nil},
		{"proclaimed value went back", []Term{proclaiming(term(1, "a", 0, 0, 10), "a2", "a3")},
			[][]Observed{{el("a", 0), pr("a3", 0), pr("a2", 0)}}, []string{"observe-value-went-back"}},
		{"proclaimed unknown value", []Term{proclaiming(term(1, "a", 0, 0, 10), "a2")},
			[][]Observed{{el("a", 0), pr("zz", 0)}}, []string{"observe-unknown-term"}},
		{"proclaimed in another term", []Term{term(1, "a", 0, 0, 10), proclaiming(term(2, "b", 1, 11, 20), "b2")},
			[][]Observed{{el("a", 0), pr("b2", 1)}}, []string{"observe-proclaim-other-term"}},
		// Epochs that go back (a broken run's, as the negative controls
		// make): a value's place is compared within the epoch it was seen
		// in, not within the highest epoch seen so far.
		{"observed an older term, then the newer again", []Term{proclaiming(term(1, "a", 3, 0, 10), "a2", "a3", "a4"), proclaiming(term(2, "b", 5, 11, 20), "b2")},
			[][]Observed{{el("b2", 5), pr("a4", 3), el("b", 5)}}, []string{"observe-proclaim-other-term", "observe-epoch-not-increasing"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, v := range CheckElection(tc.terms, tc.observers) {
				got = append(got, v.Kind)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("violations %v, want %v", got, tc.want)
			}
		})
	}
}
