package transport

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection, the first's
// send buffer and the second's receive buffer made small, so that a peer
// that does not read fills them quickly.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	l := listen(t)
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	peer, err := net.Dial("tcp", l.Addr().String())
	must(t, err)
	c, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); peer.Close() })
	must(t, c.(*net.TCPConn).SetWriteBuffer(16<<10))
	must(t, peer.(*net.TCPConn).SetReadBuffer(16<<10))
	return c.(*net.TCPConn), peer.(*net.TCPConn)
}

// frameOf is a frame body of n bytes, each the frame's number i.
func frameOf(i, n int) []byte {
	b := make([]byte, n)
	for k := range b {
		b[k] = byte(i)
	}
	return b
}

// writeFrame sends body as one frame, as a stream's SendMsg sends a
// message, waiting for room.
func writeFrame(f *frameConn, body []byte) error {
	encErr, err := f.writeMsg(&body, appendClientMsg)
	if encErr != nil {
		return encErr
	}
	return err
}

// writeFrameNow sends body as one frame without waiting (writeNowMsg).
func writeFrameNow(f *frameConn, body []byte, failed func()) bool {
	return f.writeNowMsg(&body, appendClientMsg, failed)
}

// neverWaits writes frames of 4 KB with send to a peer that does not
// read, until send declines one, each call bounded by 5 s (a write that
// waits for room waits frameWriteTimeout, 10 s), then reads them all and
// checks that every frame sent arrived whole and in order, a frame taken
// in part included, and that a frame written after one was taken in part
// follows it.
func neverWaits(t *testing.T, send func(f *frameConn, body []byte) bool) error {
	c, peer := tcpPair(t)
	f := &frameConn{conn: c, raw: rawConnOf(c)}
	if f.raw == nil {
		t.Fatal("a TCP connection has no raw socket")
	}
	const size = 4 << 10
	sent, partial := 0, false
	for i := 0; i < 1000; i++ {
		done := make(chan bool, 1)
		go func() { done <- send(f, frameOf(i, size)) }()
		var ok bool
		select {
		case ok = <-done:
		case <-time.After(5 * time.Second):
			go io.Copy(io.Discard, peer) // let the waiting write end
			return fmt.Errorf("frame %d: the write waited for a peer that does not read", i)
		}
		if !ok {
			break
		}
		sent++
		if !f.wmu.TryLock() { // a goroutine finishes a frame taken in part
			partial = true
			break
		}
		f.wmu.Unlock()
	}
	if sent < 2 || sent == 1000 {
		t.Fatalf("%d frames sent before the socket was full", sent)
	}
	after := make(chan error, 1)
	go func() { after <- writeFrame(f, frameOf(sent, size)) }() // waits for room, after any rest
	r := &frameConn{conn: peer, r: bufio.NewReader(peer)}
	for i := 0; i <= sent; i++ {
		b, err := r.read(1 << 20)
		if err != nil {
			t.Fatalf("frame %d of %d: %v", i, sent+1, err)
		}
		if len(b) != size || b[0] != byte(i) || b[size-1] != byte(i) {
			t.Fatalf("frame %d: %d bytes starting %d, want %d bytes of %d", i, len(b), b[0], size, i)
		}
	}
	must(t, <-after)
	t.Logf("%d frames sent without waiting, the last taken in part: %v", sent, partial)
	return nil
}

// A frame written now never waits for a peer that stopped reading: the
// write is declined, or finished by a goroutine of its own, and the
// frames arrive whole and in order once the peer reads.
func TestWriteNowNeverWaits(t *testing.T) {
	if err := neverWaits(t, func(f *frameConn, b []byte) bool { return writeFrameNow(f, b, func() {}) }); err != nil {
		t.Fatal(err)
	}
}

// Negative control: the check above catches a writer that waits for room.
func TestWriteNowNeverWaitsControl(t *testing.T) {
	if err := neverWaits(t, func(f *frameConn, b []byte) bool { return writeFrame(f, b) == nil }); err == nil {
		t.Fatal("the check passed a write that waits for room")
	}
}

// One write on a full socket takes nothing and returns at once, and the
// bytes taken before it arrive.
func TestWriteOnceOnAFullSocketTakesNothing(t *testing.T) {
	c, peer := tcpPair(t)
	rc := rawConnOf(&prefixConn{Conn: c}) // as the server's connections come
	if rc == nil {
		t.Fatal("no raw socket under a prefixConn")
	}
	b := make([]byte, 4<<10)
	once := newOneWrite()
	total := 0
	for i := 0; ; i++ {
		n := once.writeOnce(rc, b)
		total += n
		if n < len(b) {
			break
		}
		if i == 1000 {
			t.Fatal("4 MB taken by a socket whose peer does not read")
		}
	}
	if n := once.writeOnce(rc, b); n != 0 {
		t.Fatalf("a full socket took %d bytes", n)
	}
	got, err := io.ReadFull(peer, make([]byte, total))
	if err != nil || got != total {
		t.Fatalf("read %d of %d bytes: %v", got, total, err)
	}
	// Under TLS a frame is never written to the socket as it is.
	if rawConnOf(tls.Server(c, &tls.Config{})) != nil || rawConnOf(&prefixConn{Conn: tls.Server(c, &tls.Config{})}) != nil {
		t.Fatal("a TLS connection gave its socket for raw writes")
	}
}

// A frame's write to a peer that stopped reading fails once its write
// deadline passes, though frames written close together set the deadline
// once (it moves only when less than half the bound is left).
func TestFrameWriteDeadline(t *testing.T) {
	c, _ := tcpPair(t) // the peer never reads
	f := &frameConn{conn: c, wtimeout: 400 * time.Millisecond}
	must(t, writeFrame(f, frameOf(0, 16)))
	first := f.wdeadline
	if first.IsZero() {
		t.Fatal("no write deadline set")
	}
	must(t, writeFrame(f, frameOf(1, 16)))
	if !f.wdeadline.Equal(first) {
		t.Fatalf("deadline moved from %v to %v with more than half of it left", first, f.wdeadline)
	}
	start := time.Now()
	var err error
	for i := 2; err == nil && i < 100_000; i++ {
		err = writeFrame(f, frameOf(i, 64<<10))
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("writing to a peer that does not read: %v, want a timeout", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the write to a full socket failed after %v, want about its 400 ms bound", took)
	}
}
