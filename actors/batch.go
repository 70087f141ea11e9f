package actors

import (
	"context"

	"github.com/kahunago/kahuna/lease"
)

// A batch (lease.Request.IsBatch: an Extend or Unlock with Also) goes to
// the actors as one call per name, each to the actor of its name and
// handled there as if asked alone (queued behind a write in flight, folded
// with other writes, proposed through the partition's lane, where the
// batch's records share Raft entries). doEach posts them all before it
// waits for any, so the names are decided side by side.

// doEach runs req, a batch of names all in req.Partition, and answers
// each name's status in Response.Each (Status: Extended or Unlocked when
// every name was, else the first other status).
func (r *Ring) doEach(ctx context.Context, req Request) (Response, error) {
	names := req.Names()
	owner := append([]byte(nil), req.Owner...) // the calls may outlive ctx
	calls := make([]*call, len(names))
	for j, name := range names {
		i := r.index(name)
		if !r.actors[i].enter() {
			continue // answered MustRetry below
		}
		c := &call{reply: make(chan Response, 1)}
		c.req = req
		c.req.Resource, c.req.Also, c.req.Owner = name, nil, owner
		calls[j] = c
		r.actors[i].mailbox.postInline(c)
	}
	out := Response{Each: make([]lease.Status, len(names))}
	for j, c := range calls {
		var resp Response
		if c == nil {
			resp.Status = lease.MustRetry
		} else {
			select {
			case resp = <-c.reply:
			case <-ctx.Done():
				return Response{}, ctx.Err()
			case <-r.done:
				return Response{}, ErrClosed
			}
		}
		if resp.raise != nil { // an ephemeral TTL past the window: Do waits for the raise
			one := c.req
			var err error
			if resp, err = r.Do(ctx, one); err != nil {
				return Response{}, err
			}
		}
		out.Each[j] = resp.Status
		if out.Reason == "" && resp.Status == lease.InvalidInput {
			out.Reason = resp.Reason
		}
	}
	out.Status = lease.BatchStatus(req.Op, out.Each)
	return out, nil
}
