package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/kahunago/kahuna/lease"
	pb "github.com/kahunago/kahuna/transport/lockspb"
)

// Defaults of ServerOptions.
const (
	DefaultMaxRequestBytes = 64 << 10
	// DefaultMaxInFlightPerStream is what two streams of 256 gave the Go
	// client when it opened two to a node; it opens one now, and with 256
	// a client of 512 callers made 0.85-0.94x the ops.
	DefaultMaxInFlightPerStream = 512
)

// ErrServerClosed is returned by the Serve methods once the server has been
// shut down or closed.
var ErrServerClosed = errors.New("transport: server closed")

// ServerOptions configures a Server. The zero value is usable.
type ServerOptions struct {
	// NodeName names this node on the native kahuna.v1 service
	// (LockResponse and WatchEvent served_from). The Kahuna wire (gRPC
	// Locker and REST) answers the Locker's Result.ServedFrom instead, as
	// Kahuna does: "" when this node served the request, the leader's
	// client URL when it was forwarded there.
	NodeName string
	// Forwarded serves the node-to-node stream BatchServerLockRequests.
	// The cluster layer passes a Locker that never forwards again, so a
	// request hops at most once; nil means the main Locker.
	Forwarded lease.Locker
	// Logger receives the server's logs; nil means slog.Default().
	Logger *slog.Logger
	// Observe, when set, is called once per lock request answered, on any
	// transport, with its status. It runs on the request's goroutine and
	// must be fast. (The node times its requests itself; a clock read
	// here cost each request more than the hook.)
	Observe func(op lease.Op, st lease.Status)
	// Extra mounts more handlers on the HTTP side of the mixed handler,
	// keyed by http.ServeMux pattern (e.g. "/metrics"). A pattern that
	// collides with the lock routes or /healthz makes NewServer panic, as
	// http.ServeMux does.
	Extra map[string]http.Handler
	// MaxRequestBytes bounds one gRPC message and one REST body
	// (default DefaultMaxRequestBytes). A lock request is well under 3 KiB,
	// one of several names under 19 KiB (lease.MaxGroupBytes).
	MaxRequestBytes int
	// MaxInFlightPerStream bounds the requests of one batch stream served
	// at once (default DefaultMaxInFlightPerStream); a stream that sends
	// more waits, so a flood cannot spawn unbounded goroutines.
	MaxInFlightPerStream int
	// Tokens, when set, makes every lock call (gRPC, unary or stream, and
	// REST) and every Extra handler not listed in Unauthenticated refuse a
	// caller without one of its bearer tokens: gRPC metadata or the HTTP
	// header "authorization: Bearer TOKEN", else gRPC Unauthenticated or
	// HTTP 401 with a JSON body saying why. /healthz is always open. nil
	// accepts every call (see auth.go).
	Tokens *Tokens
	// PeerTokens, when set, guards the node-to-node stream
	// (BatchServerLockRequests) instead of Tokens: the cluster secret.
	PeerTokens *Tokens
	// SniffTimeout bounds how long a new connection on a ServeHTTP
	// listener may take to send the first bytes that say whether it is
	// HTTP/2 (gRPC) or HTTP/1.x; a connection silent for longer is closed
	// (default DefaultSniffTimeout).
	SniffTimeout time.Duration
	// Unauthenticated lists Extra patterns served without a token even
	// when Tokens is set (e.g. "/metrics").
	Unauthenticated []string
	// Ready, when set, says whether the node has finished starting, and
	// if not what it waits for: /healthz answers 503 with that until it
	// has. nil: always ready.
	Ready func() (ready bool, waitingFor string)
}

