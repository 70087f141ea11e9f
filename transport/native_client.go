package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pauses "github.com/kahunago/kahuna/internal/backoff"
	"github.com/kahunago/kahuna/lease"
	v1 "github.com/kahunago/kahuna/transport/kahunav1pb"
)

// ErrNoNative is returned by Lock and WatchLock when the servers do not
// offer the native service (they answered UNIMPLEMENTED: plain Kahuna
// servers). Nothing was applied. The Client remembers it: later calls
// fail at once, and a caller falls back to TryLock (polling).
var ErrNoNative = fmt.Errorf("transport: the server does not offer kahuna.v1 (a plain Kahuna server) (%w)", lease.ErrNotApplied)

const (
	nativeUnknown int32 = iota
	nativeYes
	nativeNo
)

var (
	_ lease.WaitLocker = (*Client)(nil)
	_ Watcher          = (*Client)(nil)
)

// Native reports whether the servers offer the native service: true once
// one has answered a native call, false once one answered UNIMPLEMENTED
// (known reports whether either has happened yet).
func (c *Client) Native() (native, known bool) {
	switch c.native.Load() {
	case nativeYes:
		return true, true
	case nativeNo:
		return false, true
	}
	return false, false
}

// kahuna returns a native client on the next endpoint's connection.
func (c *Client) kahuna() v1.KahunaClient {
	ep := c.endpoints[c.next.Add(1)%uint32(len(c.endpoints))]
	return v1.NewKahunaClient(ep.pick().conn)
}

// noNative records an UNIMPLEMENTED answer.
func (c *Client) noNative(err error) bool {
	if status.Code(err) != codes.Unimplemented {
		return false
	}
	c.native.Store(nativeNo)
	return true
}

// Lock implements lease.WaitLocker with the native service's Lock: one
// call that waits on the server, in the resource's FIFO queue, for up to
// wait (lease.WaitForever: until ctx ends), sent on a LockStream (the
// unary Lock against a server without one). A client that gives up (ctx
// ends) withdraws it and returns once the server has answered the
// withdrawal: with the grant if it came first, else ctx.Err(). MustRetry
// answers are retried as TryLock's are, with what is left of the wait, for
// the longer of the wait and the MustRetry budget (WaitForever: until ctx
// ends); a forwarding client (WithForwarding) sends on ForwardLockStream
// (ForwardLock) and returns MustRetry as it is. Waited counts from this call. Against a
// plain Kahuna server it returns ErrNoNative. An error other than ctx's
// or ErrNoNative leaves the outcome unknown.
func (c *Client) Lock(ctx context.Context, resource string, owner []byte, ttl, wait time.Duration, d lease.Durability) (lease.Result, error) {
	r := lease.Request{Op: lease.TryLock, Resource: resource, Owner: owner, TTL: ttl, Durability: d, Wait: wait}
	if why := checkSend(r); why != "" {
		return lease.Result{Status: lease.InvalidInput, Reason: why}, nil
	}
	return c.wait(ctx, r)
}

// wait sends the waiting lock r (checked: see Lock).
func (c *Client) wait(ctx context.Context, r lease.Request) (lease.Result, error) {
	resource, owner, ttl, wait, d := r.Resource, r.Owner, r.TTL, r.Wait, r.Durability
	if c.native.Load() == nativeNo {
		return lease.Result{}, ErrNoNative
	}
	if err := ctx.Err(); err != nil {
		return lease.Result{}, err
	}
	start := time.Now()
	retryUntil := start.Add(max(wait, c.budget))
	var bo backoff
	for {
		sent := time.Now()
		left := wait
		if wait > 0 {
			left = max(wait-sent.Sub(start), 0)
		}
		req := &v1.LockRequest{Resource: resource, Owner: owner, TtlMs: int64(ttlToMs(ttl)), WaitMs: waitToMs(left), Durability: v1.Durability(d),
			Permits: int32(r.Permits), Limit: int32(r.Limit), Shared: r.Shared, Resize: r.Resize, NewOwner: r.NewOwner, Also: r.Also} // checked: at most lease.MaxPermits
		switch {
		case r.IsBatch() && r.Op == lease.Extend:
			req.Op = v1.LockOp_LOCK_OP_EXTEND
		case r.IsBatch():
			req.Op = v1.LockOp_LOCK_OP_UNLOCK
		}
		var (
			resp *v1.LockResponse
			err  error
		)
		resp, err = c.lock(ctx, req)
		switch {
		case err != nil && ctx.Err() != nil:
			return lease.Result{}, ctx.Err()
		case err != nil && c.noNative(err):
			return lease.Result{}, ErrNoNative
		case err != nil && unauthenticated("Lock", err) != nil:
			return lease.Result{}, unauthenticated("Lock", err)
		case err != nil:
			return lease.Result{}, fmt.Errorf("transport: Lock: %w", err)
		}
		c.native.Store(nativeYes)
		res := lease.Result{
			Status:       lease.Status(resp.GetStatus()),
			FencingToken: resp.GetFencingToken(),
			ServedFrom:   resp.GetServedFrom(),
			Reason:       resp.GetReason(),
		}
		for _, g := range resp.GetGrants() {
			res.Grants = append(res.Grants, lease.Grant{Slot: int(g.GetSlot()), Token: g.GetFencingToken()})
		}
		res.Free = int(resp.GetPermitsFree())
		for _, st := range resp.GetEach() {
			res.Each = append(res.Each, lease.Status(st))
		}
		if res.Status == lease.Locked && (resp.GetWaitedMs() > 0 || sent != start) {
			res.Waited = sent.Sub(start) + time.Duration(resp.GetWaitedMs())*time.Millisecond
		}
		if res.Status != lease.MustRetry || !c.retry || r.IsBatch() {
			return res, nil // a batch's names are retried by its caller, each as its answer says
		}
		pause := bo.next()
		if wait != lease.WaitForever {
			left := time.Until(retryUntil)
			if left <= 0 {
				return res, nil
			}
			pause = min(pause, left)
		}
		if err := pauses.Sleep(ctx, pause); err != nil {
			return lease.Result{}, err
		}
	}
}

