package faults

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is a TCP proxy for the link from → to (a node's forwarding client
// dials it instead of the peer's endpoint). Bytes from the dialler travel
// on from → to, answers on to → from. A cut link holds bytes back until it
// heals (TCP would retransmit them), so a request sent into a partition may
// be served long after its caller gave up; Reset closes the connections.
type Proxy struct {
	net      *Network
	from, to uint64
	target   atomic.Pointer[string]
	ln       net.Listener
	stop     chan struct{}
	wg       sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// Proxy starts a proxy on loopback for from → to, forwarding to target
// (host:port; "" until SetTarget).
func (n *Network) Proxy(from, to uint64, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{net: n, from: from, to: to, ln: ln, stop: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	p.SetTarget(target)
	n.mu.Lock()
	n.proxies[p] = struct{}{}
	n.mu.Unlock()
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// SetTarget sets the address new connections are forwarded to (a node that
// restarted on another port).
func (p *Proxy) SetTarget(target string) { p.target.Store(&target) }

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Reset closes the proxy's open connections (the peer sees them break).
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// ResetProxies resets every proxy of links to or from node id.
func (n *Network) ResetProxies(id uint64) {
	n.mu.Lock()
	var ps []*Proxy
	for p := range n.proxies {
		if p.from == id || p.to == id {
			ps = append(ps, p)
		}
	}
	n.mu.Unlock()
	for _, p := range ps {
		p.Reset()
	}
}

// Close stops the proxy and its connections.
func (p *Proxy) Close() error {
	select {
	case <-p.stop:
		return nil
	default:
	}
	close(p.stop)
	err := p.ln.Close()
	p.Reset()
	p.wg.Wait()
	p.net.mu.Lock()
	delete(p.net.proxies, p)
	p.net.mu.Unlock()
	return err
}

func (p *Proxy) track(c net.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		select {
		case <-p.stop:
			return false
		default:
		}
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
	return true
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer client.Close()
	// A new connection needs the link open both ways, like a handshake;
	// while it is cut the dial hangs.
	if !p.net.waitOpen(p.from, p.to, p.stop) || !p.net.waitOpen(p.to, p.from, p.stop) {
		return
	}
	server, err := net.DialTimeout("tcp", *p.target.Load(), 2*time.Second)
	if err != nil {
		return
	}
	defer server.Close()
	if !p.track(client, true) {
		return
	}
	defer p.track(client, false)
	if !p.track(server, true) {
		return
	}
	defer p.track(server, false)
	done := make(chan struct{}, 2)
	go func() { p.pipe(server, client, p.from, p.to); done <- struct{}{} }()
	go func() { p.pipe(client, server, p.to, p.from); done <- struct{}{} }()
	<-done
	client.Close()
	server.Close()
	<-done
}

// pipe copies src to dst through the link from → to.
func (p *Proxy) pipe(dst, src net.Conn, from, to uint64) {
	buf := make([]byte, 32<<10)
	for {
		k, err := src.Read(buf)
		if k > 0 {
			if !p.net.waitOpen(from, to, p.stop) {
				return
			}
			if _, delay := p.net.decide(from, to); delay > 0 {
				p.net.Delayed.Add(1)
				select {
				case <-time.After(delay):
				case <-p.stop:
					return
				}
			}
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			if tc, ok := dst.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			return
		}
	}
}
