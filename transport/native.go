package transport

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kahunago/kahuna/lease"
	v1 "github.com/kahunago/kahuna/transport/kahunav1pb"
)

// The native service, kahuna.v1.Kahuna, next to Kahuna's Locker service on
// the same gRPC servers and behind the same token checks: a blocking Lock
// that waits in the resource's FIFO queue on the server, and a Watch
// stream of a lock's changes. Its node-to-node forms (ForwardLock,
// ForwardLockStream, ForwardWatch) are served by ServerOptions.Forwarded and guarded by the
// cluster secret, like BatchServerLockRequests. A Server offers the
// service when its Locker is a lease.WaitLocker (Watch, when it is also a
// Watcher); a client that gets UNIMPLEMENTED talks to a plain Kahuna
// server and falls back to TryLock.

// EventKind says what changed in a watched lock.
type EventKind uint8

const (
	EventAcquired EventKind = iota + 1 // granted to Owner, with a new token
	EventExtended                      // Owner's lease now ends at Expires
	EventReleased                      // unlocked (or never locked, for a Current event)
	EventExpired                       // Owner's lease ended without a release
)

func (k EventKind) String() string {
	switch k {
	case EventAcquired:
		return "acquired"
	case EventExtended:
		return "extended"
	case EventReleased:
		return "released"
	case EventExpired:
		return "expired"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// WatchEvent is one change of a watched lock.
type WatchEvent struct {
	Kind         EventKind
	Owner        []byte    // the holder (Acquired, Extended, Expired)
	FencingToken int64     // of the current or last grant
	Expires      time.Time // end of the lease, wall clock, millisecond precision
	// Revision counts the lock's writes: every grant, extension and
	// release moves it on by one; an Expired event carries the revision of
	// the lease that ended. Watch again from the last one seen.
	Revision   uint64
	Durability lease.Durability // how the lock was granted
	// Current marks the first event of a watch: the state it started
	// from, not a change.
	Current    bool
	ServedFrom string // the node that served the watch, where known
	// Holders, for a semaphore or a read/write lock, are its live holders
	// once the change is made: Owner is then empty, Expires the last
	// holder's, FencingToken the highest granted (a read/write lock's
	// write epoch). A grant, extension or release of one holder is
	// Acquired, Extended or Released; the lapse of one or more, Expired.
	Holders []lease.Holder
}

// Watcher is a Locker whose locks can be watched (the embedded node, and
// Client against a server that offers the native service).
//
// WatchLock calls send with resource's events in order, beginning with its
// current state unless from is the revision of that state and the state
// is not an expiry (the watcher has seen it). It returns when ctx ends
// (ctx.Err()), when send fails (its error), or when the watch ends with a
// *WatchError: MustRetry when the lock is no longer served where it was
// watched (its partition moved, the node shuts down, the watcher fell
// behind): watch again from the last revision seen; InvalidInput (with a
// reason) for a bad resource name; Busy when the lock has too many
// watchers. send is called on WatchLock's goroutine, one event at a time;
// while it blocks, events queue (a few dozen), then the watch ends
// (MustRetry). An event's Owner is never modified: send may keep it.
type Watcher interface {
	WatchLock(ctx context.Context, resource string, from uint64, send func(WatchEvent) error) error
}

// WatchError ends or refuses a watch with a lock status.
type WatchError struct {
	Status lease.Status // MustRetry, InvalidInput or Busy
	Reason string
}

func (e *WatchError) Error() string {
	if e.Reason == "" {
		return "watch: " + e.Status.String()
	}
	return "watch: " + e.Status.String() + ": " + e.Reason
}

// ValidWatch says what is wrong with a watch of resource ("" if nothing).
func ValidWatch(resource string) string {
	switch {
	case resource == "":
		return "resource name is empty"
	case len(resource) > lease.MaxResourceBytes:
		return fmt.Sprintf("resource name is %d bytes, over the limit of %d", len(resource), lease.MaxResourceBytes)
	case !utf8.ValidString(resource):
		return "resource name is not UTF-8"
	}
	return ""
}

// nativeService implements kahuna.v1.Kahuna on a Server.
type nativeService struct {
	v1.UnimplementedKahunaServer
	s *Server
}

// registerNative offers the native services on g when the Locker waits:
// Kahuna, Sessions and Election.
func (s *Server) registerNative(g *grpc.Server) {
	if _, ok := s.locker.(lease.WaitLocker); !ok {
		return
	}
	v1.RegisterSessionsServer(g, &sessionsService{s: s})
	v1.RegisterElectionServer(g, &electionService{s: s})
	if s.noLockStream {
		v1.RegisterKahunaServer(g, &unaryOnlyNative{nativeService{s: s}})
		return
	}
	v1.RegisterKahunaServer(g, &nativeService{s: s})
}

// unaryOnlyNative is the native service of a kahuna from before
// LockStream and Batch (tests: the Client must fall back to the unary Lock
// and to Kahuna's batch stream).
type unaryOnlyNative struct{ nativeService }

func (unaryOnlyNative) LockStream(grpc.BidiStreamingServer[v1.LockStreamRequest, v1.LockStreamResponse]) error {
	return status.Error(codes.Unimplemented, "method LockStream not implemented")
}

func (unaryOnlyNative) ForwardLockStream(grpc.BidiStreamingServer[v1.LockStreamRequest, v1.LockStreamResponse]) error {
	return status.Error(codes.Unimplemented, "method ForwardLockStream not implemented")
}

func (unaryOnlyNative) Batch(grpc.BidiStreamingServer[v1.BatchRequests, v1.BatchResponses]) error {
	return status.Error(codes.Unimplemented, "method Batch not implemented")
}

func (unaryOnlyNative) ForwardBatch(grpc.BidiStreamingServer[v1.BatchRequests, v1.BatchResponses]) error {
	return status.Error(codes.Unimplemented, "method ForwardBatch not implemented")
}

func (n *nativeService) Lock(ctx context.Context, req *v1.LockRequest) (*v1.LockResponse, error) {
	return n.s.lock(ctx, n.s.locker, req)
}

func (n *nativeService) LockStream(stream grpc.BidiStreamingServer[v1.LockStreamRequest, v1.LockStreamResponse]) error {
	return n.s.lockStream(n.s.locker, stream)
}

func (n *nativeService) Batch(stream grpc.BidiStreamingServer[v1.BatchRequests, v1.BatchResponses]) error {
	return n.s.servePacked(stream, n.s.locker)
}

// ForwardBatch is served by the Forwarded Locker, as BatchServerLockRequests.
func (n *nativeService) ForwardBatch(stream grpc.BidiStreamingServer[v1.BatchRequests, v1.BatchResponses]) error {
	return n.s.servePacked(stream, n.s.forwarded)
}

func (n *nativeService) ForwardLock(ctx context.Context, req *v1.LockRequest) (*v1.LockResponse, error) {
	return n.s.lock(ctx, n.s.forwarded, req)
}

// ForwardLockStream is LockStream served by the Forwarded Locker.
func (n *nativeService) ForwardLockStream(stream grpc.BidiStreamingServer[v1.LockStreamRequest, v1.LockStreamResponse]) error {
	return n.s.lockStream(n.s.forwarded, stream)
}

func (n *nativeService) Watch(req *v1.WatchRequest, stream grpc.ServerStreamingServer[v1.WatchEvent]) error {
	return n.s.watch(n.s.locker, req, stream)
}

func (n *nativeService) ForwardWatch(req *v1.WatchRequest, stream grpc.ServerStreamingServer[v1.WatchEvent]) error {
	return n.s.watch(n.s.forwarded, req, stream)
}

// errWaitDrained ends the waits of a server shutting down: a wait so ended
// is answered, where one whose caller left is not.
var errWaitDrained = errors.New("transport: the node is shutting down")

// untilDrain is ctx, also cancelled when the server starts shutting down
// (with the cause errWaitDrained), so a waiting Lock or a Watch does not
// hold up a graceful stop.
func (s *Server) untilDrain(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-s.draining:
			cancel(errWaitDrained)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(nil) }
}

// lock serves one native Lock on l. Lock outcomes are statuses, as on
// Kahuna's service; a call error is answered by what it proves (see
// failedStatus): a wait cut short by shutdown is Errored, since a grant
// may have been made as it left.
func (s *Server) lock(ctx context.Context, l lease.Locker, req *v1.LockRequest) (*v1.LockResponse, error) {
	wctx, cancel := s.untilDrain(ctx)
	defer cancel()
	return s.lockOn(wctx, l, req)
}

// lockOn serves one Lock, waiting on wctx: the caller's call, also ended
// by shutdown (the cause errWaitDrained). It returns an error only when
// wctx ended for another cause, the caller gone: then no answer is due.
func (s *Server) lockOn(wctx context.Context, l lease.Locker, req *v1.LockRequest) (*v1.LockResponse, error) {
	wl, ok := l.(lease.WaitLocker)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this node does not wait on the server")
	}
	r, c, why := lockRequestOf(req)
	var (
		res lease.Result
		err error
	)
	if why == "" {
		res, err = s.callLock(wctx, wl, c)
	}
	return s.lockAnswer(wctx, r, why, res, err)
}