// lock sends one Lock: on its LockStream, or as a unary call when the
// stream is not offered or the Lock certainly did not reach the server on
// it. It goes to the endpoint that last served its partition key on
// Kahuna's wire (routes.go: the native answers name nodes by ID, not by
// URL, so they teach no routes), else to the next one; a routed endpoint
// that fails or answers MustRetry loses the route.
func (c *Client) lock(ctx context.Context, req *v1.LockRequest) (*v1.LockResponse, error) {
	var key string
	ep := c.endpoints[c.next.Add(1)%uint32(len(c.endpoints))]
	if len(c.endpoints) > 1 {
		key = lease.PartitionKey(req.GetResource())
		if routed := c.routes.get(key); routed != nil {
			ep = routed
		} else {
			key = ""
		}
	}
	bs := ep.pick()
	resp, err := bs.locks.do(ctx, req)
	if err != nil && (errors.Is(err, errNoLockStream) || errors.Is(err, errUnsent)) {
		if c.retry {
			resp, err = v1.NewKahunaClient(bs.conn).Lock(ctx, req)
		} else {
			resp, err = v1.NewKahunaClient(bs.conn).ForwardLock(ctx, req)
		}
	}
	if key != "" && ctx.Err() == nil && (err != nil || lease.Status(resp.GetStatus()) == lease.MustRetry) {
		c.routes.learn(key, nil)
	}
	return resp, err
}

// waitToMs is a wait on the wire: -1 for WaitForever, else milliseconds
// rounded up (a positive wait does not become a TryLock).
func waitToMs(wait time.Duration) int64 {
	if wait == lease.WaitForever {
		return -1
	}
	return int64((wait + time.Millisecond - 1) / time.Millisecond)
}

// WatchLock implements Watcher with the native service's Watch stream (a
// forwarding client calls ForwardWatch). It returns ErrNoNative against a
// plain Kahuna server, and a *WatchError with MustRetry when the stream
// ends or breaks (watch again from the last revision).
func (c *Client) WatchLock(ctx context.Context, resource string, from uint64, send func(WatchEvent) error) error {
	if why := ValidWatch(resource); why != "" {
		return &WatchError{Status: lease.InvalidInput, Reason: why}
	}
	if c.native.Load() == nativeNo {
		return ErrNoNative
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream when send fails
	req := &v1.WatchRequest{Resource: resource, FromRevision: from}
	var (
		stream interface {
			Recv() (*v1.WatchEvent, error)
		}
		err error
	)
	if c.retry {
		stream, err = c.kahuna().Watch(ctx, req)
	} else {
		stream, err = c.kahuna().ForwardWatch(ctx, req)
	}
	for err == nil {
		var m *v1.WatchEvent
		if m, err = stream.Recv(); err != nil {
			break
		}
		c.native.Store(nativeYes)
		if err := send(eventFromPB(m)); err != nil {
			return err
		}
	}
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, io.EOF):
		return &WatchError{Status: lease.MustRetry, Reason: "stream ended"}
	case c.noNative(err):
		return ErrNoNative
	}
	return watchErrorOf(err)
}
