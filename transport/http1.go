package transport

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The REST fast path: the HTTP/1.x connections of the shared port are
// read here first. A request in the subset that parseFastHead takes (a
// keep-alive POST of JSON to a lock route, as Kahuna's clients send) is
// served on the connection's goroutine, with no per-request goroutine,
// header map or background read; net/http spent about half of a REST
// request's CPU on those. The first request outside the subset is handed,
// with the rest of the connection, to net/http, which answers it and any
// later ones as it always has (errors, 401s, /metrics, the admin API).

const (
	// fastHeadMax bounds a head the fast path reads; a longer one goes
	// to net/http (whose limit is 1 MB).
	fastHeadMax = 4096
	// fastBodyKeep is the largest body buffer a connection keeps for its
	// next request (a lock request is well under 1 KiB).
	fastBodyKeep = 4096
	// Timeouts as net/http's (newHTTPServer): how long a connection may
	// idle between requests, and how long a request may take to arrive.
	fastIdleTimeout = 5 * time.Minute
	fastReadTimeout = 10 * time.Second
)

// http1Conns serves the fast path's connections and tracks them for
// Shutdown and Close.
type http1Conns struct {
	s      *Server
	ctx    context.Context // ends at Close: requests in flight give up
	cancel context.CancelFunc

	mu       sync.Mutex
	conns    map[*http1Conn]struct{}
	shutting bool
	idle     chan struct{} // closed when conns empties during shutdown

	// Counted for tests: requests served here, connections handed on.
	served, handedOff atomic.Int64
}

type http1Conn struct {
	c    net.Conn
	busy bool // a request is being served (guarded by http1Conns.mu)
}

func newHTTP1Conns(s *Server) *http1Conns {
	ctx, cancel := context.WithCancel(context.Background())
	return &http1Conns{s: s, ctx: ctx, cancel: cancel, conns: make(map[*http1Conn]struct{})}
}

// serve reads requests from c until it closes, fails, or sends one
// outside the fast path, which handOff then gets with the bytes read.
func (h *http1Conns) serve(c net.Conn, handOff func(net.Conn)) {
	hc := &http1Conn{c: c}
	if !h.add(hc) {
		c.Close()
		return
	}
	defer h.remove(hc)
	defer func() {
		// As net/http does: a panic serving a connection closes it and
		// is logged; the node goes on.
		if p := recover(); p != nil {
			h.s.log.Error("panic serving a REST connection", "remote", c.RemoteAddr().String(),
				"panic", p, "stack", string(debug.Stack()))
			c.Close()
		}
	}()
	br := bufio.NewReaderSize(c, fastHeadMax)
	bw := bufio.NewWriterSize(c, 4096)
	var body, reply []byte // kept for the connection's next request
	for {
		if br.Buffered() == 0 {
			_ = c.SetReadDeadline(time.Now().Add(fastIdleTimeout))
			if _, err := br.Peek(1); err != nil {
				c.Close()
				return
			}
		}
		// The request has begun: the rest of it must come within
		// fastReadTimeout (set only if it is not all here yet).
		waited := false
		wait := func() {
			if !waited {
				waited = true
				_ = c.SetReadDeadline(time.Now().Add(fastReadTimeout))
			}
		}
		head, err := peekHead(br, wait)
		if err != nil {
			c.Close()
			return
		}
		fh, ok := parseFastHead(head, h.s.opts.MaxRequestBytes)
		if ok && h.s.opts.Tokens != nil && check(h.s.opts.Tokens, fh.auth) != "" {
			ok = false // net/http answers 401, saying why
		}
		if !ok {
			// Answers to earlier pipelined requests go out first.
			if err := bw.Flush(); err != nil {
				c.Close()
				return
			}
			h.handOff(hc, br, handOff)
			return
		}
		if !h.setBusy(hc, true) {
			c.Close() // Shutdown closed it while idle
			return
		}
		_, _ = br.Discard(len(head))
		body = grow(body, fh.contentLength)
		if br.Buffered() < len(body) {
			wait()
		}
		if _, err := io.ReadFull(br, body); err != nil {
			h.setBusy(hc, false)
			c.Close()
			return
		}
		var code int
		code, reply = h.s.restAnswer(h.ctx, reply[:0], fh.route, body)
		h.served.Add(1)
		if cap(body) > fastBodyKeep {
			body = nil // a large body's buffer is not held while the connection idles
		}
		writeResponse(bw, code, reply, fh.close)
		if fh.close || br.Buffered() == 0 {
			// Pipelined requests already here are answered before
			// the replies go out in one write.
			if err := bw.Flush(); err != nil {
				h.setBusy(hc, false)
				c.Close()
				return
			}
		}
		if !h.setBusy(hc, false) || fh.close {
			c.Close()
			return
		}
	}
}

