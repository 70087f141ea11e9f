package transport

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// http2Preface opens every HTTP/2 connection (RFC 9113 §3.4). A cleartext
// connection that starts with it speaks HTTP/2 with prior knowledge (h2c),
// which is how gRPC clients reach an http:// URL; no HTTP/1.x request can
// start with it ("PRI" is reserved so that none does).
const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// DefaultSniffTimeout bounds how long a new connection on the shared port
// may take to send the bytes that tell HTTP/2 from HTTP/1.x; a connection
// silent for longer is closed, so it holds no goroutine.
const DefaultSniffTimeout = 10 * time.Second

// sniffer splits one listener by the first bytes of each connection: an
// HTTP/2 preface goes to grpcs (served by the native grpc.Server), anything
// else to http1 when set (the REST fast path, which hands what it does not
// serve to https), else to https (served by net/http). Accepted
// connections are classified on their own goroutines, so a slow one holds
// up nobody else. The listener underneath is closed once both halves are.
type sniffer struct {
	root    net.Listener
	timeout time.Duration
	grpcs   *sniffed
	https   *sniffed
	http1   func(c net.Conn, toHTTPS func(net.Conn))
	// grpcOnly: no HTTP half; the rest goes to the gRPC half.
	grpcOnly bool
	// frames serves a connection in kahuna's framing (frames.go).
	frames func(net.Conn)

	mu     sync.Mutex
	open   int // halves not yet closed
	closed chan struct{}
	err    error // the root's Accept error, once it failed

	// Counted for tests: connections handed to each half, and dropped
	// (silent or failed before deciding).
	toGRPC, toHTTP, toFrames, dropped atomic.Int64
}

// newSniffer splits root. With grpcOnly set there is no HTTP half (it is
// closed from the start): what is neither HTTP/2 nor framed goes to the
// gRPC half too, whose server closes it.
func newSniffer(root net.Listener, timeout time.Duration, frames func(net.Conn), http1 func(net.Conn, func(net.Conn)), grpcOnly bool) *sniffer {
	if timeout <= 0 {
		timeout = DefaultSniffTimeout
	}
	s := &sniffer{root: root, timeout: timeout, frames: frames, http1: http1, grpcOnly: grpcOnly, open: 2, closed: make(chan struct{})}
	s.grpcs = &sniffed{s: s, conns: make(chan net.Conn), done: make(chan struct{})}
	s.https = &sniffed{s: s, conns: make(chan net.Conn), done: make(chan struct{})}
	if grpcOnly {
		s.https.Close()
	}
	go s.acceptLoop()
	return s
}

func (s *sniffer) acceptLoop() {
	for {
		c, err := s.root.Accept()
		if err != nil {
			// Accept on a net.Listener fails for good (Go retries the
			// temporary errors of its own listeners internally).
			s.mu.Lock()
			s.err = err
			s.mu.Unlock()
			close(s.closed)
			return
		}
		go s.classify(c)
	}
}

// classify reads until the first bytes either match the whole preface or
// differ from it (an HTTP/1.x request differs at its first byte), then
// hands the connection, bytes replayed, to its half.
func (s *sniffer) classify(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(s.timeout))
	buf := make([]byte, len(http2Preface))
	n := 0
	for n < len(buf) && bytes.HasPrefix([]byte(http2Preface), buf[:n]) {
		m, err := c.Read(buf[n:])
		n += m
		if err != nil {
			if bytes.HasPrefix([]byte(http2Preface), buf[:n]) {
				// Silent past the timeout, or gone, before saying
				// which it speaks.
				s.dropped.Add(1)
				c.Close()
				return
			}
			break // a partial HTTP/1.x request: net/http answers the error
		}
	}
	_ = c.SetReadDeadline(time.Time{})
	pc := &prefixConn{Conn: c, prefix: buf[:n]}
	if n == len(http2Preface) && string(buf) == http2Preface {
		s.toGRPC.Add(1)
		s.grpcs.deliver(pc)
		return
	}
	if s.frames != nil && n > 0 && buf[0] == framesMagic[0] {
		s.toFrames.Add(1)
		s.frames(pc)
		return
	}
	s.toHTTP.Add(1)
	next := s.https.deliver
	if s.grpcOnly {
		next = s.grpcs.deliver
	}
	if s.http1 != nil {
		s.http1(pc, next)
		return
	}
	next(pc)
}

// halfClosed closes the root once both halves are closed.
func (s *sniffer) halfClosed() {
	s.mu.Lock()
	s.open--
	last := s.open == 0
	s.mu.Unlock()
	if last {
		s.root.Close()
	}
}

// sniffed is one half of a sniffer: a net.Listener yielding the
// connections classified for it.
type sniffed struct {
	s     *sniffer
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func (l *sniffed) deliver(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.done:
		c.Close()
	}
}

func (l *sniffed) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-l.s.closed:
		l.s.mu.Lock()
		err := l.s.err
		l.s.mu.Unlock()
		return nil, err
	}
}

func (l *sniffed) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.s.halfClosed()
	})
	return nil
}

func (l *sniffed) Addr() net.Addr { return l.s.root.Addr() }

// prefixConn replays the sniffed bytes before reading on from the
// connection.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
