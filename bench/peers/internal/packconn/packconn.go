// Package packconn sends many goroutines' small messages over one
// connection as kahuna's Go client sends its callers' requests: they queue
// them, and one writer goroutine writes whatever has gathered in one
// socket write, after one yield so that callers that are runnable add
// theirs first. Without the yield a write carries a message or two and a
// floor makes a quarter of its figures here.
package packconn

import (
	"io"
	"runtime"
	"sync"
)

// Conn is one connection's sending side.
type Conn struct {
	w       io.Writer
	mu      sync.Mutex
	pending []byte
	err     error // the write that failed; every later Send returns it
	wake    chan struct{}
}

// New starts the writer of w. It runs until a write fails.
func New(w io.Writer) *Conn {
	c := &Conn{w: w, wake: make(chan struct{}, 1)}
	go c.writer()
	return c
}

// Send queues a copy of msg, or returns the error of a failed write.
func (c *Conn) Send(msg []byte) error {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return c.err
	}
	c.pending = append(c.pending, msg...)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return nil
}

func (c *Conn) writer() {
	var spare []byte
	for range c.wake {
		runtime.Gosched()
		c.mu.Lock()
		if len(c.pending) == 0 { // its messages went out with the last wake's
			c.mu.Unlock()
			continue
		}
		b := c.pending
		c.pending = spare[:0]
		c.mu.Unlock()
		if _, err := c.w.Write(b); err != nil {
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
			return
		}
		spare = b
	}
}
