// Command kahuna runs a standalone lock node: REST and gRPC (h2c) on one
// port, native gRPC on another, TLS when given a certificate, persistent
// locks under the user's data dir.
//
//	go run ./cmd/kahuna            # defaults: ports 2070 (REST+gRPC), 2072 (gRPC), Raft 2073
//	go run ./cmd/kahuna -help
//	go run ./cmd/kahuna --version
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kahunago/kahuna/durability"
	"github.com/kahunago/kahuna/internal/buildinfo"
	"github.com/kahunago/kahuna/internal/node"
	"github.com/kahunago/kahuna/transport"
)

// shutdownTimeout bounds how long in-flight calls get to finish on exit.
const shutdownTimeout = 10 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// Exit codes beyond 0 (done), 1 (failed) and 2 (bad flags): a service
// manager can tell the disk faults apart and not restart in a loop.
const (
	exitNoSpace       = 3 // refused to start: the disk is short of space (--disk-reserve, --store-quota)
	exitStorageFailed = 4 // stopped: a write to the store failed
)

// run is the whole program; it returns the exit code. It serves until ctx
// ends (a signal), then shuts down cleanly.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stdout) // -help, asked for, goes to stdout
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if errors.Is(err, errVersion) {
		fmt.Fprintln(stdout, buildinfo.Version("kahuna"))
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "kahuna: %s\n", oneLine(err))
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: o.logLevel}))
	// pebble logs through the standard logger; the durability package sends
	// those lines to logger, at --raft-log-level like dragonboat's and
	// badger's own.

	stopProfiling, err := startProfiling() // pprof.go
	if err != nil {
		fmt.Fprintf(stderr, "kahuna: %s\n", oneLine(err))
		return 1
	}
	defer stopProfiling()

	tokens, err := loadTokens(o) // auth.go
	if err != nil {
		fmt.Fprintf(stderr, "kahuna: %s\n", oneLine(err))
		return 1
	}
	var peerTLS *tls.Config
	if o.peerCert != "" {
		if peerTLS, err = node.PeerTLSConfig(o.peerCert, o.peerKey, o.peerCA); err != nil {
			fmt.Fprintf(stderr, "kahuna: %s\n", oneLine(err))
			return 1
		}
	}
	listeners, err := listen(o)
	if err != nil {
		fmt.Fprintf(stderr, "kahuna: %s\n", oneLine(err))
		return 1
	}
	// Raft's port is bound here too, and handed to the node, which serves
	// Raft on it: no gap between checking the port and binding it.
	raftAddr := net.JoinHostPort(o.raftHost, strconv.Itoa(o.raftPort))
	raftLis, err := net.Listen("tcp", raftAddr)
	if err != nil {
		closeAll(listeners)
		fmt.Fprintf(stderr, "kahuna: raft listener %s: %s\n", raftAddr, oneLine(err))
		return 1
	}
	// A failed Raft log write or fsync (a full or failing disk) cannot be
	// recovered from: stop once, with one line that says so, and let the
	// other replicas serve. (dragonboat would panic with a stack trace.)
	durability.SetFatalHandler(func(msg string) {
		logger.Error("kahuna: stopping: the store could not be written (disk full or failing); the cluster's other members keep serving. Free space or replace the disk, then restart.", "err", msg)
		os.Exit(exitStorageFailed)
	})
	m := newMetrics() // metrics.go
	nd, err := node.Start(node.Config{
		NodeID:                o.nodeID,
		RaftRTT:               o.raftRTT,
		LeaderBalanceCooldown: offIfZero(o.balanceCooldown),
		ReleasedRetention:     offIfZero(o.releasedRetention),
		Members:               o.members,
		DataDir:               o.storagePath,
		WALDir:                o.walPath,
		RaftAddress:           raftAddr,
		RaftListener:          raftLis, // closed by the node, or by a failed Open
		Partitions:            o.partitions,
		LockActors:            o.lockActors,
		CacheEntryTTL:         o.cacheEntryTTL,
		CacheEntriesToRemove:  o.cacheEntriesToRemove,
		EphemeralFencingOnly:  o.ephemeralFencingOnly,
		Logger:                logger,
		RaftLogLevel:          o.raftLogLevel,
		Observe:               m.observeRequest,
		InitialClusterState:   o.clusterState,
		InitialClusterToken:   o.clusterToken,
		AuthTokens:            tokens.auth,
		PeerTokens:            tokens.peer,
		PeerCertFile:          o.peerCert,
		PeerKeyFile:           o.peerKey,
		PeerCAFile:            o.peerCA,
		DiskReserve:           o.diskReserve,
		StoreQuota:            o.storeQuota,
	})
	if err != nil {
		closeAll(listeners)
		fmt.Fprintf(stderr, "kahuna: %s\n", oneLine(err))
		if errors.Is(err, node.ErrNoSpace) {
			return exitNoSpace
		}
		return 1
	}
	m.watch(nd)
	extra := map[string]http.Handler{"/metrics": m.handler()}
	if enablePprof {
		maps.Copy(extra, pprofHandlers())
	}
	srv := nd.NewServer(node.ServerOptions{
		Extra:           extra,
		Observe:         m.observeWire,
		Unauthenticated: openPaths(o),
	})
	stopReload := tokens.reloadOnHUP(logger)
	defer stopReload()

	// The API serves while the node waits for the cluster: /healthz
	// answers 503 with what it waits for, kahunactl status shows it, lock
	// calls answer MustRetry.
	serveErr := make(chan error, len(listeners))
	for _, l := range listeners {
		go func() { serveErr <- l.serve(srv, o, peerTLS) }()
	}
	wctx, cancelWait := context.WithTimeout(ctx, node.DefaultStartTimeout)
	err = nd.WaitReady(wctx)
	cancelWait()
	if err != nil {
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		_ = srv.Shutdown(sctx)
		cancel()
		if ctx.Err() != nil {
			logger.Info("interrupted while starting")
			return 1
		}
		fmt.Fprintf(stderr, "kahuna: %s\n", oneLine(err))
		return 1
	}

	// The ready block goes out in one write, so whoever waits for its
	// first line has the whole block.
	var ready strings.Builder
	fmt.Fprintf(&ready, "kahuna node ready\n  data:  %s\n", o.storagePath)
	if o.walPath != "" {
		fmt.Fprintf(&ready, "  wal:   %s\n", o.walPath)
	}
	fmt.Fprintf(&ready, "  raft:  %s\n", raftAddr)
	for _, l := range listeners {
		fmt.Fprintf(&ready, "  %-5s %s\n", l.kind+":", l.url())
	}
	_, _ = io.WriteString(stdout, ready.String())

	code := 0
	select {
	case <-ctx.Done():
		logger.Info("shutting down")
	case err := <-serveErr:
		logger.Error("listener failed, shutting down", "err", err)
		code = 1
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		logger.Warn("shutdown of listeners", "err", err)
	}
	if err := nd.Close(); err != nil {
		logger.Error("closing node", "err", err)
		code = 1
	}
	logger.Info("stopped", "exit_code", code)
	return code
}