// peekHead returns the head of the next request, through the first empty
// line, without consuming it; wait is called before it blocks for more
// bytes. A line may end with a bare LF here (the parser then refuses the
// head, and net/http reads it), so such a request is not left waiting. A
// head over fastHeadMax is returned cut short, which the parser refuses.
func peekHead(br *bufio.Reader, wait func()) ([]byte, error) {
	for from := 0; ; {
		buf, _ := br.Peek(br.Buffered())
		for i := from; i < len(buf); i++ {
			if buf[i] != '\n' {
				continue
			}
			if i+1 < len(buf) && buf[i+1] == '\n' {
				return buf[:i+2], nil
			}
			if i+2 < len(buf) && buf[i+1] == '\r' && buf[i+2] == '\n' {
				return buf[:i+3], nil
			}
		}
		if len(buf) == fastHeadMax {
			return buf, nil
		}
		from = max(0, len(buf)-2)
		wait()
		if _, err := br.Peek(len(buf) + 1); err != nil {
			return nil, err
		}
	}
}

// handOff gives the connection, replaying what br holds, to net/http.
func (h *http1Conns) handOff(hc *http1Conn, br *bufio.Reader, handOff func(net.Conn)) {
	buffered, _ := br.Peek(br.Buffered())
	_ = hc.c.SetReadDeadline(time.Time{})
	h.handedOff.Add(1)
	handOff(&prefixConn{Conn: hc.c, prefix: bytes.Clone(buffered)})
}

func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}

// writeResponse writes one reply as net/http would for our handlers:
// status line, Content-Type, Date, Content-Length (and Connection: close
// when the request asked for it).
func writeResponse(bw *bufio.Writer, code int, body []byte, close bool) {
	bw.WriteString("HTTP/1.1 ")
	bw.WriteString(strconv.Itoa(code))
	bw.WriteByte(' ')
	bw.WriteString(http.StatusText(code))
	bw.WriteString("\r\nContent-Type: " + jsonContentType + "\r\nDate: ")
	bw.Write(httpDate())
	bw.WriteString("\r\nContent-Length: ")
	bw.WriteString(strconv.Itoa(len(body)))
	if close {
		bw.WriteString("\r\nConnection: close")
	}
	bw.WriteString("\r\n\r\n")
	bw.Write(body)
}

// dateCache holds the Date header of the current second.
var dateCache atomic.Pointer[cachedDate]

type cachedDate struct {
	sec int64
	b   []byte
}

func httpDate() []byte {
	now := time.Now()
	if d := dateCache.Load(); d != nil && d.sec == now.Unix() {
		return d.b
	}
	d := &cachedDate{sec: now.Unix(), b: now.UTC().AppendFormat(nil, http.TimeFormat)}
	dateCache.Store(d)
	return d.b
}

func (h *http1Conns) add(hc *http1Conn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.shutting {
		return false
	}
	h.conns[hc] = struct{}{}
	return true
}

func (h *http1Conns) remove(hc *http1Conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.conns, hc)
	if h.shutting && len(h.conns) == 0 && h.idle != nil {
		close(h.idle)
		h.idle = nil
	}
}

// setBusy marks hc busy or idle; false means the server is shutting down
// and hc must close (an idle one Shutdown has closed already).
func (h *http1Conns) setBusy(hc *http1Conn, busy bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	hc.busy = busy
	return !h.shutting
}

// shutdown closes the idle connections, lets each busy one finish its
// request, and returns when all are gone.
func (h *http1Conns) shutdown() {
	h.mu.Lock()
	h.shutting = true
	for hc := range h.conns {
		if !hc.busy {
			hc.c.Close()
		}
	}
	var wait chan struct{}
	if len(h.conns) > 0 {
		wait = make(chan struct{})
		h.idle = wait
	}
	h.mu.Unlock()
	if wait != nil {
		<-wait
	}
}

// close closes every connection at once; requests in flight fail.
func (h *http1Conns) close() {
	h.cancel()
	h.mu.Lock()
	h.shutting = true
	for hc := range h.conns {
		hc.c.Close()
	}
	h.mu.Unlock()
}
