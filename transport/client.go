package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	pauses "github.com/kahunago/kahuna/internal/backoff"
	"github.com/kahunago/kahuna/lease"
)

// Client defaults.
const (
	// DefaultStreamsPerEndpoint is one: the node answers together what
	// it read together, and the client's writer sends together the calls
	// of the callers an answer message woke, both per stream. Calls split
	// round robin over two streams made each message half as large, and
	// two system calls where one would do (see docs/benchmarks-log.md, "One
	// batch stream per endpoint"). A stream's requests are decided on
	// its node by one goroutine at a time, so a client that alone keeps a
	// node with many cores busy may want more (WithStreamsPerEndpoint;
	// kahuna.WithStreamsPerEndpoint).
	DefaultStreamsPerEndpoint = 1
	// DefaultMustRetryBudget bounds how long a call retries MustRetry
	// answers (Kahuna's client uses the same for Extend, Unlock and Get).
	DefaultMustRetryBudget = 30 * time.Second
)

// ErrClosed is returned by calls on a closed Client.
var ErrClosed = errors.New("transport: client closed")

// ClientOption configures Dial.
type ClientOption func(*clientConfig)

type clientConfig struct {
	tls                *tls.Config
	insecureSkipVerify bool
	streams            int
	noFrames           bool // gRPC only, never kahuna's framing
	mustRetryBudget    time.Duration
	forwarding         bool
	token              func() string // nil: no token (auth.go)
	restViaNetHTTP     bool          // tests: REST calls to http:// endpoints go through net/http too
}

// WithTLSConfig sets the TLS configuration for https:// endpoints (for
// example a RootCAs pool holding a private CA). The config is cloned.
func WithTLSConfig(c *tls.Config) ClientOption {
	return func(cfg *clientConfig) { cfg.tls = c.Clone() }
}

// WithInsecureSkipVerify makes https:// endpoints skip certificate
// verification: for tests and self-signed development nodes only.
func WithInsecureSkipVerify() ClientOption {
	return func(cfg *clientConfig) { cfg.insecureSkipVerify = true }
}

// WithStreamsPerEndpoint sets how many batch streams, each on its own
// connection, carry the calls to one endpoint (default
// DefaultStreamsPerEndpoint; values below 1 mean 1).
func WithStreamsPerEndpoint(n int) ClientOption {
	return func(cfg *clientConfig) { cfg.streams = max(n, 1) }
}

// WithGRPCOnly makes the client speak gRPC to cleartext endpoints too. By
// default its batch streams and LockStreams to an http:// endpoint use
// kahuna's own framing on the same port (one stream to a TCP connection,
// no HTTP/2), and gRPC with an endpoint that does not speak it (trying the
// framing again a minute later).
func WithGRPCOnly() ClientOption {
	return func(cfg *clientConfig) { cfg.noFrames = true }
}

// WithMustRetryBudget sets how long TryLock, Extend, Unlock and Get keep
// retrying MustRetry answers, from the first, before they return MustRetry (default
// DefaultMustRetryBudget), so that a node refusing work (between leaders,
// or overloaded: see kahuna.Config.MaxCachedEntries) is not retried for
// ever. Lock retries for the longer of its wait and the budget
// (WaitForever: until its context ends).
func WithMustRetryBudget(d time.Duration) ClientOption {
	return func(cfg *clientConfig) { cfg.mustRetryBudget = d }
}

// WithForwarding makes the client a node-to-node forwarder: its calls go
// on the BatchServerLockRequests stream, which the receiving node serves
// without forwarding again (ServerOptions.Forwarded), and MustRetry
// answers come back as they are, unretried, for the original caller to
// decide. Its errors are classified as the Client's (lease.ErrNotApplied
// only when the request certainly was not applied), so the forwarding
// node can answer MustRetry or Errored accordingly.
func WithForwarding() ClientOption {
	return func(cfg *clientConfig) { cfg.forwarding = true }
}

