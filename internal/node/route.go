package node

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/kahunago/kahuna/actors"
	"github.com/kahunago/kahuna/internal/backoff"
	"github.com/kahunago/kahuna/lease"
	"github.com/kahunago/kahuna/partition"
	"github.com/kahunago/kahuna/transport"
)

// localCall is the edge of a call made on the forwarding Locker's
// methods (local): it checks req (Request.Check) and runs it as a call
// that already took its hop.
func (n *Node) localCall(ctx context.Context, req lease.Request) (lease.LockInfo, lease.Result, error) {
	c, reason := req.Check()
	if reason != "" {
		return lease.LockInfo{}, n.refuse(ctx, req, reason, true), nil
	}
	return n.do(ctx, c, true)
}

// refuse answers a request that failed Request.Check: InvalidInput with
// the reason. It changes nothing and is reported as any other request.
func (n *Node) refuse(ctx context.Context, req lease.Request, reason string, forwarded bool) lease.Result {
	r := lease.Result{Status: lease.InvalidInput, Reason: reason}
	t := n.startRequest(ctx, partition.Of(req.Resource, n.cfg.Partitions), forwarded)
	n.endRequest(ctx, &t, req, r, nil)
	return r
}

// do runs one checked request: here if this node serves the resource's
// partition, else forwarded to the partition's leader, at most once (hop).
// forwarded marks a request that already took its hop.
func (n *Node) do(ctx context.Context, c lease.Checked, forwarded bool) (_ lease.LockInfo, r lease.Result, err error) {
	req := c.Request()
	p := partition.Of(req.Resource, n.cfg.Partitions) // a batch's is its first name's
	t := n.startRequest(ctx, p, forwarded)            // node_stats.go: metrics and the debug line
	defer func() { n.endRequest(ctx, &t, req, r, err) }()
	if err := n.waitUnpaused(ctx); err != nil {
		return lease.LockInfo{}, lease.Result{}, err
	}
	if !n.enter() {
		return lease.LockInfo{}, lease.Result{}, errClosedNotApplied
	}
	defer n.exit()
	if req.IsBatch() {
		r, err = n.doBatch(ctx, c, forwarded)
		return lease.LockInfo{}, r, err
	}
	if _, ok := n.leadership.Serving(p); !ok {
		if !forwarded {
			t.to, _ = n.leadership.LeaderOf(p) // for the trace only
		}
		if req.Wait != 0 {
			r, err = n.waitRemote(ctx, c, p, forwarded)
			return lease.LockInfo{}, r, err
		}
		return n.forward(ctx, c, p, forwarded)
	}
	if req.Op == lease.TryLock && req.Durability == lease.Persistent {
		// Holders may still extend and release; no new grant may grow a
		// disk that is short of space.
		if why, full := n.noSpace(); full {
			return lease.LockInfo{}, lease.Result{Status: lease.MustRetry, Reason: why}, nil
		}
	}
	areq := actors.Request{Request: req, Partition: p}
	if req.Wait != 0 {
		// A waiter stops waiting when the node closes (Close calls
		// StopWaiting), so Close is not held up by it.
		resp, err := n.ring.Do(ctx, areq)
		if err != nil {
			return lease.LockInfo{}, lease.Result{}, callErr(ctx, req, err)
		}
		return lease.LockInfo{}, resultOf(resp), nil
	}
	// The actor checks again when it decides: every answer, reads
	// included, is given only under a live leader lease (partition.Leadership).
	resp, err := n.ring.Do(ctx, areq)
	if err != nil {
		return lease.LockInfo{}, lease.Result{}, callErr(ctx, req, err)
	}
	if resp.Status != lease.Got {
		return lease.LockInfo{}, resultOf(resp), nil
	}
	info := lease.LockInfo{
		Owner:        append([]byte(nil), resp.Owner...),
		Expires:      time.UnixMilli(resp.Expires.UnixMilli()),
		FencingToken: resp.Token,
		Holders:      resp.Holders, // copied by HoldersOf
	}
	for i := range info.Holders { // millisecond precision, as over the wire
		h := &info.Holders[i]
		h.Expires = time.UnixMilli(h.Expires.UnixMilli())
	}
	return info, lease.Result{Status: lease.Got, FencingToken: resp.Token}, nil
}

