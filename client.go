package kahuna

import (
	"context"
	"crypto/tls"
	"errors"
	"iter"
	"time"

	"github.com/kahunago/kahuna/internal/backoff"
	"github.com/kahunago/kahuna/lease"
	"github.com/kahunago/kahuna/transport"
)

// Client is a Locker served by remote kahuna nodes (or Kahuna servers),
// over gRPC (default) or REST. Safe for concurrent use; Close it when done.
//
// Its methods are the raw protocol, as on a *Node: lock outcomes (Busy,
// InvalidOwner, MustRetry, ...) are Statuses in the Result, and the error
// is for the call itself (context ended, client closed, no endpoint
// reachable). Acquire gives a handle with retries, waiting and keep-alive
// on a Client as on a Node.
//
// Over gRPC a Client is a WaitLocker, and can Watch, when the server
// offers the native service (kahuna.v1, which kahuna nodes serve next to
// Kahuna's Locker service): Lock then waits on the server in the lock's
// FIFO queue, with no polling. Whether it does is found on first use: a
// plain Kahuna server answers UNIMPLEMENTED, and from then on Lock polls
// TryLock with jittered backoff (2 to 50 ms) and Watch fails. Over REST
// Lock always polls.
type Client struct {
	locker Locker
	grpc   *transport.Client     // nil over REST
	rest   *transport.RESTClient // List's, and the locker over REST
	// restErr is why rest is nil: DialREST refused the endpoints.
	restErr error
	close   func() error
}

var (
	_ Locker     = (*Client)(nil)
	_ WaitLocker = (*Client)(nil)
	_ lease.Doer = (*Client)(nil)
)

// Lock implements WaitLocker: TryLock that, while another owner holds the
// lock, waits for up to wait (WaitForever: until ctx ends) in the
// resource's FIFO queue on the server, and is granted the lock when its
// holder releases it or its lease ends (see lease.WaitLocker). If ctx ends
// first, the call leaves the queue, and returns once the server has
// answered its withdrawal: with the grant if the lock was granted to it
// first, else ctx.Err(). Against a server without the native
// service (or over REST) it polls TryLock until the wait ends.
func (c *Client) Lock(ctx context.Context, resource string, owner []byte, ttl, wait time.Duration, d Durability) (Result, error) {
	if c.grpc != nil {
		r, err := c.grpc.Lock(ctx, resource, owner, ttl, wait, d)
		if !errors.Is(err, transport.ErrNoNative) {
			return r, err
		}
	}
	if !lease.ValidWait(wait) {
		return Result{Status: InvalidInput}, nil
	}
	return backoff.PollLock(ctx, nil, nil, wait, func(ctx context.Context) (Result, error) {
		return c.locker.TryLock(ctx, resource, owner, ttl, d)
	})
}

// Watch streams the changes of the lock on resource from the server's
// native service, beginning with its current state; see Node.Watch for
// the events, resumption across partition moves and errors. Against a
// plain Kahuna server, or over REST, it yields transport.ErrNoNative.
func (c *Client) Watch(ctx context.Context, resource string, opts ...WatchOption) iter.Seq2[WatchEvent, error] {
	if c.grpc == nil {
		return func(yield func(WatchEvent, error) bool) { yield(WatchEvent{}, transport.ErrNoNative) }
	}
	return Watch(ctx, c.grpc, resource, opts...)
}

// TryLock grants resource to owner for ttl if it is free or its lease has
// lapsed (Locked, with the fencing token); another owner's live lease
// answers Busy; the same owner re-locking a live lease gets its token
// back, without its expiry refreshed.
func (c *Client) TryLock(ctx context.Context, resource string, owner []byte, ttl time.Duration, d Durability) (Result, error) {
	return c.locker.TryLock(ctx, resource, owner, ttl, d)
}

// Extend sets owner's live lease on resource to end ttl from now
// (Extended); LockDoesNotExist if there is no live lease, InvalidOwner if
// another owner holds it.
func (c *Client) Extend(ctx context.Context, resource string, owner []byte, ttl time.Duration, d Durability) (Result, error) {
	return c.locker.Extend(ctx, resource, owner, ttl, d)
}

// Unlock releases owner's lock on resource, even if its lease has lapsed
// (Unlocked); LockDoesNotExist if there is none, InvalidOwner if another
// owner holds it.
func (c *Client) Unlock(ctx context.Context, resource string, owner []byte, d Durability) (Result, error) {
	return c.locker.Unlock(ctx, resource, owner, d)
}

// Get describes the live lock on resource (Got, with its owner, expiry and
// fencing token), or answers LockDoesNotExist. Of a semaphore or a
// read/write lock it lists the live holders (LockInfo.Holders), which
// Kahuna's GetLock cannot carry: a gRPC client asks that Get over REST, on
// the same endpoints.
func (c *Client) Get(ctx context.Context, resource string, d Durability) (LockInfo, Result, error) {
	if c.rest != nil && (lease.IsSemaphore(resource) || lease.IsRWLock(resource)) {
		return c.rest.Get(ctx, resource, d)
	}
	return c.locker.Get(ctx, resource, d)
}