// lockAsync starts req, a Lock, on al with no goroutine waiting for its
// outcome (internal/node's DoAsync), if al takes it: answer then gets
// what lockOn would return, once, on the goroutine that has it, and must
// not block; the Withdrawer (nil if its start failed) withdraws it, with
// errWithdrawn or errWaitDrained, which lockAnswer answers as lockOn
// answers a Lock whose context ended with that cause. False: nothing was
// started (run the Lock with lockOn).
func (s *Server) lockAsync(wctx context.Context, al asyncLocker, req *v1.LockRequest, answer func(*v1.LockResponse, error)) (w Withdrawer, taken bool) {
	r, c, why := lockRequestOf(req)
	if why != "" {
		return nil, false
	}
	a := &asyncLock{s: s, ctx: wctx, r: r, answer: answer}
	var panicked error
	defer func() {
		if panicked != nil {
			w, taken = nil, true
			a.Outcome(lease.LockInfo{}, lease.Result{}, panicked)
		}
	}()
	defer s.recovered(&c, true, &panicked)
	return al.DoAsync(wctx, c, a)
}

// asyncLock is a Lock lockAsync started, until its answer, given once:
// one allocation for what the answer needs.
type asyncLock struct {
	s        *Server
	ctx      context.Context
	r        lease.Request
	answer   func(*v1.LockResponse, error)
	answered atomic.Bool
}

