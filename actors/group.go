package actors

import (
	"context"
	"fmt"

	"github.com/kahunago/kahuna/durability"
	"github.com/kahunago/kahuna/lease"
)

// A lock of several names at once (lease.Request.Also) goes to the actors
// as one call per name, each to the actor of its name and decided there
// as a TryLock. A call whose decision is a grant does not propose its
// record: its actor holds the name's write in flight (so nothing else is
// decided on the name meanwhile) and answers ready. Once every call has
// answered, doAll proposes the records of all the grants as one group
// entry (durability's ProposeGroup), applied all or nothing, and each
// call is then answered by the group's outcome, as any write is. If a
// call was not granted (busy, or not decided), the others' records are
// never proposed: their writes complete as not applied.
//
// No decision waits for another call of the group, and a group's call
// never queues behind a write in flight (it is answered at once), so two
// groups over the same names never wait for each other.

// errGroupRefused completes the held writes of a group one of whose calls
// was not granted: certainly not applied.
var errGroupRefused = fmt.Errorf("%w: another name of the lock of several names was not granted", durability.ErrRetry)

// doAll runs req, a TryLock with Also, and merges its calls' answers
// (mergeGroup).
func (r *Ring) doAll(ctx context.Context, req Request) (Response, error) {
	names := req.Names()
	at := make([]int, len(names)) // each name's actor
	for j, name := range names {
		at[j] = r.index(name)
		if !r.actors[at[j]].enter() {
			for _, i := range at[:j] {
				r.actors[i].pending.Add(-1) // not sent after all
			}
			r.actors[at[j]].refused.Add(1)
			return Response{Status: lease.MustRetry}, nil
		}
	}
	// The calls are not pooled: they may outlive ctx, and a held write is
	// answered twice (ready, then its outcome).
	owner := append([]byte(nil), req.Owner...)
	calls := make([]*call, len(names))
	for j, name := range names {
		c := &call{reply: make(chan Response, 1), group: true}
		c.req = req
		c.req.Resource, c.req.Also, c.req.Owner = name, nil, owner
		calls[j] = c
		r.actors[at[j]].mailbox.postInline(c)
	}
	// Every call is decided at once (none waits), so this does not wait on
	// ctx: a write held for the group must be proposed or refused.
	answers := make([]Response, len(calls))
	for j, c := range calls {
		select {
		case answers[j] = <-c.reply:
		case <-r.done:
			return Response{}, ErrClosed
		}
	}
	var (
		recs    []*durability.Record
		comps   []durability.Completion
		refused bool
	)
	for j, c := range calls {
		switch {
		case answers[j].ready:
			recs, comps = append(recs, &c.rec), append(comps, c)
		case answers[j].Status != lease.Locked: // not granted
			refused = true
		}
	}
	switch {
	case r.actors[0].cfg.UnsafeGroupPartial:
		for i, c := range comps {
			r.actors[0].cfg.Backend.Propose(req.Partition, recs[i], c)
		}
	case refused:
		for _, c := range comps {
			c.Committed(0, errGroupRefused)
		}
	case len(recs) > 0:
		r.actors[0].cfg.Backend.ProposeGroup(req.Partition, recs, comps)
	}
	for j, c := range calls {
		if !answers[j].ready {
			continue
		}
		select {
		case answers[j] = <-c.reply:
		case <-ctx.Done():
			return Response{}, ctx.Err() // the writes complete by themselves
		case <-r.done:
			return Response{}, ErrClosed
		}
	}
	return mergeGroup(answers), nil
}

// mergeGroup is a group's answer from its calls': Locked with a grant
// per name (Slot: the name's place in Request.Names; Token: the first
// name's) if every name was granted, else the weightiest refusal: Errored
// (the group may have applied), then Busy, then any other, then MustRetry.
func mergeGroup(answers []Response) Response {
	weight := func(s lease.Status) int {
		switch s {
		case lease.Locked:
			return 0
		case lease.MustRetry:
			return 1
		case lease.Busy:
			return 3
		case lease.Errored:
			return 4
		}
		return 2
	}
	out := Response{Status: lease.Locked}
	grants := make([]lease.Grant, 0, len(answers))
	for j, a := range answers {
		if a.Status == lease.Locked {
			grants = append(grants, lease.Grant{Slot: j, Token: a.Token})
		}
		if weight(a.Status) > weight(out.Status) {
			out.Status, out.Reason = a.Status, a.Reason
			if a.Status == lease.Busy {
				out.Reason = lease.BusyName(j + 1)
			}
		}
	}
	if out.Status == lease.Locked {
		out.Grants, out.Token = grants, grants[0].Token
	}
	return out
}