// callErr is the node's error for err, which the lock actors answered
// req with on ctx: ErrClosed when they closed with req in flight (it may
// have applied), or when a wait ended with ctx still live (StopWaiting:
// it may have been granted as it left); else err, ctx's own.
func callErr(ctx context.Context, req lease.Request, err error) error {
	var left *actors.LeftError
	switch {
	case errors.As(err, &left):
		return left.Err // withdrawn by its caller (DoAsync): the caller's reason
	case errors.Is(err, actors.ErrClosed) || req.Wait != 0 && ctx.Err() == nil:
		return ErrClosed
	}
	return err
}

// resultOf is the lock actor's answer as a Locker's Result (Waited is
// zero for a call that did not wait).
func resultOf(resp actors.Response) lease.Result {
	return lease.Result{Status: resp.Status, FencingToken: resp.Token, Waited: resp.Waited, Grants: resp.Grants, Free: resp.Free, Reason: resp.Reason}
}

// hop is the one rule of forwarding, for lock calls, waits and watches:
// a request this node does not serve goes to partition p's leader, once.
// It returns the leader's forwarding client (peers.get: it speaks the
// node-to-node stream, whose server never forwards again), or why there
// is none: the request already took its hop (two nodes with different
// views must not bounce it), no leader is known (an election, or this
// node taking over), or no client to it. Nothing was sent then: the
// caller answers MustRetry.
func (n *Node) hop(ctx context.Context, p int, forwarded bool) (peer lease.Locker, leader uint64, why string) {
	if forwarded {
		return nil, 0, "not the partition leader"
	}
	leader, self := n.leadership.LeaderOf(p)
	if leader == 0 || self {
		return nil, leader, "no partition leader yet"
	}
	peer, err := n.peers.get(ctx, leader)
	if err != nil {
		n.cfg.Logger.Debug("cannot forward", "partition", p, "leader", leader, "err", err)
		return nil, leader, "partition leader not reachable"
	}
	return peer, leader, ""
}

// forward sends req, of partition p, to the partition's leader (hop). A
// hop that certainly never delivered the request (no hop, or a transport
// error that wraps lease.ErrNotApplied: not connected, the stream not
// open, the request never written) is MustRetry: nothing was applied, and
// the caller retries when the leader is known or reachable. A hop that
// broke after the request may have left (the connection lost while
// waiting for the answer) has an unknown outcome, since the leader may
// apply it anyway: Errored. A context that ended is returned as it is:
// the caller is gone.
func (n *Node) forward(ctx context.Context, req lease.Checked, p int, forwarded bool) (lease.LockInfo, lease.Result, error) {
	peer, leader, why := n.hop(ctx, p, forwarded)
	if why != "" {
		return lease.LockInfo{}, lease.Result{Status: lease.MustRetry, Reason: why}, nil
	}
	if q := req.Request(); q.Op == lease.Get && (lease.IsSemaphore(q.Resource) || lease.IsRWLock(q.Resource)) {
		return n.getShared(ctx, q.Resource, p, leader)
	}
	info, r, err := lease.Do(ctx, peer, req)
	if err != nil {
		if ctx.Err() != nil {
			return lease.LockInfo{}, lease.Result{}, ctx.Err()
		}
		if errors.Is(err, lease.ErrNotApplied) {
			n.logForwardRefused(p, leader, err)
			return lease.LockInfo{}, lease.Result{Status: lease.MustRetry, Reason: notSent}, nil
		}
		n.cfg.Logger.Warn("forward failed, outcome unknown", "partition", p, "leader", leader, "err", err)
		return lease.LockInfo{}, lease.Result{Status: lease.Errored}, nil
	}
	r.ServedFrom = n.servedFrom(leader)
	return info, r, nil
}

