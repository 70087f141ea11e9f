package checker

import (
	"fmt"
	"slices"

	"github.com/kahunago/kahuna/lease"
)

// CheckFencing checks the fencing tokens of h's definite grants (acquire →
// Locked), per resource:
//
//   - token-went-backwards: a grant B that began after a grant A completed
//     (A.Return < B.Call) has a smaller token than A;
//   - token-not-increased: such a B, to another owner, has A's token (a new
//     owner must get a strictly larger token);
//   - token-reused-by-other-owner: two grants to different owners carry the
//     same token, ordered in real time or not.
//
// The same owner re-acquiring may get the same token. Concurrent grants are
// only compared for reuse. Reigns do not matter: ephemeral tokens, like
// persistent ones, never go backwards for a name, across leader changes.
func CheckFencing(h History) []Violation {
	v, _ := checkFencing(h)
	return v
}

func checkFencing(h History) ([]Violation, int) {
	var out []Violation
	keys, groups := byResource(h)
	grants := 0
	for _, k := range keys {
		var gs []Op
		for _, o := range groups[k] {
			if o.Kind == Acquire && o.Outcome == OK && o.Status == lease.Locked {
				gs = append(gs, o)
			}
		}
		grants += len(gs)
		out = append(out, fenceGrants(k, gs)...)
	}
	return out, grants
}

// fenceGrants checks the grants gs of resource k.
func fenceGrants(k string, gs []Op) []Violation {
	var out []Violation
	// Reuse: one owner per token.
	byToken := map[int64]Op{}
	for _, g := range gs {
		if prev, ok := byToken[g.Token]; ok && prev.Owner != g.Owner {
			out = append(out, Violation{
				Checker: "fencing", Kind: "token-reused-by-other-owner",
				Text: fmt.Sprintf("%s: token %d granted to %s and to %s", k, g.Token, prev.Owner, g.Owner),
				Ops:  []Op{prev, g},
			})
			continue
		}
		if _, ok := byToken[g.Token]; !ok {
			byToken[g.Token] = g
		}
	}

	// Real-time order: sweep grants by call; the grants completed before
	// a call are those with an earlier return. Keep the largest token
	// seen so far and, for that token, one grant per owner (at most two
	// owners matter: B's own and any other).
	byReturn := slices.Clone(gs)
	slices.SortFunc(byReturn, func(a, b Op) int { return cmpDur(a.Return, b.Return) })
	byCall := slices.Clone(gs)
	slices.SortFunc(byCall, func(a, b Op) int { return cmpDur(a.Call, b.Call) })
	var (
		maxTok    int64 = -1 << 63
		maxOps    []Op  // grants completed so far with token maxTok, distinct owners
		completed int
	)
	for _, b := range byCall {
		for completed < len(byReturn) && byReturn[completed].Return < b.Call {
			a := byReturn[completed]
			completed++
			switch {
			case a.Token > maxTok:
				maxTok, maxOps = a.Token, []Op{a}
			case a.Token == maxTok && !slices.ContainsFunc(maxOps, func(o Op) bool { return o.Owner == a.Owner }):
				maxOps = append(maxOps, a)
			}
		}
		if len(maxOps) == 0 {
			continue
		}
		switch {
		case b.Token < maxTok:
			out = append(out, Violation{
				Checker: "fencing", Kind: "token-went-backwards",
				Text: fmt.Sprintf("%s: %s got token %d after token %d had been granted", k, b.Owner, b.Token, maxTok),
				Ops:  []Op{maxOps[0], b},
			})
		case b.Token == maxTok:
			i := slices.IndexFunc(maxOps, func(o Op) bool { return o.Owner != b.Owner })
			if i >= 0 {
				out = append(out, Violation{
					Checker: "fencing", Kind: "token-not-increased",
					Text: fmt.Sprintf("%s: %s got token %d, already granted to %s before it asked", k, b.Owner, b.Token, maxOps[i].Owner),
					Ops:  []Op{maxOps[i], b},
				})
			}
		}
	}
	return out
}