// Client is a lease.Locker served by remote nodes over Kahuna's gRPC
// protocol. It is safe for concurrent use. Calls go to the endpoints round
// robin, multiplexed over long-lived batch streams.
//
// A request that lease.Valid rejects, or whose resource is not UTF-8
// (Kahuna's wire carries it as a proto3 string), is answered InvalidInput
// without a round trip, with its Result.Reason. Kahuna's wire carries no
// reason, so an InvalidInput from a server has none.
//
// Errors are for failures of the call itself: ctx.Err() unchanged when the
// context ends first, ErrClosed after Close, or a transport error. A call
// whose stream broke after it was sent fails, since its outcome is
// unknown; a call the server provably never processed is first sent again
// to the next endpoint. Lock outcomes are Statuses.
//
// An error says what is known of the call's outcome: it wraps
// lease.ErrNotApplied (test with errors.Is) when the request was certainly
// not applied, because it never left this client (no stream could be
// opened, the connection was down, the client was closed before sending
// it, its write to the stream failed) or because the server ended the
// stream cleanly without processing it. Any other error, ctx.Err()
// included, leaves the outcome unknown: the request may have been applied,
// or may still be.
//
// MustRetry answers are retried with jittered exponential backoff (about
// 1 ms growing to 50 ms) within the MustRetry budget (WithMustRetryBudget),
// after which the call returns the MustRetry status. Nothing else is retried: an Errored answer, or an error of
// unknown outcome, is returned as it is, for the caller to decide (the
// same owner's operations are idempotent, so a lock handle may repeat
// them; a blind retry here could not know that).
type Client struct {
	endpoints []*endpoint
	next      atomic.Uint32 // round robin over endpoints
	ids       atomic.Uint32 // RequestIds, unique across the client's streams
	budget    time.Duration
	retry     bool         // retry MustRetry answers (not when forwarding)
	native    atomic.Int32 // the servers offer kahuna.v1: nativeUnknown, nativeYes, nativeNo (native_client.go)
	routes    routes       // the leader's endpoint per partition key, as answers named it (routes.go)
	calls     sync.Pool

	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// endpoint is one node: its batch streams, used round robin.
type endpoint struct {
	url     string // as given to Dial: the ServedFrom of its local answers
	streams []*batchStream
	next    atomic.Uint32
}

// pick is the stream for the next call. With one stream (the default)
// it leaves the counter alone: every caller adding to it moved its cache
// line between the cores on every call.
func (e *endpoint) pick() *batchStream {
	if len(e.streams) == 1 {
		return e.streams[0]
	}
	return e.streams[e.next.Add(1)%uint32(len(e.streams))]
}

var _ lease.Locker = (*Client)(nil)

// Dial connects to the nodes at endpoints: URLs "http://host:port" for
// cleartext HTTP/2 (h2c) and "https://host:port" for TLS. A missing port
// means 80 or 443. Dial opens the batch streams and returns once one
// endpoint answers; it fails if none can be reached before ctx ends.
func Dial(ctx context.Context, endpoints []string, opts ...ClientOption) (*Client, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("transport: no endpoints")
	}
	cfg := clientConfig{streams: DefaultStreamsPerEndpoint, mustRetryBudget: DefaultMustRetryBudget}
	for _, o := range opts {
		o(&cfg)
	}
	type parsed struct {
		raw, target string
		creds       credentials.TransportCredentials
	}
	var eps []parsed
	for _, raw := range endpoints {
		target, creds, err := parseEndpoint(raw, &cfg)
		if err != nil {
			return nil, err
		}
		eps = append(eps, parsed{raw, target, creds})
	}

	life, cancel := context.WithCancel(context.Background())
	c := &Client{budget: cfg.mustRetryBudget, retry: !cfg.forwarding, cancel: cancel}
	method := packedClientMethod
	if cfg.forwarding {
		method = packedServerMethod
	}
	c.calls.New = func() any { return newCall() }
	for _, p := range eps {
		ep := &endpoint{url: p.raw}
		c.endpoints = append(c.endpoints, ep)
		dialOpts := []grpc.DialOption{
			grpc.WithTransportCredentials(p.creds),
			// Notice a peer that vanished without closing the
			// connection, so calls on it fail instead of hanging.
			grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
			grpc.WithInitialWindowSize(streamWindow), grpc.WithInitialConnWindowSize(connWindow), // server.go
		}
		if cfg.token != nil {
			dialOpts = append(dialOpts, grpc.WithPerRPCCredentials(tokenCreds{cfg.token}))
		}
		// One dialer an endpoint: the first stream that finds it does not
		// speak kahuna's framing turns it off for them all, for a while.
		var frames *frameDialer
		if p.creds.Info().SecurityProtocol == "insecure" && !cfg.noFrames {
			frames = &frameDialer{addr: strings.TrimPrefix(p.target, "dns:///"), token: cfg.token}
		}
		for range cfg.streams {
			conn, err := grpc.NewClient(p.target, dialOpts...)
			if err != nil {
				c.Close()
				return nil, fmt.Errorf("transport: endpoint %q: %w", p.raw, err)
			}
			ep.streams = append(ep.streams, newBatchStream(life, &c.wg, p.raw, conn, method, frames))
		}
	}
	if err := c.open(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// open opens every batch stream and returns when one is open, or with the
// errors if none can be.
func (c *Client) open(ctx context.Context) error {
	var all []*batchStream
	for _, ep := range c.endpoints {
		all = append(all, ep.streams...)
	}
	errs := make(chan error, len(all))
	for _, s := range all {
		// Streams still opening when Dial returns finish in the background
		// (Close waits for them): the first call would open them anyway.
		c.wg.Go(func() {
			_, err := s.stream()
			errs <- err
		})
	}
	var failed []error
	for range all {
		select {
		case err := <-errs:
			// A refusal is the call's to report (ErrUnauthenticated):
			// the endpoint was reached.
			if err == nil || errors.Is(err, lease.ErrUnauthenticated) {
				return nil
			}
			failed = append(failed, err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// No stream opened, so no request was sent.
	return fmt.Errorf("transport: no endpoint reachable (%w): %w", lease.ErrNotApplied, errors.Join(failed...))
}

// parseEndpoint turns an endpoint URL into a grpc target and credentials.
func parseEndpoint(raw string, cfg *clientConfig) (string, credentials.TransportCredentials, error) {
	bad := func(why string) error {
		return fmt.Errorf("transport: endpoint %q: %s (want http://host:port or https://host:port)", raw, why)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", nil, bad(err.Error())
	}
	var creds credentials.TransportCredentials
	port := u.Port()
	switch u.Scheme {
	case "http":
		creds = insecure.NewCredentials()
		if port == "" {
			port = "80"
		}
	case "https":
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if cfg.tls != nil {
			tc = cfg.tls.Clone()
		}
		if cfg.insecureSkipVerify {
			tc.InsecureSkipVerify = true
		}
		creds = credentials.NewTLS(tc)
		if port == "" {
			port = "443"
		}
	default:
		return "", nil, bad("scheme must be http or https")
	}
	switch {
	case u.Hostname() == "":
		return "", nil, bad("no host")
	case u.User != nil, u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "":
		return "", nil, bad("only scheme, host and port are allowed")
	}
	return "dns:///" + net.JoinHostPort(u.Hostname(), port), creds, nil
}

// Close ends every stream and connection. Calls in flight fail with
// ErrClosed, as do later calls; those that were not sent yet fail with an
// ErrClosed that is also lease.ErrNotApplied.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		var errs []error
		// Mark the streams closed before cancelling, so calls cut short
		// report ErrClosed rather than a cancellation.
		for _, ep := range c.endpoints {
			for _, s := range ep.streams {
				errs = append(errs, s.close())
			}
		}
		c.cancel()
		c.wg.Wait()
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}

func (c *Client) TryLock(ctx context.Context, resource string, owner []byte, ttl time.Duration, d lease.Durability) (lease.Result, error) {
	r, err := c.call(ctx, lease.Request{Op: lease.TryLock, Resource: resource, Owner: owner, TTL: ttl, Durability: d})
	return r.res, err
}

// TryLockLate is TryLock for a caller that must know the outcome of a
// request it stops waiting for: if ctx ends while the request is on its
// way, it returns left true and ctx.Err(), and hands the answer (or the
// call's failure, outcome unknown) to late, on a goroutine of its own,
// once it comes. late is called only then. A TryLock is not withdrawn when
// its caller leaves; this lets the caller act on a grant it no longer
// waits for (release it) after the grant, not before.
func (c *Client) TryLockLate(ctx context.Context, resource string, owner []byte, ttl time.Duration, d lease.Durability, late func(lease.Result, error)) (r lease.Result, left bool, err error) {
	req := lease.Request{Op: lease.TryLock, Resource: resource, Owner: owner, TTL: ttl, Durability: d}
	if why := checkSend(req); why != "" {
		return lease.Result{Status: lease.InvalidInput, Reason: why}, false, nil
	}
	rep, err := c.sendLate(ctx, req, func(rep reply, err error) { late(rep.res, err) })
	if errors.Is(err, errLeft) {
		return lease.Result{}, true, ctx.Err()
	}
	return rep.res, false, err
}

func (c *Client) Extend(ctx context.Context, resource string, owner []byte, ttl time.Duration, d lease.Durability) (lease.Result, error) {
	r, err := c.call(ctx, lease.Request{Op: lease.Extend, Resource: resource, Owner: owner, TTL: ttl, Durability: d})
	return r.res, err
}

func (c *Client) Unlock(ctx context.Context, resource string, owner []byte, d lease.Durability) (lease.Result, error) {
	r, err := c.call(ctx, lease.Request{Op: lease.Unlock, Resource: resource, Owner: owner, Durability: d})
	return r.res, err
}

func (c *Client) Get(ctx context.Context, resource string, d lease.Durability) (lease.LockInfo, lease.Result, error) {
	r, err := c.call(ctx, lease.Request{Op: lease.Get, Resource: resource, Durability: d})
	return r.info, r.res, err
}

// Do implements lease.Doer: it sends a request checked where it entered
// (a forwarding node's), checking only what the wire itself needs
// (wireReason). A TryLock with a Wait, for a semaphore's permits or for a
// read lock (which only the native Lock carries), is sent as Lock.
func (c *Client) Do(ctx context.Context, req lease.Checked) (lease.LockInfo, lease.Result, error) {
	r := req.Request()
	if why := wireReason(r); why != "" {
		return lease.LockInfo{}, lease.Result{Status: lease.InvalidInput, Reason: why}, nil
	}
	if r.Wait != 0 || r.Permits != 0 || r.Limit != 0 || r.Shared || r.Resize || r.NewOwner != nil || r.Also != nil {
		res, err := c.wait(ctx, r)
		return lease.LockInfo{}, res, err
	}
	rep, err := c.send(ctx, r)
	return rep.info, rep.res, err
}

// checkSend says why r may not be sent ("" if it may): Request.Check,
// the servers' own rule, then wireReason. It is checked here as well as
// by the server: an oversized request would exceed the server's message
// limit, and either would end the whole stream and every call
// multiplexed on it.
func checkSend(r lease.Request) string {
	if _, why := r.Check(); why != "" {
		return why
	}
	return wireReason(r)
}

// wireReason says why the wire cannot carry r ("" if it can): a resource
// that is not UTF-8 cannot be a proto3 string.
func wireReason(r lease.Request) string {
	if !utf8.ValidString(r.Resource) {
		return "resource is not valid UTF-8"
	}
	for _, name := range r.Also {
		if !utf8.ValidString(name) {
			return "a name in also is not valid UTF-8"
		}
	}
	return ""
}

// call checks r (checkSend) and sends it.
func (c *Client) call(ctx context.Context, r lease.Request) (reply, error) {
	if why := checkSend(r); why != "" {
		return reply{res: lease.Result{Status: lease.InvalidInput, Reason: why}}, nil
	}
	return c.send(ctx, r)
}

// send runs one checked lock call, retrying MustRetry answers and only those.
func (c *Client) send(ctx context.Context, req lease.Request) (reply, error) {
	return c.sendLate(ctx, req, nil)
}

// sendLate is send; when ctx ends with an attempt sent and unanswered, and
// late is not nil, it returns errLeft and the attempt's answer goes to
// late (batchStream.doLate).
func (c *Client) sendLate(ctx context.Context, req lease.Request, late func(reply, error)) (reply, error) {
	if err := ctx.Err(); err != nil {
		return reply{}, err
	}
	cl := c.calls.Get().(*call)
	cl.encode(int32(c.ids.Add(1)), req.Op, req.Resource, req.Owner, req.TTL, req.Durability)
	var (
		deadline time.Time // of the retries: set by the first MustRetry, so a call answered at once reads no clock
		bo       backoff
	)
	for {
		r, err := c.roundTrip(ctx, cl, req.Resource, late)
		if err != nil {
			// cl may still be referenced by a stream: leave it to the GC.
			return reply{}, err
		}
		if r.res.Status != lease.MustRetry || !c.retry {
			c.calls.Put(cl)
			return r, nil
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(c.budget)
		}
		left := time.Until(deadline)
		if left <= 0 {
			c.calls.Put(cl)
			return r, nil
		}
		if err := pauses.Sleep(ctx, min(bo.next(), left)); err != nil {
			c.calls.Put(cl)
			return reply{}, err
		}
	}
}

// roundTrip sends cl, a call for resource, to the endpoint its partition
// key was last served by, else to the next endpoint. An answer whose
// ServedFrom is "" (served by the node called, as Kahuna says it) gets
// that endpoint's URL, so ServedFrom is always the URL of the node that
// served the call: the leader's when it was forwarded, which the next
// call for the key goes to (routes.go). A call that was provably not
// processed (errUnsent) goes to the next endpoint, once around the ring
// and once more (a fresh stream on the first one); the last such error is
// returned, still lease.ErrNotApplied.
func (c *Client) roundTrip(ctx context.Context, cl *call, resource string, late func(reply, error)) (reply, error) {
	n := uint32(len(c.endpoints))
	var (
		key    string
		routed *endpoint
	)
	if n > 1 {
		key = lease.PartitionKey(resource)
		routed = c.routes.get(key)
	}
	var first uint32
	if n > 1 { // a counter every caller adds to moves between the cores: not for one endpoint
		first = c.next.Add(1)
	}
	var err error
	for i := range n + 1 {
		e := c.endpoints[(first+i)%n]
		if i == 0 && routed != nil {
			e = routed
		}
		err = e.pick().doLate(ctx, cl, late)
		if err == nil {
			r := cl.reply
			if n > 1 {
				c.routes.learn(key, c.servedBy(e, r.res))
			}
			if r.res.ServedFrom == "" {
				r.res.ServedFrom = e.url
			}
			return r, nil
		}
		if i == 0 && routed != nil {
			// The leader it named is not answering (paused, cut off,
			// down): round robin until an answer names one again.
			c.routes.learn(key, nil)
		}
		if !errors.Is(err, errUnsent) {
			return reply{}, err
		}
	}
	return reply{}, err
}