// getShared is a Get of the semaphore or read/write lock name, of
// partition p, which member leader leads: Kahuna's GetLock, which
// forwarding speaks, has no room for several holders, so the leader is
// asked for its listing of the name instead (the same read, made under
// its lease, that a one-name page of List makes).
func (n *Node) getShared(ctx context.Context, name string, p int, leader uint64) (lease.LockInfo, lease.Result, error) {
	page, missing := n.listRemote(ctx, leader, lease.ListRequest{Prefix: name, Limit: 1}, []int{p})
	if len(missing) > 0 {
		return lease.LockInfo{}, lease.Result{Status: lease.MustRetry}, nil
	}
	served := n.servedFrom(leader)
	if len(page.Locks) == 0 || page.Locks[0].Resource != name || len(page.Locks[0].Holders) == 0 {
		return lease.LockInfo{}, lease.Result{Status: lease.LockDoesNotExist, ServedFrom: served}, nil
	}
	l := page.Locks[0]
	info := lease.LockInfo{FencingToken: l.FencingToken, Holders: l.Holders}
	for _, h := range l.Holders {
		if h.Expires.After(info.Expires) {
			info.Expires = h.Expires
		}
	}
	return info, lease.Result{Status: lease.Got, FencingToken: l.FencingToken, ServedFrom: served}, nil
}

// servedFrom is the ServedFrom of an answer forwarded to member id: its
// client URL (Member.Endpoint, from --initial-cluster-endpoints), as
// Kahuna answers, so a client that upgrades to the leader's URL can dial
// it. An answer served here has none ("").
func (n *Node) servedFrom(id uint64) string {
	if n.book == nil {
		return "" // a Node assembled by a test
	}
	m, _ := n.book.Get(id)
	return m.Endpoint
}

// waitRemote runs a waiting lock (Wait != 0) of partition p, which
// another node leads: one native ForwardLock to the leader (hop), which
// waits in the resource's queue there. Its answer is the leader's: Locked
// with Waited, Busy when the wait ended, MustRetry when the partition
// moved while it waited (the leader flushes its queue; the caller retries
// and finds the new leader). Its errors are classified as forward's
// (MustRetry when the request certainly never reached the leader, Errored
// when the hop broke after it was sent). A leader that does not offer the
// native service (an older member) is polled with TryLocks instead.
func (n *Node) waitRemote(ctx context.Context, req lease.Checked, p int, forwarded bool) (lease.Result, error) {
	peer, leader, why := n.hop(ctx, p, forwarded)
	if why != "" {
		return lease.Result{Status: lease.MustRetry, Reason: why}, nil
	}
	if _, ok := peer.(lease.WaitLocker); !ok {
		return n.pollRemote(ctx, req, p)
	}
	// A forwarded waiter stops waiting when this node closes.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(n.life, cancel)()
	_, r, err := lease.Do(wctx, peer, req)
	switch {
	case errors.Is(err, transport.ErrNoNative):
		return n.pollRemote(ctx, req, p)
	case err != nil && ctx.Err() != nil:
		return lease.Result{}, ctx.Err()
	case err != nil && n.life.Err() != nil:
		return lease.Result{}, ErrClosed // it may have been granted as it left
	case errors.Is(err, lease.ErrNotApplied):
		n.logForwardRefused(p, leader, err)
		return lease.Result{Status: lease.MustRetry, Reason: notSent}, nil
	case err != nil:
		n.cfg.Logger.Warn("forwarded wait failed, outcome unknown", "partition", p, "leader", leader, "err", err)
		return lease.Result{Status: lease.Errored}, nil
	}
	r.ServedFrom = n.servedFrom(leader)
	return r, nil
}

// pollRemote is waitRemote against a leader without the native service:
// it polls with TryLocks (backoff.PollLock) until one is granted, the wait (or ctx)
// ends, or the leader answers anything but Busy.
func (n *Node) pollRemote(ctx context.Context, req lease.Checked, p int) (lease.Result, error) {
	try := req.NoWait()
	return backoff.PollLock(ctx, n.life, errClosedNotApplied, req.Request().Wait, func(ctx context.Context) (lease.Result, error) {
		_, r, err := n.forward(ctx, try, p, false)
		return r, err
	})
}