// Outcome implements Outcome: the Lock's answer, once.
func (a *asyncLock) Outcome(_ lease.LockInfo, res lease.Result, err error) {
	if a.answered.CompareAndSwap(false, true) {
		a.answer(a.s.lockAnswer(a.ctx, a.r, "", res, err))
	}
}

// lockRequestOf is the Lock req as a lease request, checked (c), or why
// it is refused.
func lockRequestOf(req *v1.LockRequest) (r lease.Request, c lease.Checked, why string) {
	ttl := time.Duration(req.GetTtlMs()) * time.Millisecond
	if req.GetTtlMs() > lease.MaxTTL.Milliseconds() {
		ttl = lease.MaxTTL + time.Millisecond // no overflow: still over the limit
	}
	wait := lease.WaitForever
	switch ms := req.GetWaitMs(); {
	case ms > lease.MaxWait.Milliseconds():
		wait = lease.MaxWait + time.Millisecond
	case ms >= 0:
		wait = time.Duration(ms) * time.Millisecond
	case ms < -1:
		wait = -2 // invalid
	}
	r = lease.Request{Op: lease.TryLock, Resource: req.GetResource(), Owner: req.GetOwner(), TTL: ttl,
		Durability: lease.Durability(req.GetDurability()), Wait: wait,
		Permits: int(req.GetPermits()), Limit: int(req.GetLimit()), Shared: req.GetShared(), Resize: req.GetResize()}
	if n := req.GetNewOwner(); len(n) > 0 { // a proclaim
		r.Op, r.NewOwner = lease.Extend, n
	}
	if also := req.GetAlso(); len(also) > 0 { // a lock of several names, or a batch
		r.Also = also
	}
	switch req.GetOp() {
	case v1.LockOp_LOCK_OP_LOCK:
	case v1.LockOp_LOCK_OP_EXTEND:
		r.Op = lease.Extend
	case v1.LockOp_LOCK_OP_UNLOCK:
		r.Op = lease.Unlock
	default:
		r.Op = lease.Op(255) // refused by Check below
	}
	if !lease.ValidWait(wait) {
		r.Wait = 0 // said below, in the wire's unit
	}
	c, why = r.Check()
	if why == "" && !utf8.ValidString(r.Resource) {
		why = "resource is not valid UTF-8"
	}
	if why == "" && !lease.ValidWait(wait) {
		why = fmt.Sprintf("wait_ms %d is out of range (-1: until the call's deadline, or 0 to %d)", req.GetWaitMs(), lease.MaxWait.Milliseconds())
	}
	return r, c, why
}

