package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kahunago/kahuna/actors"
	"github.com/kahunago/kahuna/admin"
	"github.com/kahunago/kahuna/lease"
)

// listTimeout bounds one member's share of a listing asked of it.
const listTimeout = 10 * time.Second

// List returns a page of the live locks whose name starts with
// req.Prefix, after req.After, in name order, gathered from each
// partition's leader: this node for the partitions it serves, the
// others' leaders through their admin API (admin.LocksPath). Each
// partition's share is read by its leader (its memory holds the live
// ephemeral locks) while it serves the partition; the shares are read
// one by one, so a page is no snapshot of the cluster. A partition with
// no leader that answers fails the whole list with MustRetry: a page
// without it would look complete.
func (n *Node) List(ctx context.Context, req lease.ListRequest) (lease.LockPage, error) {
	if why := req.Check(); why != "" {
		return lease.LockPage{}, &lease.ListError{Status: lease.InvalidInput, Reason: why}
	}
	if !n.enter() {
		return lease.LockPage{}, errClosedNotApplied
	}
	defer n.exit()
	local, notServed, err := n.listLocal(ctx, req, nil)
	if err != nil {
		return lease.LockPage{}, err
	}
	byLeader := map[uint64][]int{}
	var missing []int
	for _, p := range notServed {
		leader, self := n.leadership.LeaderOf(p)
		if leader == 0 || self {
			missing = append(missing, p) // electing, or this node is not serving it yet
			continue
		}
		byLeader[leader] = append(byLeader[leader], p)
	}
	type share struct {
		page    lease.LockPage
		missing []int
	}
	shares := make(chan share, len(byLeader))
	for leader, parts := range byLeader {
		go func() {
			page, missing := n.listRemote(ctx, leader, req, parts)
			shares <- share{page, missing}
		}()
	}
	pages := []lease.LockPage{local}
	for range byLeader {
		s := <-shares
		pages = append(pages, s.page)
		missing = append(missing, s.missing...)
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return lease.LockPage{}, &lease.ListError{Status: lease.MustRetry, Reason: fmt.Sprintf("no leader answered for partitions %v (electing or moving): list again", missing)}
	}
	return lease.MergePages(req.PageSize(), pages...), nil
}

// listRemote asks leader for its share of a listing, of partitions parts;
// missing is what it did not list (it does not serve them, or did not
// answer).
func (n *Node) listRemote(ctx context.Context, leader uint64, req lease.ListRequest, parts []int) (page lease.LockPage, missing []int) {
	m, ok := n.book.Get(leader)
	if !ok || m.Endpoint == "" {
		return lease.LockPage{}, parts
	}
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	v, err := n.admin.ListLocks(ctx, m.Endpoint, admin.LocksRequest{Prefix: req.Prefix, After: req.After, Limit: req.Limit, Partitions: parts})
	if err != nil {
		n.cfg.Logger.Info("list: a partition leader did not answer", "leader", leader, "partitions", parts, "err", err)
		return lease.LockPage{}, parts
	}
	page.Next = v.Next
	for _, l := range v.Locks {
		listed := lease.ListedLock{Resource: l.Resource, Owner: l.Owner, FencingToken: l.FencingToken,
			Expires: time.UnixMilli(l.ExpiresMs), Durability: lease.Durability(l.Durability)}
		for _, h := range l.Holders {
			listed.Holders = append(listed.Holders, lease.Holder{Slot: h.Slot, Owner: h.Owner, FencingToken: h.FencingToken, Expires: time.UnixMilli(h.ExpiresMs)})
		}
		page.Locks = append(page.Locks, listed)
	}
	return page, v.NotServed
}