// local is the Locker a node offers its peers on the forwarding stream: it
// serves only partitions this node leads and never forwards again. The
// wire server checks what it serves and hands it over whole (Do); the
// Locker methods check their calls (localCall).
type local struct {
	lease.LockerFunc
	n *Node
}

// Do implements lease.Doer.
func (l local) Do(ctx context.Context, req lease.Checked) (lease.LockInfo, lease.Result, error) {
	return l.n.do(ctx, req, true)
}

// DoNowEach is Node.DoNowEach for forwarded calls.
func (l local) DoNowEach(ctx context.Context, cs []lease.Checked, answers []transport.NowAnswer, later func(j int) transport.Outcome) {
	l.n.doNowEach(ctx, cs, true, answers, later)
}

// DoAsync is Node.DoAsync for a forwarded call.
func (l local) DoAsync(ctx context.Context, req lease.Checked, out transport.Outcome) (transport.Withdrawer, bool) {
	return l.n.doAsync(ctx, req, true, out)
}

// WatchLock is the forwarded form of Node.WatchLock: it watches only a
// partition this node leads (MustRetry otherwise).
func (l local) WatchLock(ctx context.Context, resource string, from uint64, send func(transport.WatchEvent) error) error {
	return l.n.watch(ctx, resource, from, send, true)
}

// notSent is the reason of a MustRetry whose hop to the partition's
// leader certainly never delivered the request (not connected, the stream
// not open, refused before it was read).
const notSent = "not sent on to the partition leader (connection not ready); nothing applied"

// logForwardRefused logs a forward that was certainly not applied: at
// debug when it simply was not sent (no connection yet), at error when the
// leader refused this node's cluster secret, a misconfiguration the
// caller's MustRetry would otherwise hide.
func (n *Node) logForwardRefused(p int, leader uint64, err error) {
	if errors.Is(err, lease.ErrUnauthenticated) {
		n.cfg.Logger.Error("the leader refused this node's cluster secret: check --peer-token-file on every member", "partition", p, "leader", leader, "err", err)
		return
	}
	n.cfg.Logger.Debug("forward not sent", "partition", p, "leader", leader, "err", err)
}

// DoAsync runs c as Do does and hands the outcome to out, with no
// goroutine waiting for it (actors.Ring.DoAsync), when this node serves
// c's partition and c is a TryLock (waiting or not), Extend or Unlock of
// one lock. Otherwise it does nothing and reports false: run c with Do.
// out runs on the goroutine that has the outcome and must not block.
// The Withdrawer withdraws the started call as the end of ctx would end
// it, out then getting the error it is given (actors.Pending.Withdraw).
func (n *Node) DoAsync(ctx context.Context, c lease.Checked, out transport.Outcome) (transport.Withdrawer, bool) {
	return n.doAsync(ctx, c, false, out)
}

func (n *Node) doAsync(ctx context.Context, c lease.Checked, forwarded bool, out transport.Outcome) (transport.Withdrawer, bool) {
	req := c.Request()
	switch {
	case req.Op == lease.Get, req.Also != nil, n.paused.Load() != nil:
		return nil, false
	}
	p := partition.Of(req.Resource, n.cfg.Partitions)
	if _, ok := n.leadership.Serving(p); !ok {
		return nil, false // forwarded (once), or answered MustRetry, by do
	}
	if req.Op == lease.TryLock && req.Durability == lease.Persistent {
		if _, full := n.noSpace(); full {
			return nil, false
		}
	}
	if !n.enter() {
		return nil, false
	}
	a := &asyncRequest{n: n, ctx: ctx, req: req, t: n.startRequest(ctx, p, forwarded), out: out}
	return n.ring.DoAsync(ctx, actors.Request{Request: req, Partition: p}, a), true
}

