package peers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/bench"
)

// withServer wraps a kahuna wire target (grpc, rest) so that, like redis
// and etcd, it can start its own node: with --start-server and no
// --endpoints, it runs the kahuna binary (--kahuna-server) on free
// loopback ports with a temp data dir, for the run. Client and node then
// share the machine as the peers and their servers do. Without either, a
// target that can serve an in-process node (grpc) does.
func withServer(t bench.Target, o *Options) bench.Target {
	open, needs := t.Open, t.NeedsEndpoints
	t.NeedsEndpoints = false // checked at open: --start-server is the other way
	t.About += "; or its own node with --start-server"
	t.Open = func(ctx context.Context, s bench.Settings) (bench.System, error) {
		if len(s.Endpoints) > 0 || (!o.StartServer && !needs) {
			return open(ctx, s)
		}
		if !o.StartServer {
			return nil, errors.New("needs --endpoints (e.g. http://127.0.0.1:2072 for grpc, :2070 for rest), or --start-server")
		}
		srv, httpEndpoint, grpcEndpoint, err := startKahuna(ctx, o.KahunaServer)
		if err != nil {
			return nil, err
		}
		// gRPC goes to the native listener, as kahuna-bench's gRPC
		// targets do (the shared REST port serves gRPC at the same speed
		// since it hands HTTP/2 connections to the same server).
		endpoint := httpEndpoint
		if t.Name == "grpc" || t.Name == "native" {
			endpoint = grpcEndpoint
		}
		s.Logger.Info("kahuna started", "endpoint", endpoint, "dir", srv.dir)
		s.Endpoints = []string{endpoint}
		sys, err := open(ctx, s)
		if err != nil {
			return nil, errors.Join(err, srv.stop())
		}
		return stopAfter{System: sys, srv: srv}, nil
	}
	return t
}

// startKahuna runs a single kahuna node (REST and h2c gRPC on one port,
// native gRPC on another) and waits until it serves: its listeners answer
// only once every partition is served.
func startKahuna(ctx context.Context, bin string) (srv *server, httpEndpoint, grpcEndpoint string, err error) {
	err = withFreePorts(3, func(ports []int) error { // http, grpc, raft
		httpEndpoint, grpcEndpoint = "http://"+loopback(ports[0]), "http://"+loopback(ports[1])
		srv, err = startServer(ctx, "kahuna", bin, func(dir string) []string {
			return []string{
				"--host", "127.0.0.1", "--http-ports", strconv.Itoa(ports[0]), "--grpc-cleartext-ports", strconv.Itoa(ports[1]),
				"--raft-port", strconv.Itoa(ports[2]), "--storage-path", dir + "/data", "--log-level", "warn",
			}
		}, func(ctx context.Context) error { return healthy(ctx, httpEndpoint) })
		return err
	})
	return srv, httpEndpoint, grpcEndpoint, err
}

// startKahunaClient starts a kahuna node (startKahuna) and dials its
// native gRPC endpoint.
func startKahunaClient(ctx context.Context, bin string) (*server, *kahuna.Client, string, error) {
	srv, _, grpcEndpoint, err := startKahuna(ctx, bin)
	if err != nil {
		return nil, nil, "", err
	}
	c, err := kahuna.Dial(ctx, []string{grpcEndpoint})
	if err != nil {
		return nil, nil, "", errors.Join(err, srv.stop())
	}
	return srv, c, grpcEndpoint, nil
}

func healthy(ctx context.Context, endpoint string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthz: HTTP %d", resp.StatusCode)
	}
	return nil
}

// stopAfter closes the system, then stops the server it ran against.
type stopAfter struct {
	bench.System
	srv *server
}

func (s stopAfter) Close() error { return errors.Join(s.System.Close(), s.srv.stop()) }
