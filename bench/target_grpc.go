package bench

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/internal/node"
	"github.com/kahunago/kahuna/transport"
)

// GRPCTarget drives a kahuna node (or Kahuna itself) over gRPC with the
// project's client, kahuna.Client: at --endpoints, or without them a node
// opened in the harness's process and served on a loopback port by the
// project's server (grpc-go's own listener, as the native port 2072),
// reached through the kernel's TCP like any remote node. One client serves
// every worker, as an application would share it.
//
// hot-wait waits on the server when kahuna.Client is a lease.WaitLocker
// (the native Lock, sent on its LockStream), and polls TryLock otherwise:
// the workload decides by a type assertion. With
// the in-process node, requests are counted at the node (Config.Observe);
// at --endpoints, as client calls.
func GRPCTarget() Target {
	return Target{
		Name:    "grpc",
		Aliases: []string{"kahuna-grpc"},
		About:   "a kahuna node over gRPC at --endpoints (http:// = h2c, https://), or without them an in-process node on a loopback port",
		Open:    func(ctx context.Context, s Settings) (System, error) { return openGRPC(ctx, s, kahuna.WithGRPCOnly()) },
	}
}

// NativeTarget is GRPCTarget with kahuna.Client's default wire: kahuna's own
// framing on the same port to http:// endpoints (gRPC to https:// ones, and
// to a node that does not speak the framing).
func NativeTarget() Target {
	return Target{
		Name:    "native",
		Aliases: []string{"kahuna-native"},
		About:   "as grpc, with kahuna.Client's default wire: kahuna's own framing to http:// endpoints",
		Open:    func(ctx context.Context, s Settings) (System, error) { return openGRPC(ctx, s) },
	}
}

func openGRPC(ctx context.Context, s Settings, opts ...kahuna.ClientOption) (System, error) {
	if s.Insecure {
		opts = append(opts, kahuna.WithInsecureSkipVerify())
	}
	if s.Streams > 0 {
		opts = append(opts, kahuna.WithStreamsPerEndpoint(s.Streams))
	}
	if len(s.Endpoints) > 0 {
		c, err := kahuna.Dial(ctx, s.Endpoints, opts...)
		if err != nil {
			return nil, fmt.Errorf("dial %v: %w", s.Endpoints, err)
		}
		return Shared{L: c, CloseFn: c.Close}, nil
	}
	n, requests, closeNode, err := openNode(s)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, errors.Join(err, closeNode())
	}
	srv := n.NewServer(node.ServerOptions{})
	served := make(chan error, 1)
	go func() { served <- srv.ServeGRPC(lis) }()
	stop := func() error {
		err := srv.Close()
		if serr := <-served; serr != nil && !errors.Is(serr, transport.ErrServerClosed) {
			err = errors.Join(err, serr)
		}
		return errors.Join(err, closeNode())
	}
	c, err := kahuna.Dial(ctx, []string{"http://" + lis.Addr().String()}, opts...)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("dial the in-process node: %w", err), stop())
	}
	sys := System(Shared{L: c, CloseFn: func() error { return errors.Join(c.Close(), stop()) }})
	if requests != nil {
		sys = Counted{System: sys, N: requests, What: observed}
	}
	return sys, nil
}
