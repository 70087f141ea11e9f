package packconn

import (
	"encoding/binary"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
)

// Every message of every sender arrives whole, once, and each sender's in
// the order it sent them.
func TestEveryMessageArrivesOnceInOrder(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	c := New(a)
	const senders, each = 8, 500
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range each {
				var m [8]byte
				binary.BigEndian.PutUint32(m[:], uint32(s))
				binary.BigEndian.PutUint32(m[4:], uint32(i))
				if err := c.Send(m[:]); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	next := make([]uint32, senders)
	var m [8]byte
	for range senders * each {
		if _, err := io.ReadFull(b, m[:]); err != nil {
			t.Fatal(err)
		}
		s, i := binary.BigEndian.Uint32(m[:]), binary.BigEndian.Uint32(m[4:])
		if s >= senders || i != next[s] {
			t.Fatalf("message %d of sender %d, want %d", i, s, next[s])
		}
		next[s]++
	}
	wg.Wait()
}

// Once a write fails, Send returns its error.
func TestSendAfterAFailedWriteFails(t *testing.T) {
	a, b := net.Pipe()
	b.Close()
	c := New(a)
	_ = c.Send([]byte("x")) // queued; its write fails
	for c.Send([]byte("y")) == nil {
		runtime.Gosched() // until the writer has failed
	}
}
