package transport

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/kahunago/kahuna/lease"
)

// Handler returns the mixed handler: gRPC requests (HTTP/2 with an
// application/grpc content type) go to the gRPC service, everything else
// to REST, /healthz and ServerOptions.Extra. To carry cleartext gRPC, the
// http.Server around it must allow unencrypted HTTP/2 (ServeHTTP does).
func (s *Server) Handler() http.Handler { return s.handler }

func (s *Server) newHandler() http.Handler {
	mux := http.NewServeMux()
	guard := func(h http.Handler) http.Handler { return requireToken(s.opts.Tokens, h) } // auth.go
	for route, path := range restRoutePaths {
		if path != "" {
			mux.Handle(path, guard(s.restHandler(restRoute(route))))
		}
	}
	if _, ok := s.locker.(lease.WaitLocker); ok {
		s.restSessions(mux, guard) // rest_sessions.go
	}
	if l, ok := s.locker.(Lister); ok {
		mux.Handle(ListPath, guard(listHandler(l)))
	}
	mux.HandleFunc("/healthz", healthz(s.opts.Ready))
	for pattern, h := range s.opts.Extra {
		if !slices.Contains(s.opts.Unauthenticated, pattern) {
			h = requireTokenOrSecret(s.opts.Tokens, s.opts.PeerTokens, h)
		}
		mux.Handle(pattern, h)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			s.mixed.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// ServeHTTP serves the shared port on lis: gRPC and REST on one base URL,
// as Kahuna's clients expect. Each connection is told apart by its first
// bytes (sniff.go): one that opens with the HTTP/2 client preface (gRPC
// over cleartext HTTP/2 with prior knowledge, h2c) is served by grpc-go's
// own server, as on ServeGRPC, at its speed; any other (HTTP/1.1: REST,
// /healthz, the Extra handlers) by net/http. So REST over h2c with prior
// knowledge is not served here (grpc-go answers it 415), and an HTTP/1.1
// "Upgrade: h2c" is not taken up: the request is answered over HTTP/1.1.
// A connection silent for ServerOptions.SniffTimeout is closed. (It is not
// an http.Handler; Handler is.) It returns nil after Shutdown or Close,
// else the listener's error.
func (s *Server) ServeHTTP(lis net.Listener) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		lis.Close()
		return ErrServerClosed
	}
	fast := s.fast.serve
	if s.noFastREST {
		fast = nil
	}
	sn := newSniffer(lis, s.opts.SniffTimeout, s.serveFrames, fast, false)
	s.mu.Lock()
	s.sniffers = append(s.sniffers, sn)
	s.mu.Unlock()
	grpcDone := make(chan error, 1)
	go func() { grpcDone <- s.serveGRPC(sn.grpcs) }()
	hs := s.newHTTPServer()
	err := s.serveHTTP(hs, sn.https, hs.Serve)
	if errors.Is(err, ErrServerClosed) {
		err = nil
	}
	gerr := <-grpcDone
	if err == nil && gerr != nil && !errors.Is(gerr, ErrServerClosed) && !errors.Is(gerr, net.ErrClosed) {
		err = gerr
	}
	return err
}

// ServeTLS serves the mixed handler over TLS on lis, offering HTTP/2 and
// HTTP/1.1 by ALPN, with the PEM certificate and key in the named files.
// It returns nil after Shutdown or Close, else the listener's error.
func (s *Server) ServeTLS(lis net.Listener, certFile, keyFile string) error {
	hs := s.newHTTPServer()
	hs.Protocols.SetHTTP2(true)
	hs.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	return s.serveHTTP(hs, lis, func(lis net.Listener) error { return hs.ServeTLS(lis, certFile, keyFile) })
}

// ServeGRPC serves gRPC alone on lis with grpc-go's own HTTP/2 server,
// which is faster than gRPC through the mixed handler, and kahuna's own
// framing beside it (frames.go). It returns nil after Shutdown or Close,
// else the listener's error.
func (s *Server) ServeGRPC(lis net.Listener) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		lis.Close()
		return ErrServerClosed
	}
	// What is neither framed nor HTTP/2 goes to grpc too, which closes it.
	sn := newSniffer(lis, s.opts.SniffTimeout, s.serveFrames, nil, true)
	return s.serveGRPC(sn.grpcs)
}

// serveGRPC serves lis, whose connections speak HTTP/2, with the native
// grpc.Server.
func (s *Server) serveGRPC(lis net.Listener) error {
	err := s.native.Serve(lis)
	if errors.Is(err, grpc.ErrServerStopped) {
		return ErrServerClosed
	}
	return err
}

// ServeGRPCTLS is ServeGRPC over TLS with cfg (cloned, offering "h2" by
// ALPN as gRPC requires): with ClientAuth tls.RequireAndVerifyClientCert
// and a ClientCAs pool it is the mutual-TLS listener peers forward to.
func (s *Server) ServeGRPCTLS(lis net.Listener, cfg *tls.Config) error {
	cfg = cfg.Clone()
	if !slices.Contains(cfg.NextProtos, "h2") {
		cfg.NextProtos = append(cfg.NextProtos, "h2")
	}
	return s.ServeGRPC(tls.NewListener(lis, cfg))
}

func (s *Server) newHTTPServer() *http.Server {
	hs := &http.Server{
		Handler: s.handler,
		// Bounds how long a client may dribble its headers; bodies are
		// bounded by size, and gRPC streams must be free to live long.
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       5 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		Protocols:         new(http.Protocols),
	}
	hs.Protocols.SetHTTP1(true)
	return hs
}

// serveHTTP registers hs for Shutdown and runs serve on lis. hs stays
// registered after serve returns: its connections outlive the listener.
func (s *Server) serveHTTP(hs *http.Server, lis net.Listener, serve func(net.Listener) error) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		lis.Close()
		return ErrServerClosed
	}
	s.https[hs] = struct{}{}
	s.mu.Unlock()
	err := serve(lis)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