// openPaths are the Extra handlers served without a token: /metrics,
// unless --metrics-auth.
func openPaths(o options) []string {
	if o.metricsAuth {
		return nil
	}
	return []string{"/metrics"}
}

// listener is one bound API port and what it serves.
type listener struct {
	kind string // http (REST + h2c gRPC), grpc (native), https or peer (native gRPC, mutual TLS)
	net.Listener
}

func (l listener) url() string {
	switch l.kind {
	case "https":
		return "https://" + l.Addr().String()
	case "grpc":
		return "http://" + l.Addr().String() + " (native gRPC, cleartext)"
	case "peer":
		return "https://" + l.Addr().String() + " (native gRPC, mutual TLS, forwarding)"
	}
	return "http://" + l.Addr().String() + " (REST + gRPC)"
}

func (l listener) serve(srv *transport.Server, o options, peerTLS *tls.Config) error {
	var err error
	switch l.kind {
	case "peer":
		err = srv.ServeGRPCTLS(l.Listener, peerTLS)
	case "https":
		err = srv.ServeTLS(l.Listener, o.certFile, o.keyFile)
	case "grpc":
		err = srv.ServeGRPC(l.Listener)
	default:
		err = srv.ServeHTTP(l.Listener)
	}
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// listen binds every API port before anything else starts, so a port in
// use fails fast with a clear reason.
func listen(o options) ([]listener, error) {
	var ls []listener
	bind := func(kind string, ports []int) error {
		for _, p := range ports {
			addr := net.JoinHostPort(o.host, strconv.Itoa(p))
			l, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("cannot listen on %s (%s): %w", addr, kind, err)
			}
			ls = append(ls, listener{kind: kind, Listener: l})
		}
		return nil
	}
	var peer []int
	if o.peerPort != 0 {
		peer = []int{o.peerPort}
	}
	if err := errors.Join(bind("http", o.httpPorts), bind("grpc", o.grpcPorts), bind("https", o.httpsPorts), bind("peer", peer)); err != nil {
		closeAll(ls)
		return nil, err
	}
	return ls, nil
}

func closeAll(ls []listener) {
	for _, l := range ls {
		_ = l.Close()
	}
}

// oneLine folds a (possibly joined) error into one line.
// The library's errors begin with "kahuna: " too: said once.
func oneLine(err error) string {
	return strings.TrimPrefix(strings.ReplaceAll(err.Error(), "\n", "; "), "kahuna: ")
}

// offIfZero maps a duration flag whose 0 means off (--leader-balance-cooldown,
// --released-retention) to Config, where 0 takes the default and a
// negative value is off.
func offIfZero(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}
