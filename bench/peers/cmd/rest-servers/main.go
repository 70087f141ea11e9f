// Command rest-servers serves the REST lock routes Kahuna's clients call
// (POST /v1/locks/try-lock and /v1/locks/try-unlock, JSON bodies) over an
// embedded kahuna node, with one handler behind either net/http or
// valyala/fasthttp. It measures what each HTTP/1.1 server costs a request,
// to set beside what kahuna's own REST fast path (transport/http1.go)
// saves over net/http in the node itself:
//
//	go run ./cmd/rest-servers --server fasthttp --addr 127.0.0.1:2090 &
//	wrk -t2 -c64 -d5s -s ../../scripts/wrk-lock.lua http://127.0.0.1:2090
//
// The handler is the same for both servers: encoding/json both ways, the
// node's TryLock and Unlock, an answer of Kahuna's shape. It checks no
// token and keeps no metrics, unlike the node's own routes.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kahunago/kahuna"
)

// maxBody bounds a request's body (a lock call's is under 1 KiB).
const maxBody = 64 << 10

// lockBody and lockReply are the fields of Kahuna's REST lock call that
// wrk-lock.lua sends and its clients read.
type lockBody struct {
	Resource   string `json:"resource"`
	Owner      []byte `json:"owner"`
	ExpiresMs  int32  `json:"expiresMs"`
	Durability int32  `json:"durability"`
}

type lockReply struct {
	ServedFrom   string `json:"servedFrom"`
	Type         int32  `json:"type"`
	FencingToken int64  `json:"fencingToken"`
}

// serveLock answers one lock call: its status and JSON answer, or an
// error status for a body that does not decode or a path it does not
// serve.
func serveLock(ctx context.Context, n *kahuna.Node, path string, body []byte) (int, []byte) {
	var b lockBody
	if err := json.Unmarshal(body, &b); err != nil || b.Resource == "" {
		return http.StatusBadRequest, nil
	}
	d := kahuna.Durability(b.Durability)
	var (
		res kahuna.Result
		err error
	)
	switch path {
	case "/v1/locks/try-lock":
		res, err = n.TryLock(ctx, b.Resource, b.Owner, time.Duration(b.ExpiresMs)*time.Millisecond, d)
	case "/v1/locks/try-unlock":
		res, err = n.Unlock(ctx, b.Resource, b.Owner, d)
	default:
		return http.StatusNotFound, nil
	}
	if err != nil {
		return http.StatusInternalServerError, nil
	}
	out, err := json.Marshal(lockReply{Type: int32(res.Status), FencingToken: res.FencingToken})
	if err != nil {
		return http.StatusInternalServerError, nil
	}
	return http.StatusOK, out
}

func main() {
	server := flag.String("server", "nethttp", "the HTTP server: nethttp or fasthttp")
	addr := flag.String("addr", "127.0.0.1:2090", "address to listen on")
	flag.Parse()
	if err := run(*server, *addr); err != nil {
		fmt.Fprintln(os.Stderr, "rest-servers:", err)
		os.Exit(1)
	}
}

func run(server, addr string) error {
	n, err := kahuna.Open(kahuna.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return fmt.Errorf("open the node: %w", err)
	}
	defer n.Close()
	serve, shut, err := newServer(server, n)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errs := make(chan error, 1)
	go func() { errs <- serve(ln) }()
	fmt.Printf("rest-servers: %s on %s\n", server, ln.Addr())
	select {
	case err := <-errs:
		return err
	case <-ctx.Done():
		return shut()
	}
}

// newServer returns what serves the lock routes of n on a listener with
// the named HTTP server, and what shuts it down.
func newServer(server string, n *kahuna.Node) (serve func(net.Listener) error, shut func() error, err error) {
	switch server {
	case "nethttp":
		s := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ContentLength < 0 || r.ContentLength > maxBody {
				w.WriteHeader(http.StatusRequestEntityTooLarge)
				return
			}
			body := make([]byte, r.ContentLength)
			if _, err := io.ReadFull(r.Body, body); err != nil {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			status, out := serveLock(r.Context(), n, r.URL.Path, body)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = w.Write(out)
		})}
		return s.Serve, func() error { return s.Shutdown(context.Background()) }, nil
	case "fasthttp":
		s := &fasthttp.Server{MaxRequestBodySize: maxBody, Handler: func(c *fasthttp.RequestCtx) {
			status, out := serveLock(c, n, string(c.Path()), c.PostBody())
			c.SetContentType("application/json")
			c.SetStatusCode(status)
			c.SetBody(out)
		}}
		return s.Serve, s.Shutdown, nil
	}
	return nil, nil, fmt.Errorf("--server %q: want nethttp or fasthttp", server)
}
