package transport

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/kahunago/kahuna/lease"
)

// h1Pool sends the REST client's calls to one cleartext endpoint over
// kept-alive HTTP/1.1 connections, each call written and its answer read
// on the caller's goroutine. net/http's Transport hands every request
// from the caller to a writer goroutine and the answer from a reader
// goroutine back; on two shared cores that cost the client about as much
// CPU as the node spent serving the call. Answers are read with
// http.ReadResponse, so anything a server may send (chunked bodies,
// Connection: close) is understood. Endpoints behind a proxy, and https
// ones, stay on net/http (RESTClient).
type h1Pool struct {
	addr   string // host:port, dialed and sent as Host
	dialer net.Dialer

	mu     sync.Mutex
	idle   []*h1Conn // most recently used last
	closed bool
}

// h1Conn is one kept-alive connection.
type h1Conn struct {
	c     net.Conn
	br    *bufio.Reader
	buf   []byte    // the request being written
	since time.Time // when it last went idle
}

const (
	// h1MaxIdle bounds the idle connections kept per endpoint, as
	// MaxIdleConnsPerHost did on net/http.
	h1MaxIdle = 64
	// h1ProbeAfter: a connection idle for longer is checked before it is
	// used again, since the server may have closed it meanwhile (its idle
	// timeout, a restart); one used more recently is sent on at once.
	h1ProbeAfter = 50 * time.Millisecond
	// h1MaxReply bounds an answer's body (a lock answer is under 1 KiB).
	h1MaxReply = 1 << 20
)

// aLongTimeAgo is a deadline in the past: it makes a blocked Read or
// Write on a connection return at once.
var aLongTimeAgo = time.Unix(1, 0)

// post sends body to /v1/locks/path and returns the answer's status and
// body. A connection that cannot be opened is reported wrapping
// lease.ErrNotApplied (nothing was sent); any later failure leaves the
// outcome unknown.
func (p *h1Pool) post(ctx context.Context, path, token string, body []byte) (int, []byte, error) {
	if token != "" && !httpguts.ValidHeaderFieldValue(token) {
		return 0, nil, fmt.Errorf("%w: token is not a valid header value", lease.ErrNotApplied)
	}
	conn, err := p.get(ctx)
	if err != nil {
		return 0, nil, err
	}
	// A context that ends makes the blocked Write or Read return; the
	// connection is dropped then, since a request may be half sent.
	stop := func() bool { return true }
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, func() { _ = conn.c.SetDeadline(aLongTimeAgo) })
	}
	code, reply, keep, err := conn.roundTrip(p.addr, path, token, body)
	if !stop() {
		conn.c.Close()
		return 0, nil, ctx.Err()
	}
	if err != nil || !keep {
		conn.c.Close()
		return code, reply, err
	}
	p.put(conn)
	return code, reply, nil
}

func (c *h1Conn) roundTrip(host, path, token string, body []byte) (code int, reply []byte, keep bool, err error) {
	b := append(c.buf[:0], "POST /v1/locks/"...)
	b = append(b, path...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	b = append(b, "\r\nUser-Agent: kahuna-go\r\nContent-Type: application/json\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	if token != "" {
		b = append(b, "\r\nAuthorization: Bearer "...)
		b = append(b, token...)
	}
	b = append(b, "\r\n\r\n"...)
	b = append(b, body...)
	c.buf = b
	if _, err := c.c.Write(b); err != nil {
		return 0, nil, false, err
	}
	return c.readAnswer()
}

// readAnswer reads the answer to the request just written: itself when
// its head is in parseFastResponse's subset, else with http.ReadResponse
// (interim 1xx answers skipped).
func (c *h1Conn) readAnswer() (code int, reply []byte, keep bool, err error) {
	head, err := peekHead(c.br, func() {})
	if err != nil {
		return 0, nil, false, err
	}
	if a, ok := parseFastResponse(head, h1MaxReply); ok {
		_, _ = c.br.Discard(len(head))
		reply = make([]byte, a.contentLength)
		if _, err := io.ReadFull(c.br, reply); err != nil {
			return 0, nil, false, err
		}
		return a.code, reply, !a.close, nil
	}
	resp, err := http.ReadResponse(c.br, nil)
	for err == nil && resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
		resp, err = http.ReadResponse(c.br, nil)
	}
	if err != nil {
		return 0, nil, false, err
	}
	defer resp.Body.Close()
	if reply, err = readReply(resp.Body); err != nil {
		return 0, nil, false, err
	}
	return resp.StatusCode, reply, !resp.Close && resp.StatusCode != http.StatusSwitchingProtocols, nil
}

// readReply reads an answer's body, at most h1MaxReply bytes.
func readReply(body io.Reader) ([]byte, error) {
	reply, err := io.ReadAll(io.LimitReader(body, h1MaxReply+1))
	if err == nil && len(reply) > h1MaxReply {
		err = fmt.Errorf("answer over %d bytes", h1MaxReply)
	}
	return reply, err
}

// get takes an idle connection that is still open, or dials a new one.
func (p *h1Pool) get(ctx context.Context) (*h1Conn, error) {
	p.mu.Lock()
	for len(p.idle) > 0 {
		c := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		p.mu.Unlock()
		if time.Since(c.since) < h1ProbeAfter || c.open() {
			return c, nil
		}
		c.c.Close()
		p.mu.Lock()
	}
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return nil, errClosedUnsent
	}
	nc, err := p.dialer.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: %w", lease.ErrNotApplied, err)
	}
	return &h1Conn{c: nc, br: bufio.NewReaderSize(nc, 4096)}, nil
}

// open reports whether an idle connection can carry a request: nothing
// was sent on it since its last answer and the server has not closed it.
func (c *h1Conn) open() bool {
	if c.br.Buffered() > 0 {
		return false
	}
	return connOpen(c.c)
}

func (p *h1Pool) put(c *h1Conn) {
	c.since = time.Now()
	p.mu.Lock()
	if p.closed || len(p.idle) >= h1MaxIdle {
		p.mu.Unlock()
		c.c.Close()
		return
	}
	p.idle = append(p.idle, c)
	p.mu.Unlock()
}

// close closes the idle connections; those in use close when their call
// ends.
func (p *h1Pool) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, c := range idle {
		c.c.Close()
	}
}