// Server serves a lease.Locker over gRPC and REST. Create it with
// NewServer, start listeners with ServeHTTP, ServeGRPC and ServeTLS, and
// stop them all with Shutdown or Close.
type Server struct {
	locker    lease.Locker
	forwarded lease.Locker
	opts      ServerOptions
	log       *slog.Logger

	// native serves ServeGRPC listeners and the gRPC connections of
	// ServeHTTP ones; mixed serves gRPC requests that arrive through the
	// HTTP handler (HTTP/2 over TLS, ServeTLS). They are two grpc.Servers because
	// grpc's graceful stop cuts ServeHTTP streams short; the HTTP servers
	// drain those instead (see Shutdown).
	native  *grpc.Server
	mixed   *grpc.Server
	handler http.Handler

	mu       sync.Mutex
	closed   bool
	draining chan struct{} // closed when shutdown starts: batch streams wind down
	https    map[*http.Server]struct{}
	sniffers []*sniffer  // of the ServeHTTP listeners (tests read their counts)
	fast     *http1Conns // the REST fast path of the ServeHTTP listeners (http1.go)
	frames   frameConns  // streams in kahuna's own framing, on either port (frames.go)

	noLockStream bool // tests: serve the native service without LockStream
	noFastREST   bool // tests: serve every HTTP/1.x connection with net/http
}

// NewServer returns a Server for l. It starts nothing.
func NewServer(l lease.Locker, opts ServerOptions) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxRequestBytes <= 0 {
		opts.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if opts.MaxInFlightPerStream <= 0 {
		opts.MaxInFlightPerStream = DefaultMaxInFlightPerStream
	}
	s := &Server{
		locker:    l,
		forwarded: l,
		opts:      opts,
		log:       opts.Logger,
		draining:  make(chan struct{}),
		https:     make(map[*http.Server]struct{}),
	}
	if opts.Forwarded != nil {
		s.forwarded = opts.Forwarded
	}
	s.fast = newHTTP1Conns(s)
	s.native = s.newGRPCServer()
	s.mixed = s.newGRPCServer()
	s.handler = s.newHandler()
	return s
}

// Fixed HTTP/2 flow-control windows, on the server and the client. Setting
// them turns off grpc's bandwidth estimation, which on a stream of small
// requests and answers sends a PING after nearly every burst it receives
// (the first data after each PING's ack starts a new sample): a write and
// a read more on each side per round trip. On one hot lock that was 0.7
// writes of the node per grant and 15% of the grants a second
// (docs/benchmarks-log.md). Lock messages are small; these bound what a peer
// may send unread, as grpc's 64 KiB default does.
const (
	streamWindow = 1 << 20
	connWindow   = 4 << 20
)

func (s *Server) newGRPCServer() *grpc.Server {
	g := grpc.NewServer(
		grpc.MaxRecvMsgSize(s.opts.MaxRequestBytes),
		grpc.InitialWindowSize(streamWindow), grpc.InitialConnWindowSize(connWindow),
		grpc.UnaryInterceptor(s.authUnary), // auth.go
		grpc.StreamInterceptor(s.authStream),
		// Batch stream messages are (de)coded by hand, the rest by the
		// standard proto codec (see serverCodec).
		grpc.ForceServerCodecV2(serverCodec{}),
		// Our client pings idle connections every 30 s to notice dead
		// peers; allow that instead of answering it with GOAWAY.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             10 * time.Second,
			PermitWithoutStream: true,
		}),
	)
	pb.RegisterLockerServer(g, &grpcService{s: s})
	s.registerNative(g) // native.go
	return g
}

// serve checks one lock request (Request.Check: this is the edge it
// enters, even when a peer forwarded it, since a peer may run another
// version), runs it on l and reports it to Observe. Lock outcomes,
// including InvalidInput (with its Reason), are in the Result. A failed call is
// answered by what its error proves (see failedStatus): MustRetry only when
// the Locker says the request was certainly not applied, Errored (outcome
// unknown) otherwise, a panicking Locker included, rather than taking the
// server down. The error is non-nil only when ctx has ended: the asker is
// gone and no answer is due.
func (s *Server) serve(ctx context.Context, l lease.Locker, r lease.Request) (lease.LockInfo, lease.Result, error) {
	var (
		info lease.LockInfo
		res  lease.Result
		err  error
	)
	if c, reason := r.Check(); reason == "" {
		info, res, err = s.call(ctx, l, c)
	} else {
		res = lease.Result{Status: lease.InvalidInput, Reason: reason}
	}
	if err != nil {
		info, res = lease.LockInfo{}, lease.Result{Status: failedStatus(err)}
		if ctx.Err() != nil {
			err = ctx.Err()
		} else {
			s.log.Warn("lock request failed", "op", r.Op, "resource", r.Resource, "status", res.Status, "err", err)
			err = nil
		}
	}
	s.observe(r.Op, res.Status)
	return info, res, err
}