// DoNowEach runs the ephemeral requests of cs that partitions this node
// serves as Do does when their lock actors answer them at once, on this
// goroutine, with nothing kept for later: answers[j].Now says cs[j] is
// answered, by answers[j].Res. When an answer must wait (its actor busy
// elsewhere, its record's read, a write of a lock granted persistently),
// the request goes on without the caller, as DoAsync's would:
// answers[j].Taken, and the Outcome later(j) makes (at most once, before
// DoNowEach returns) gets its outcome. Neither: nothing was started (a
// Get, a wait, a persistent request, a partition led elsewhere, a raise
// of the token window to wait for first, the node paused or closing), and
// the caller runs cs[j] another way.
//
// A server's reader so starts a message's requests without being held by
// one; each actor decides its share of them in one step, and one answered
// at once allocates nothing (DoAsync keeps three allocations for an
// answer that might come later).
func (n *Node) DoNowEach(ctx context.Context, cs []lease.Checked, answers []transport.NowAnswer, later func(j int) transport.Outcome) {
	n.doNowEach(ctx, cs, false, answers, later)
}

// nowBatch is doNowEach's room for the requests it starts.
type nowBatch struct {
	reqs []actors.Request
	at   []int // each one's place in cs
	out  []actors.NowAnswer
}

var nowBatches = sync.Pool{New: func() any { return new(nowBatch) }}

func (n *Node) doNowEach(ctx context.Context, cs []lease.Checked, forwarded bool, answers []transport.NowAnswer, later func(j int) transport.Outcome) {
	answers = answers[:len(cs)]
	clear(answers)
	if n.paused.Load() != nil {
		return
	}
	b := nowBatches.Get().(*nowBatch)
	defer func() {
		clear(b.reqs)
		b.reqs, b.at = b.reqs[:0], b.at[:0]
		nowBatches.Put(b)
	}()
	for j := range cs {
		req := cs[j].Request()
		switch {
		case req.Op == lease.Get, req.Also != nil, req.Wait != 0, req.Durability == lease.Persistent:
			continue
		}
		p := partition.Of(req.Resource, n.cfg.Partitions)
		if _, ok := n.leadership.Serving(p); !ok || !n.enter() {
			continue
		}
		b.reqs = append(b.reqs, actors.Request{Request: req, Partition: p})
		b.at = append(b.at, j)
	}
	if len(b.reqs) == 0 {
		return
	}
	// One trace start and end for all: their answers leave together.
	t := n.startRequest(ctx, 0, forwarded)
	b.out = slices.Grow(b.out[:0], len(b.reqs))[:len(b.reqs)]
	n.ring.DoNowEach(b.reqs, b.out)
	var end time.Time
	if !t.start.IsZero() {
		end = time.Now()
	}
	for k, o := range b.out {
		j, req := b.at[k], b.reqs[k].Request
		t.partition = b.reqs[k].Partition
		switch {
		case o.Now:
			r := resultOf(o.Resp)
			n.endRequestAt(ctx, &t, req, r, nil, end)
			n.exit()
			answers[j] = transport.NowAnswer{Res: r, Now: true}
		case o.Later.Started():
			n.ring.Finish(ctx, o.Later, &asyncRequest{n: n, ctx: ctx, req: req, t: t, out: later(j)})
			answers[j].Taken = true
		default:
			n.exit()
		}
	}
	clear(b.out)
}

// asyncRequest is a request doAsync started, until its answer: one
// allocation for what the answer needs (a closure over them moved each to
// the heap on its own), which is also its actors.Answerer.
type asyncRequest struct {
	n   *Node
	ctx context.Context
	req lease.Request
	t   requestTrace
	out transport.Outcome
}

// Answer implements actors.Answerer.
func (a *asyncRequest) Answer(resp actors.Response, err error) {
	var r lease.Result
	if err != nil {
		err = callErr(a.ctx, a.req, err)
	} else {
		r = resultOf(resp)
	}
	a.n.endRequest(a.ctx, &a.t, a.req, r, err)
	a.n.exit()
	a.out.Outcome(lease.LockInfo{}, r, err)
}
