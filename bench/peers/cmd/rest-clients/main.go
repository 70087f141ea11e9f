// Command rest-clients calls a kahuna node's REST lock routes with three
// HTTP/1.1 clients in turn, each doing the same lock ops (a try-lock of a
// random key of 10,000, then its try-unlock) from the same number of
// goroutines: kahuna's own REST client (transport.RESTClient, whose
// cleartext calls use its own HTTP/1.1, transport/client_h1.go), net/http's
// client and valyala/fasthttp's. It reports each one's requests a second
// and the CPU this process spent a request, which is the client's cost
// (the node runs in its own process):
//
//	go run ./cmd/rest-clients --rounds 3                  # a node of its own
//	go run ./cmd/rest-clients --url http://127.0.0.1:2070 # a running node
//
// Without --url it starts an ephemeral node (kahuna.Open with a
// ListenAddress) in a second process, as fifo-floor starts its server.
//
// The library clients send the body kahuna's client sends, built by
// appending bytes, and check the answer's status and that it is a lock
// answer without decoding its JSON; kahuna's client also decodes the
// answer (json_fast.go, ~0.1 µs). That leans toward the libraries.
package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/bench/peers/internal/twoproc"
	"github.com/kahunago/kahuna/lease"
	"github.com/kahunago/kahuna/transport"
)

// nodeEnv names the address the second process serves a node on.
const nodeEnv = "REST_CLIENTS_NODE"

const (
	keys = 10_000
	ttl  = 5 * time.Second
)

// client is one HTTP/1.1 client doing lock ops: lock takes key, unlock
// frees it, both as owner.
type client interface {
	lock(ctx context.Context, key int, owner []byte) error
	unlock(ctx context.Context, key int, owner []byte) error
	close()
}

func main() {
	if os.Getenv(nodeEnv) != "" {
		err := serveNode()
		fmt.Fprintln(os.Stderr, "rest-clients node:", err)
		os.Exit(1)
	}
	url := flag.String("url", "", "a running node's REST endpoint (default: start one in a second process)")
	clients := flag.String("clients", "kahuna,nethttp,fasthttp", "the clients to run, in this order, each round")
	concurrency := flag.Int("concurrency", 64, "goroutines calling at once (each holds one connection)")
	duration := flag.Duration("duration", 5*time.Second, "measured time of one client's run")
	warmup := flag.Duration("warmup", time.Second, "unmeasured time before it")
	rounds := flag.Int("rounds", 1, "times to run every client")
	flag.Parse()
	err := withNode(*url, func(url string) error {
		return run(url, strings.Split(*clients, ","), *concurrency, *duration, *warmup, *rounds)
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "rest-clients:", err)
		os.Exit(1)
	}
}

// withNode calls f with url, or when it is "" with the endpoint of a node
// it starts in a second process and stops after f.
func withNode(url string, f func(url string) error) error {
	if url != "" {
		return f(url)
	}
	srv, err := twoproc.Start(nodeEnv)
	if err != nil {
		return err
	}
	defer srv.Stop()
	c, err := srv.Dial()
	if err != nil {
		return err
	}
	c.Close()
	return f("http://" + srv.Addr)
}

// serveNode serves an ephemeral node's wire API on addr until killed.
func serveNode() error {
	lis, err := twoproc.Listen()
	if err != nil {
		return err
	}
	n, err := kahuna.Open(kahuna.Config{Listener: lis, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	defer n.Close()
	select {}
}

func run(url string, names []string, concurrency int, duration, warmup time.Duration, rounds int) error {
	if concurrency < 1 || duration <= 0 || rounds < 1 {
		return errors.New("--concurrency, --duration and --rounds must be positive")
	}
	for _, name := range names {
		if _, err := newClient(name, url, concurrency); err != nil {
			return err
		}
	}
	fmt.Printf("%-9s %6s %12s %16s\n", "client", "round", "requests/s", "CPU a request")
	for r := 1; r <= rounds; r++ {
		for _, name := range names {
			c, err := newClient(name, url, concurrency)
			if err != nil {
				return err
			}
			res, err := measure(c, concurrency, duration, warmup)
			c.close()
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			fmt.Printf("%-9s %6d %12.0f %13.1f µs\n", name, r, res.perSecond, res.cpuPerRequest.Seconds()*1e6)
		}
	}
	return nil
}

func newClient(name, url string, concurrency int) (client, error) {
	switch name {
	case "kahuna":
		c, err := transport.DialREST([]string{url})
		if err != nil {
			return nil, err
		}
		return kahunaClient{c}, nil
	case "nethttp":
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = concurrency
		tr.DisableCompression = true
		return &netHTTPClient{url: url, c: &http.Client{Transport: tr}}, nil
	case "fasthttp":
		host := strings.TrimPrefix(url, "http://")
		return &fastHTTPClient{url: url, c: &fasthttp.HostClient{Addr: host, MaxConns: concurrency}}, nil
	}
	return nil, fmt.Errorf("unknown client %q: want kahuna, nethttp or fasthttp", name)
}

type result struct {
	perSecond     float64
	cpuPerRequest time.Duration
}

// measure runs lock ops on c from concurrency goroutines for warmup, then
// counts requests and this process's CPU time for duration.
func measure(c client, concurrency int, duration, warmup time.Duration) (result, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		counting atomic.Bool
		requests atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	for g := range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := []byte("owner-" + strconv.Itoa(g))
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for ctx.Err() == nil {
				key := r.IntN(keys)
				err := c.lock(ctx, key, owner)
				if err == nil {
					err = c.unlock(ctx, key, owner)
				}
				if err != nil {
					if ctx.Err() == nil {
						errOnce.Do(func() { firstErr = err; cancel() })
					}
					return
				}
				if counting.Load() {
					requests.Add(2)
				}
			}
		}()
	}
	time.Sleep(warmup)
	cpu0, start := cpuTime(), time.Now()
	counting.Store(true)
	time.Sleep(duration)
	counting.Store(false)
	n, cpu, elapsed := requests.Load(), cpuTime()-cpu0, time.Since(start)
	cancel()
	wg.Wait()
	if firstErr != nil {
		return result{}, firstErr
	}
	if n == 0 {
		return result{}, errors.New("no request answered")
	}
	return result{perSecond: float64(n) / elapsed.Seconds(), cpuPerRequest: cpu / time.Duration(n)}, nil
}