// Do implements lease.Doer: it sends a checked request whole, a
// semaphore's permits and limit and a read lock's Shared included, which
// the Locker methods cannot carry. Over REST it is not queued on the
// server: a request's Wait is not sent, and it is answered at once
// (transport.RESTClient.Do).
func (c *Client) Do(ctx context.Context, req lease.Checked) (LockInfo, Result, error) {
	if c.grpc == nil {
		return c.rest.Do(ctx, req)
	}
	return c.grpc.Do(ctx, req)
}

// Close releases the client's connections.
func (c *Client) Close() error { return c.close() }

type clientOptions struct {
	rest      bool
	transport []transport.ClientOption
}

// ClientOption tunes Dial.
type ClientOption func(*clientOptions)

// WithREST makes the client speak REST (/v1/locks/*) instead of gRPC.
func WithREST() ClientOption { return func(o *clientOptions) { o.rest = true } }

// WithTLSConfig sets the TLS configuration for https:// endpoints.
func WithTLSConfig(c *tls.Config) ClientOption {
	return func(o *clientOptions) { o.transport = append(o.transport, transport.WithTLSConfig(c)) }
}

// WithInsecureSkipVerify skips certificate checks of https:// endpoints
// (self-signed development nodes only).
func WithInsecureSkipVerify() ClientOption {
	return func(o *clientOptions) { o.transport = append(o.transport, transport.WithInsecureSkipVerify()) }
}

// WithGRPCOnly makes the client speak gRPC to http:// endpoints too. By
// default its streams to an http:// endpoint use kahuna's own framing on the
// same port, one stream to a TCP connection without HTTP/2 (a node that does
// not speak it is spoken to in gRPC); https:// endpoints are always gRPC.
func WithGRPCOnly() ClientOption {
	return func(o *clientOptions) { o.transport = append(o.transport, transport.WithGRPCOnly()) }
}

// WithMustRetryBudget sets how long TryLock, Extend, Unlock and Get retry
// MustRetry answers, with jittered backoff (1 to 50 ms), before they
// return the MustRetry status (default 30 s): a node that refuses work,
// between leaders or at a memory bound (Config.MaxCachedEntries), is not
// retried for ever. Lock retries for the longer of its wait and the
// budget (WaitForever: until its context ends).
func WithMustRetryBudget(d time.Duration) ClientOption {
	return func(o *clientOptions) { o.transport = append(o.transport, transport.WithMustRetryBudget(d)) }
}

// WithStreamsPerEndpoint sets how many batch streams, each on a
// connection of its own, carry the calls to each endpoint (default one,
// values below one mean one). A node answers together what it reads
// from one stream, so one stream makes the fewest system calls on both
// sides; a node decides one stream's requests on one goroutine at a
// time, so a client that alone keeps a node with many cores busy may
// spread its calls over more.
func WithStreamsPerEndpoint(n int) ClientOption {
	return func(o *clientOptions) { o.transport = append(o.transport, transport.WithStreamsPerEndpoint(n)) }
}

// Dial connects to nodes at endpoints: "http://host:port" (cleartext:
// kahuna's own framing, else h2c for gRPC) or "https://host:port" (TLS,
// gRPC). Calls go round robin over the endpoints; any node serves any lock.
// Calls are multiplexed on long-lived batch streams, as Kahuna's clients
// do over gRPC, and the client learns
// each partition's leader: a node that forwarded a call names the leader's
// client URL in the answer (Result.ServedFrom, the member's
// --initial-cluster-endpoints URL), and when that is one of endpoints, the
// next calls for resources of the same partition key (the part before the
// last '/') go straight to it.
func Dial(ctx context.Context, endpoints []string, opts ...ClientOption) (*Client, error) {
	var o clientOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.rest {
		c, err := transport.DialREST(endpoints, o.transport...)
		if err != nil {
			return nil, err
		}
		return &Client{locker: c, rest: c, close: c.Close}, nil
	}
	c, err := transport.Dial(ctx, endpoints, o.transport...)
	if err != nil {
		return nil, err
	}
	// It connects on its first List only. Endpoints it cannot take fail
	// List, not the lock calls.
	rc, restErr := transport.DialREST(endpoints, o.transport...)
	return &Client{locker: c, grpc: c, rest: rc, restErr: restErr, close: func() error {
		if rc != nil {
			rc.Close()
		}
		return c.Close()
	}}, nil
}

// WithToken makes the client present token ("authorization: Bearer
// TOKEN", in gRPC metadata or the REST header) on every call, for nodes
// started with an --auth-token-file listing it.
func WithToken(token string) ClientOption {
	return func(o *clientOptions) { o.transport = append(o.transport, transport.WithToken(token)) }
}