// lockAnswer is the answer to the Lock r, refused for why or run with
// the outcome res and err, on wctx (see lockOn), and reports it.
func (s *Server) lockAnswer(wctx context.Context, r lease.Request, why string, res lease.Result, err error) (*v1.LockResponse, error) {
	resp := &v1.LockResponse{ServedFrom: s.opts.NodeName}
	if why != "" {
		res.Status, resp.Reason = lease.InvalidInput, why
	} else {
		if err != nil {
			// Ended by shutdown, as its context's cause or as its
			// withdrawal's (lockAsync): answered. Withdrawn by a cancel
			// message, or its caller gone: no answer is due here.
			drained := errors.Is(err, errWaitDrained) || wctx.Err() != nil && context.Cause(wctx) == errWaitDrained
			switch {
			case !drained && errors.Is(err, errWithdrawn):
				return nil, err
			case !drained && wctx.Err() != nil:
				return nil, status.FromContextError(wctx.Err()).Err()
			}
			res = lease.Result{Status: failedStatus(err)}
			if !drained {
				s.log.Warn("lock request failed", "op", "Lock", "resource", r.Resource, "status", res.Status, "err", err)
			}
		}
		resp.Reason = res.Reason // why it is invalid, or which name of several is busy
	}
	resp.Status = v1.Status(res.Status)
	resp.FencingToken = res.FencingToken
	resp.WaitedMs = res.Waited.Milliseconds()
	for _, g := range res.Grants {
		resp.Grants = append(resp.Grants, &v1.Grant{Slot: int32(g.Slot), FencingToken: g.Token})
	}
	resp.PermitsFree = int32(res.Free) // at most lease.MaxPermits
	for _, st := range res.Each {
		resp.Each = append(resp.Each, v1.Status(st))
	}
	s.observe(r.Op, res.Status)
	return resp, nil
}

// callLock runs a checked Lock on wl: whole when wl is a lease.Doer, else
// through wl.Lock, the method this call is named for, whatever its wait.
func (s *Server) callLock(ctx context.Context, wl lease.WaitLocker, c lease.Checked) (res lease.Result, err error) {
	defer s.recovered(&c, true, &err)
	r := c.Request()
	if _, ok := wl.(lease.Doer); ok || r.Op != lease.TryLock {
		_, res, err = lease.Do(ctx, wl, c)
		return res, err
	}
	return wl.Lock(ctx, r.Resource, r.Owner, r.TTL, r.Wait, r.Durability)
}

