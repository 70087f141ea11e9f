package node

import (
	"context"
	"errors"
	"sync"

	"github.com/kahunago/kahuna/actors"
	"github.com/kahunago/kahuna/lease"
	"github.com/kahunago/kahuna/partition"
)

// A batch (an Extend or Unlock with Also: lease/batch.go) names locks of
// any partitions. doBatch splits it by partition and runs the shares side
// by side: each one this node serves in its actors as one call, each other
// one forwarded whole to its partition's leader (hop), so a batch of
// names over every partition costs at most one hop per leader. Every name
// is answered on its own, in Result.Each.

// doBatch runs the checked batch c (do's edge: stats, pause and close
// are do's).
func (n *Node) doBatch(ctx context.Context, c lease.Checked, forwarded bool) (lease.Result, error) {
	req := c.Request()
	names := req.Names()
	places := map[int][]int{} // partition → the places of its names
	var order []int
	for j, name := range names {
		p := partition.Of(name, n.cfg.Partitions)
		if places[p] == nil {
			order = append(order, p)
		}
		places[p] = append(places[p], j)
	}
	each := make([]lease.Status, len(names))
	if len(order) == 1 { // one partition (a forwarded share is): no goroutine
		statuses, reason, err := n.share(ctx, req, names, places[order[0]], order[0], forwarded)
		if err != nil {
			return lease.Result{}, err
		}
		return lease.Result{Status: lease.BatchStatus(req.Op, statuses), Each: statuses, Reason: reason}, nil
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		gone   error  // ctx's error, or ErrClosed: no answer is due
		reason string // a share's, the first one given
	)
	for _, p := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses, why, err := n.share(ctx, req, names, places[p], p, forwarded)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				gone = err
				return
			}
			if reason == "" {
				reason = why
			}
			for k, j := range places[p] {
				each[j] = statuses[k]
			}
		}()
	}
	wg.Wait()
	if gone != nil {
		return lease.Result{}, gone
	}
	return lease.Result{Status: lease.BatchStatus(req.Op, each), Each: each, Reason: reason}, nil
}

// share runs the names at places of req, all of partition p, here or on
// p's leader, and returns their statuses in that order, and the answer's
// reason if it gave one (why a MustRetry, say).
func (n *Node) share(ctx context.Context, req lease.Request, names []string, places []int, p int, forwarded bool) ([]lease.Status, string, error) {
	sub := req
	sub.Resource, sub.Also = names[places[0]], nil
	for _, j := range places[1:] {
		sub.Also = append(sub.Also, names[j])
	}
	c, why := sub.Check() // a share of a checked batch is well formed
	if why != "" {
		return fill(len(places), lease.InvalidInput), why, nil
	}
	if _, ok := n.leadership.Serving(p); !ok {
		_, r, err := n.forward(ctx, c, p, forwarded)
		if err != nil {
			return nil, "", err
		}
		return eachOf(r, len(places)), r.Reason, nil
	}
	resp, err := n.ring.Do(ctx, actors.Request{Request: sub, Partition: p})
	switch {
	case errors.Is(err, actors.ErrClosed):
		return fill(len(places), lease.Errored), "", nil // in flight: it may have applied
	case err != nil:
		return nil, "", err
	}
	if resp.Each == nil {
		return fill(len(places), resp.Status), resp.Reason, nil
	}
	return resp.Each, resp.Reason, nil
}

// eachOf is the statuses of a share's n names from r, the answer of a
// batch or of one name: a status for all of them when r has none each
// (a refusal of the whole share, or the share of one name).
func eachOf(r lease.Result, n int) []lease.Status {
	if len(r.Each) == n {
		return r.Each
	}
	if len(r.Each) != 0 { // not an answer to this share
		return fill(n, lease.Errored)
	}
	return fill(n, r.Status)
}

func fill(n int, s lease.Status) []lease.Status {
	out := make([]lease.Status, n)
	for i := range out {
		out[i] = s
	}
	return out
}