// listLocal lists the partitions of parts (nil: all) that this node
// serves, and returns the others it was asked for.
func (n *Node) listLocal(ctx context.Context, req lease.ListRequest, parts []int) (lease.LockPage, []int, error) {
	if parts == nil {
		parts = make([]int, n.cfg.Partitions)
		for p := range parts {
			parts[p] = p
		}
	}
	limit := req.PageSize()
	var (
		pages     []lease.LockPage
		notServed []int
	)
	for _, p := range parts {
		page, served, err := n.listPartition(ctx, p, req, limit)
		if err != nil {
			return lease.LockPage{}, nil, err
		}
		if !served {
			notServed = append(notServed, p)
			continue
		}
		pages = append(pages, page)
	}
	return lease.MergePages(limit, pages...), notServed, nil
}

// listPartition lists partition p if this node serves it, in the same
// term before and after the reads: its live ephemeral locks are in the
// actors' memory, its persistent ones in the store (and, when cached, in
// memory too, which then wins: its lease is measured on the monotonic
// clock, the record's on the wall clock).
func (n *Node) listPartition(ctx context.Context, p int, req lease.ListRequest, limit int) (page lease.LockPage, served bool, err error) {
	if p < 0 || p >= n.cfg.Partitions {
		return lease.LockPage{}, false, nil
	}
	term, ok := n.leadership.Serving(p)
	if !ok {
		return lease.LockPage{}, false, nil
	}
	// One more than the page of each source says whether there are more.
	cached, err := n.ring.Live(ctx, p, req, limit+1)
	if errors.Is(err, actors.ErrClosed) {
		err = ErrClosed
	}
	if err != nil {
		return lease.LockPage{}, false, fmt.Errorf("kahuna: list partition %d: %w", p, err)
	}
	nowMs := n.cfg.Clock().UnixMilli()
	recs, err := n.backend.Held(p, req.Prefix, req.After, nowMs, limit+1)
	if err != nil {
		return lease.LockPage{}, false, fmt.Errorf("kahuna: list partition %d: %w", p, err)
	}
	if again, ok := n.leadership.Serving(p); !ok || again != term {
		return lease.LockPage{}, false, nil // what was read may be another leader's
	}
	stored := make([]lease.ListedLock, len(recs))
	for i, r := range recs {
		stored[i] = lease.ListedLock{Resource: r.Resource, Owner: r.Owner, FencingToken: r.Token,
			Expires: time.UnixMilli(r.ExpiresMs), Durability: lease.Persistent}
		for j, s := range r.Slots {
			if s.Owner != nil && s.ExpiresMs >= nowMs {
				h := lease.Holder{Owner: s.Owner, Expires: time.UnixMilli(s.ExpiresMs), FencingToken: s.Token}
				if !r.RW {
					h.Slot = j
				}
				stored[i].Holders = append(stored[i].Holders, h)
			}
		}
	}
	return lease.MergePages(limit, lease.LockPage{Locks: cached}, lease.LockPage{Locks: stored}), true, nil
}

// listLocks serves admin.LocksPath: this node's share of a listing.
func (n *Node) listLocks(ctx context.Context, r admin.LocksRequest) (admin.LocksView, error) {
	req := lease.ListRequest{Prefix: r.Prefix, After: r.After, Limit: r.Limit}
	if why := req.Check(); why != "" {
		return admin.LocksView{}, fmt.Errorf("%w: %s", admin.ErrInvalidList, why)
	}
	if !n.enter() {
		return admin.LocksView{}, errClosedNotApplied
	}
	defer n.exit()
	page, notServed, err := n.listLocal(ctx, req, r.Partitions)
	if err != nil {
		return admin.LocksView{}, err
	}
	v := admin.LocksView{Node: n.cfg.NodeID, Next: page.Next, NotServed: notServed, Locks: make([]admin.Lock, len(page.Locks))}
	for i, l := range page.Locks {
		v.Locks[i] = admin.Lock{Resource: l.Resource, Owner: l.Owner, FencingToken: l.FencingToken,
			ExpiresMs: l.Expires.UnixMilli(), Durability: int32(l.Durability)}
		for _, h := range l.Holders {
			v.Locks[i].Holders = append(v.Locks[i].Holders, admin.Holder{Slot: h.Slot, Owner: h.Owner, FencingToken: h.FencingToken, ExpiresMs: h.Expires.UnixMilli()})
		}
	}
	return v, nil
}