// watch serves one Watch stream on l.
func (s *Server) watch(l lease.Locker, req *v1.WatchRequest, stream grpc.ServerStreamingServer[v1.WatchEvent]) error {
	w, ok := l.(Watcher)
	if !ok {
		return status.Error(codes.Unimplemented, "this node does not offer watches")
	}
	if why := ValidWatch(req.GetResource()); why != "" {
		return status.Error(codes.InvalidArgument, why)
	}
	ctx, cancel := s.untilDrain(stream.Context())
	defer cancel()
	err := w.WatchLock(ctx, req.GetResource(), req.GetFromRevision(), func(ev WatchEvent) error {
		return stream.Send(eventToPB(&ev, s.opts.NodeName))
	})
	switch {
	case stream.Context().Err() != nil:
		return status.FromContextError(stream.Context().Err()).Err()
	case ctx.Err() != nil: // draining
		return status.Error(codes.Unavailable, "node shutting down: watch again from the last revision")
	}
	return watchStatus(err)
}

// watchStatus is the gRPC status that ends a watch with err.
func watchStatus(err error) error {
	var we *WatchError
	if !errors.As(err, &we) {
		if _, ok := status.FromError(err); ok && err != nil {
			return err // a send error: the stream's own status
		}
		return status.Error(codes.Unavailable, fmt.Sprintf("watch ended (%v): watch again from the last revision", err))
	}
	switch we.Status {
	case lease.InvalidInput:
		return status.Error(codes.InvalidArgument, we.Reason)
	case lease.Busy:
		return status.Error(codes.ResourceExhausted, we.Error())
	}
	return status.Error(codes.Unavailable, we.Error()+": watch again from the last revision")
}

// watchErrorOf is the *WatchError (or other error) a client sees for a
// watch stream's status; errNoNative for UNIMPLEMENTED.
func watchErrorOf(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	switch st.Code() {
	case codes.Unimplemented:
		return ErrNoNative
	case codes.InvalidArgument:
		return &WatchError{Status: lease.InvalidInput, Reason: st.Message()}
	case codes.ResourceExhausted:
		return &WatchError{Status: lease.Busy, Reason: st.Message()}
	case codes.Unavailable:
		return &WatchError{Status: lease.MustRetry, Reason: st.Message()}
	}
	return err
}

func eventToPB(ev *WatchEvent, servedFrom string) *v1.WatchEvent {
	m := &v1.WatchEvent{
		Type:         v1.EventType(ev.Kind),
		Owner:        ev.Owner,
		FencingToken: ev.FencingToken,
		Revision:     ev.Revision,
		Current:      ev.Current,
		Durability:   v1.Durability(ev.Durability),
		ServedFrom:   ev.ServedFrom,
	}
	if m.ServedFrom == "" {
		m.ServedFrom = servedFrom
	}
	if !ev.Expires.IsZero() {
		m.ExpiresMs = ev.Expires.UnixMilli()
	}
	for _, h := range ev.Holders {
		m.Holders = append(m.Holders, &v1.Holder{Slot: int32(h.Slot), Owner: h.Owner, FencingToken: h.FencingToken, ExpiresMs: h.Expires.UnixMilli()}) // a slot is below lease.MaxPermits
	}
	return m
}

func eventFromPB(m *v1.WatchEvent) WatchEvent {
	ev := WatchEvent{
		Kind:         EventKind(m.GetType()),
		Owner:        m.GetOwner(),
		FencingToken: m.GetFencingToken(),
		Revision:     m.GetRevision(),
		Current:      m.GetCurrent(),
		Durability:   lease.Durability(m.GetDurability()),
		ServedFrom:   m.GetServedFrom(),
	}
	if ms := m.GetExpiresMs(); ms != 0 {
		ev.Expires = time.UnixMilli(ms)
	}
	for _, h := range m.GetHolders() {
		ev.Holders = append(ev.Holders, lease.Holder{Slot: int(h.GetSlot()), Owner: h.GetOwner(), FencingToken: h.GetFencingToken(), Expires: time.UnixMilli(h.GetExpiresMs())})
	}
	return ev
}