// cpuTime is the user and system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ---- kahuna's own client ----

type kahunaClient struct{ c *transport.RESTClient }

func (k kahunaClient) lock(ctx context.Context, key int, owner []byte) error {
	res, err := k.c.TryLock(ctx, keyName(key), owner, ttl, lease.Ephemeral)
	return check(res, err)
}

func (k kahunaClient) unlock(ctx context.Context, key int, owner []byte) error {
	res, err := k.c.Unlock(ctx, keyName(key), owner, lease.Ephemeral)
	return check(res, err)
}

func (k kahunaClient) close() { _ = k.c.Close() }

// check fails a call that was not answered with a lock outcome. A key
// another goroutine holds answers Busy and is counted like any answer.
func check(res lease.Result, err error) error {
	if err != nil {
		return err
	}
	if res.Status == lease.MustRetry || res.Status == lease.InvalidInput {
		return fmt.Errorf("answered %v", res.Status)
	}
	return nil
}

func keyName(key int) string { return "bench:" + strconv.Itoa(key) }

// ---- the libraries ----

// appendBody appends the JSON body kahuna's client sends for a try-lock
// (expiresMs set) or a try-unlock.
func appendBody(b []byte, key int, owner []byte, lock bool) []byte {
	b = append(b, `{"resource":"bench:`...)
	b = strconv.AppendInt(b, int64(key), 10)
	b = append(b, `","owner":"`...)
	b = base64.StdEncoding.AppendEncode(b, owner)
	b = append(b, `","expiresMs":`...)
	if lock {
		b = strconv.AppendInt(b, ttl.Milliseconds(), 10)
	} else {
		b = append(b, '0')
	}
	return append(b, `,"durability":0}`...)
}

// checkAnswer fails an answer that is not a lock outcome.
func checkAnswer(code int, body []byte) error {
	if code != http.StatusOK || !bytes.Contains(body, []byte(`"type":`)) {
		return fmt.Errorf("HTTP %d: %.200s", code, body)
	}
	return nil
}

func routeOf(lock bool) string {
	if lock {
		return "/v1/locks/try-lock"
	}
	return "/v1/locks/try-unlock"
}

type netHTTPClient struct {
	url string
	c   *http.Client
}

func (n *netHTTPClient) lock(ctx context.Context, key int, owner []byte) error {
	return n.call(ctx, key, owner, true)
}

func (n *netHTTPClient) unlock(ctx context.Context, key int, owner []byte) error {
	return n.call(ctx, key, owner, false)
}

func (n *netHTTPClient) call(ctx context.Context, key int, owner []byte, lock bool) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.url+routeOf(lock), bytes.NewReader(appendBody(nil, key, owner, lock)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := n.c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	return checkAnswer(resp.StatusCode, body)
}

func (n *netHTTPClient) close() { n.c.CloseIdleConnections() }

type fastHTTPClient struct {
	url string
	c   *fasthttp.HostClient
}

func (f *fastHTTPClient) lock(ctx context.Context, key int, owner []byte) error {
	return f.call(key, owner, true)
}

func (f *fastHTTPClient) unlock(ctx context.Context, key int, owner []byte) error {
	return f.call(key, owner, false)
}

// call has no context: fasthttp's client takes a timeout instead, and the
// run's calls end by themselves.
func (f *fastHTTPClient) call(key int, owner []byte, lock bool) error {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(f.url + routeOf(lock))
	req.Header.SetMethod(http.MethodPost)
	req.Header.SetContentType("application/json")
	req.SetBody(appendBody(nil, key, owner, lock))
	if err := f.c.DoTimeout(req, resp, 10*time.Second); err != nil {
		return err
	}
	return checkAnswer(resp.StatusCode(), resp.Body())
}

func (f *fastHTTPClient) close() { f.c.CloseIdleConnections() }
