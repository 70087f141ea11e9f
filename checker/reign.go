package checker

import (
	"fmt"
	"slices"

	"github.com/kahunago/kahuna/lease"
)

// Reigns. A partition's leadership changes for real when a node begins to
// serve it in a new Raft term: a new reign (Op Kind Reign). That is not the
// same as a node's view changing: a deposed leader that has not heard the
// news still believes it leads, and a follower may learn of the new leader
// late. Only the new leader's start counts, and each reign counts once: for
// ephemeral locks it is the one instant at which every hold of the
// partition ends and its tokens restart. A checker that let a lock vanish
// whenever some node's view changed would excuse the very bug it looks for
// (an old leader answering from its memory after the new one served).

// resets returns the Reign events of ops that end ephemeral holds, by call.
func resets(ops []Op) []Op {
	var out []Op
	for _, o := range ops {
		if o.Kind == Reign && o.Ephemeral && !o.Grace {
			out = append(out, o)
		}
	}
	slices.SortFunc(out, func(a, b Op) int { return cmpDur(a.Call, b.Call) })
	return out
}

// resetsByResource maps each resource of h to its resets.
func resetsByResource(h History) map[string][]Op {
	m := map[string][]Op{}
	for _, o := range h {
		if o.Kind == Reign && o.Ephemeral && !o.Grace {
			m[o.Resource] = append(m[o.Resource], o)
		}
	}
	for k := range m {
		m[k] = resets(m[k])
	}
	return m
}

// CheckStaleLeader flags every definite answer (not MustRetry) that a node
// gave on its own, non-forwarding Locker (Op.Local) after its reign was
// over: a reign of a later term had begun, surely, before the call was
// made, and the node had begun no reign of a later term itself by the time
// it answered. Such a node no longer led the partition when it decided.
// Answers whose linearizability the stale view happens not to break are
// flagged too. A node with a reign of unknown term is given the benefit of
// the doubt. Two kinds:
//
//   - answer-from-deposed-leader: an answer that changed nothing (Busy,
//     InvalidOwner, LockDoesNotExist, Got, a same-owner re-lock), or any
//     answer on an ephemeral lock: given from a stale cache, or memory; a
//     node may answer only while it can prove it leads (its leader lease);
//   - write-from-deposed-leader: a change of a persistent lock (a grant,
//     Extended, Unlocked) acknowledged as done: the deposed node's
//     decision, made on a stale view, was committed through the new
//     leader; decisions must be fenced by their epoch.
func CheckStaleLeader(h History) []Violation {
	type reign struct {
		op   Op
		term uint64
	}
	type key struct{ res, owner string }
	byRes := map[string][]reign{}
	grants := map[key][]Op{} // definite Locked answers, to tell re-locks
	for _, o := range h {
		if o.Kind == Reign {
			byRes[o.Resource] = append(byRes[o.Resource], reign{o, uint64(o.Token)})
		}
		if o.Kind == Acquire && o.Outcome == OK && o.Status == lease.Locked {
			grants[key{o.Resource, o.Owner}] = append(grants[key{o.Resource, o.Owner}], o)
		}
	}
	// write: o changed the lock, unless it is a re-lock by the holder (an
	// earlier grant to the owner with the same token).
	write := func(o Op) bool {
		switch o.Status {
		case lease.Extended, lease.Unlocked:
			return true
		case lease.Locked:
			return !slices.ContainsFunc(grants[key{o.Resource, o.Owner}], func(g Op) bool {
				return g.Call < o.Call && g.Token == o.Token
			})
		}
		return false
	}
	var out []Violation
	for _, o := range h {
		if o.Kind == Reign || o.Kind == Hold || !o.Local || o.Node == 0 || o.Outcome == Indeterminate ||
			o.Err != "" || o.Status == lease.MustRetry || o.Status == lease.InvalidInput {
			continue // no answer of the node's (a call error), or none that is one
		}
		rs := byRes[o.Resource]
		// The node's latest reign that may have begun before it answered.
		var own uint64
		unknown := false
		for _, r := range rs {
			if r.op.Node == o.Node && r.op.Call < o.Return {
				if r.term == 0 {
					unknown = true
				}
				own = max(own, r.term)
			}
		}
		if unknown {
			continue
		}
		var by *reign
		for i := range rs {
			r := &rs[i]
			if r.term > own && r.op.Return < o.Call && (by == nil || r.op.Return < by.op.Return) {
				by = r
			}
		}
		if by == nil {
			continue
		}
		ownText := "no reign"
		if own != 0 {
			ownText = fmt.Sprintf("its reign of term %d", own)
		}
		kind := "answer-from-deposed-leader"
		if o.Outcome == OK && o.Kind != Get && !o.Ephemeral && write(o) {
			kind = "write-from-deposed-leader"
		}
		out = append(out, Violation{
			Checker: "stale-leader", Kind: kind,
			Text: fmt.Sprintf("%s: node %d answered %s in %s, called %v after node %d had begun to serve term %d",
				o.Resource, o.Node, o.Status, ownText, o.Call-by.op.Return, by.op.Node, by.term),
			Ops: []Op{by.op, o},
		})
	}
	return out
}
