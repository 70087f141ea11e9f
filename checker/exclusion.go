package checker

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// HoldWindow is an interval during which Owner definitely held Resource:
// from the completion of a definite grant to the earliest instant the lease
// could have lapsed. Or, Believed, one during which Owner's holder acted as
// the holder: a Hold of the history.
type HoldWindow struct {
	Resource   string
	Owner      string
	Token      int64
	Start, End time.Duration
	Acquire    Op // the definite grant the window starts at (Believed: the Hold)
	EndedBy    *Op
	Believed   bool
}

func (w HoldWindow) String() string {
	if w.Believed {
		return fmt.Sprintf("%s held by %s (token %d) over [%v, %v] as its holder believed (its handle's deadline)", w.Resource, w.Owner, w.Token, w.Start, w.End)
	}
	return fmt.Sprintf("%s held by %s (token %d) over [%v, %v]", w.Resource, w.Owner, w.Token, w.Start, w.End)
}

// HoldWindows reconstructs the definite hold windows of h. For each
// definite grant A (acquire → Locked) of owner o on resource r:
//
//   - Start is A's return: from then on o surely holds the lock.
//   - The lease began no earlier than the earliest call of the acquires of
//     o on r that may have granted it: A itself, and any earlier acquire by
//     o that is indeterminate or returned A's token, unless a definite
//     release by o lies between it and A. It lapses no earlier than that
//     call + TTL − margin.
//   - A definite Extended by o on r with A's token proves the lease was live at its
//     linearisation point, after its call, and moves the earliest lapse to
//     that call + its TTL − margin; an extend that may have taken effect
//     later (Extend may shorten a lease) pulls it back.
//   - Any release by o on r that may come after A (whatever it answered)
//     ends the window at its call, and so does any definite sign that o no
//     longer holds: a later definite grant of another token to o.
//   - On an ephemeral resource, a reign that may begin after A's grant took
//     effect (after A's call) ends the window at its earliest instant: the
//     new leader starts without the lock.
//
// Indeterminate acquires have no window: the caller never knew it held.
//
// Each Hold of h is a window too, as recorded: the holder acted over it,
// whatever the lease did. A reign that ends ephemeral holds and may begin
// after its start ends it there, as it ends a grant's window; one between
// the grant's call and the Hold's start it cannot tell, so a Hold belongs
// where reigns end no holds (persistent locks, ephemeral ones with the
// grace).
func HoldWindows(h History, opts Options) []HoldWindow {
	margin := opts.margin()
	type key struct{ res, owner string }
	per := map[key][]Op{}
	resets := resetsByResource(h)
	var windows []HoldWindow
	for _, o := range h {
		if o.Kind == Hold {
			end := o.Return
			var endedBy *Op
			for ri := range resets[o.Resource] {
				r := &resets[o.Resource][ri]
				if r.Return > o.Call {
					if at := max(r.Call, o.Call); at < end {
						end, endedBy = at, r
					}
				}
			}
			if end > o.Call {
				windows = append(windows, HoldWindow{Resource: o.Resource, Owner: o.Owner, Token: o.Token, Start: o.Call, End: end, Acquire: o, EndedBy: endedBy, Believed: true})
			}
			continue
		}
		if o.Kind == Get || o.Kind == Reign {
			continue
		}
		k := key{o.Resource, o.Owner}
		per[k] = append(per[k], o)
	}
	for k, ops := range per {
		slices.SortFunc(ops, func(a, b Op) int { return cmpDur(a.Call, b.Call) })
		for ai, a := range ops {
			if a.Kind != Acquire || a.Outcome != OK || a.Status != lease.Locked {
				continue
			}
			// A definite release by o that lies wholly before A ended any
			// lease o held before it: a definite grant that returned before
			// such a release's call cannot be A's.
			releasedAt := time.Duration(-1)
			for _, x := range ops {
				if x.Kind == Release && x.Outcome == OK && x.Return < a.Call {
					releasedAt = max(releasedAt, x.Call)
				}
			}
			rs := resets[k.res]
			// A reset surely between an earlier grant and A wiped it: A is
			// a grant of its own.
			wiped := func(x Op) bool {
				return slices.ContainsFunc(rs, func(r Op) bool { return r.Call >= x.Returned() && r.Return <= a.Call })
			}
			// Earliest lapse from the possible grants.
			lapse := time.Duration(math.MaxInt64)
			for xi, x := range ops[:ai+1] {
				if x.Kind != Acquire || x.Outcome == Fail {
					continue
				}
				if x.Outcome == OK && (x.Token != a.Token || x.Status != lease.Locked || x.Return < releasedAt) {
					continue
				}
				if xi != ai && wiped(x) {
					continue
				}
				lapse = min(lapse, x.Call+x.TTL)
			}
			// Later facts about the same owner.
			end := time.Duration(math.MaxInt64)
			var endedBy *Op
			var lastExt *Op
			for xi := range ops {
				x := &ops[xi]
				if xi == ai || x.Returned() < a.Call {
					continue // wholly before A: cannot follow its grant
				}
				switch x.Kind {
				case Release:
					if x.Call < end {
						end, endedBy = x.Call, x
					}
				case Acquire:
					if x.Outcome == OK && x.Status == lease.Locked && x.Token != a.Token && x.Call > a.Return && x.Call < end {
						end, endedBy = x.Call, x // o was granted anew: A's lease ended before
					}
				case Extend:
					// An Extended answer carries the token of the grant it
					// extended: another token's (a later grant to o) says
					// nothing of A's lease.
					if x.Outcome == OK && x.Status == lease.Extended && x.Token == a.Token && (lastExt == nil || x.Call > lastExt.Call) {
						lastExt = x
					}
				}
			}
			// The last extend that took effect set the expiry to its
			// linearisation point (after its call) + its TTL: the last
			// definite one, or any other that may come after it (Extend may
			// shorten a lease, and an indeterminate one may apply late).
			after := a.Call
			if lastExt != nil {
				lapse = max(lapse, lastExt.Call+lastExt.TTL)
				after = lastExt.Call
			}
			for xi := range ops {
				x := &ops[xi]
				if x.Kind == Extend && x != lastExt && x.Outcome != Fail && x.Returned() >= after {
					lapse = min(lapse, x.Call+x.TTL)
				}
			}
			lapse -= margin
			if lapse < end {
				end, endedBy = lapse, nil
			}
			for ri := range rs {
				r := &rs[ri]
				if r.Return > a.Call {
					if at := max(r.Call, a.Call); at < end {
						end, endedBy = at, r
					}
				}
			}
			if end <= a.Return {
				continue
			}
			windows = append(windows, HoldWindow{Resource: k.res, Owner: k.owner, Token: a.Token, Start: a.Return, End: end, Acquire: a, EndedBy: endedBy})
		}
	}
	slices.SortFunc(windows, func(a, b HoldWindow) int {
		if a.Resource != b.Resource {
			if a.Resource < b.Resource {
				return -1
			}
			return 1
		}
		return cmpDur(a.Start, b.Start)
	})
	return windows
}

// CheckExclusion reports every pair of definite hold windows of different
// owners that overlap on a resource.
func CheckExclusion(h History, opts Options) []Violation {
	v, _ := checkExclusion(h, opts)
	return v
}

func checkExclusion(h History, opts Options) ([]Violation, int) {
	windows := HoldWindows(h, opts)
	var out []Violation
	for i := range windows {
		for j := i + 1; j < len(windows); j++ {
			a, b := windows[i], windows[j]
			if b.Resource != a.Resource || b.Start >= a.End {
				break // sorted by resource and start: no later window overlaps a
			}
			if a.Owner == b.Owner {
				continue
			}
			out = append(out, Violation{
				Checker: "exclusion",
				Kind:    "overlapping-holders",
				Text:    fmt.Sprintf("%s and %s overlap by %v", a, b, min(a.End, b.End)-b.Start),
				Ops:     []Op{a.Acquire, b.Acquire},
			})
		}
	}
	return out, len(windows)
}
