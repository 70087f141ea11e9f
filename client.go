package kahuna

import (
	"context"
	"crypto/tls"
	"time"

	"github.com/kahunago/kahuna/transport"
)

// Client is a Locker served by remote kahuna nodes (or Kahuna servers),
// over gRPC (default) or REST. Safe for concurrent use; Close it when done.
type Client struct {
	Locker
	close func() error
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

// WithMustRetryBudget sets how long Extend, Unlock and Get retry MustRetry
// answers (default 30 s); TryLock retries until its context ends.
func WithMustRetryBudget(d time.Duration) ClientOption {
	return func(o *clientOptions) { o.transport = append(o.transport, transport.WithMustRetryBudget(d)) }
}

// Dial connects to nodes at endpoints: "http://host:port" (cleartext, h2c
// for gRPC) or "https://host:port" (TLS). Calls go round robin over the
// endpoints; any node serves any lock. Over gRPC, calls are multiplexed on
// long-lived batch streams, as Kahuna's clients do.
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
		return &Client{Locker: c, close: c.Close}, nil
	}
	c, err := transport.Dial(ctx, endpoints, o.transport...)
	if err != nil {
		return nil, err
	}
	return &Client{Locker: c, close: c.Close}, nil
}