// observe reports a request's answer to Options.Observe, if set.
func (s *Server) observe(op lease.Op, st lease.Status) {
	if s.opts.Observe != nil {
		s.opts.Observe(op, st)
	}
}

// failedStatus is the answer to a call that failed with err: MustRetry only if
// it certainly did not apply, else Errored.
// MustRetry promises that the request was certainly not applied, so it is
// answered only when the Locker says so by wrapping lease.ErrNotApplied.
// Anything else may have applied, or may still apply, and is Errored:
// a Locker error that proves nothing; a panic (the Locker may have acted
// before it); and a context error, even from this request's own context
// whose asker went away, since the Locker's work on a request goes on
// after its caller stops waiting (a proposal, once made, may commit).
func failedStatus(err error) lease.Status {
	if errors.Is(err, lease.ErrNotApplied) {
		return lease.MustRetry
	}
	return lease.Errored
}

// call runs a checked request on l (lease.Do), turning a panic into an
// error (recovered).
func (s *Server) call(ctx context.Context, l lease.Locker, c lease.Checked) (info lease.LockInfo, res lease.Result, err error) {
	defer s.recovered(&c, false, &err)
	return lease.Do(ctx, l, c)
}

// recovered, deferred by a call of c into the Locker (lock: a native
// Lock), turns its panic into *err. The panic's value is formatted, never
// wrapped, so a panic is never taken for a certain "not applied".
func (s *Server) recovered(c *lease.Checked, lock bool, err *error) {
	if p := recover(); p != nil {
		r := c.Request()
		op := r.Op.String()
		if lock {
			op = "Lock"
		}
		s.log.Error("lock request panicked", "op", op, "resource", r.Resource,
			"panic", p, "stack", string(debug.Stack()))
		*err = fmt.Errorf("transport: %s panicked: %v", op, p)
	}
}

// Shutdown stops every listener gracefully: no new connections or calls
// are accepted, batch streams answer what they have received and end
// (cleanly, so a client knows nothing else was processed), and calls in
// flight are answered. If ctx ends first, Shutdown closes everything as
// Close does and returns ctx.Err().
func (s *Server) Shutdown(ctx context.Context) error {
	https := s.stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for _, hs := range https {
			// Close below cuts this short if ctx ends, so Shutdown's own
			// context need not be bounded.
			wg.Go(func() { _ = hs.Shutdown(context.Background()) })
		}
		wg.Go(s.native.GracefulStop)
		wg.Go(s.fast.shutdown)
		wg.Go(s.frames.shutdown)
		wg.Wait()
		s.mixed.Stop()
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.Close()
		<-done
		return ctx.Err()
	}
}

// Close stops every listener at once; calls in flight fail.
func (s *Server) Close() error {
	https := s.stop()
	var errs []error
	for _, hs := range https {
		// A listener Shutdown already closed is not a failure of Close.
		if err := hs.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	s.fast.close()
	s.frames.close()
	s.native.Stop()
	s.mixed.Stop()
	return errors.Join(errs...)
}

// stop marks the server closed, tells batch streams to wind down and
// returns the HTTP servers to stop.
func (s *Server) stop() []*http.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.draining)
	}
	https := make([]*http.Server, 0, len(s.https))
	for hs := range s.https {
		https = append(https, hs)
	}
	return https
}
