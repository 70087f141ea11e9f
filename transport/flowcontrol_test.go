package transport

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestNoPingsPerCall: calls one after another cost no HTTP/2 PING frames.
// grpc's bandwidth estimation, on unless both ends fix their flow-control
// windows, pings after nearly every burst of data a side receives, which
// on a stream of small answers is one more write and read per round trip.
func TestNoPingsPerCall(t *testing.T) {
	srv := startServer(t, newFake(), ServerOptions{NodeName: "n1"})
	p := startFrameCounter(t, srv.native)
	c := dial(t, []string{"http://" + p.addr}, WithGRPCOnly())
	ctx := testCtx(t)
	const calls = 200
	for i := range calls {
		owner := []byte{'o', byte(i)}
		if _, err := c.TryLock(ctx, "hot", owner, time.Minute, eph); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Unlock(ctx, "hot", owner, eph); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	p.close()
	if data := p.frames[frameData].Load(); data < calls {
		t.Fatalf("the counter saw %d DATA frames for %d calls: it does not see the traffic", data, 2*calls)
	}
	t.Logf("%d DATA frames, %d PING frames", p.frames[frameData].Load(), p.frames[framePing].Load())
	if pings := p.frames[framePing].Load(); pings > 4 {
		t.Fatalf("%d PING frames for %d calls, want none per call", pings, 2*calls)
	}
}

const (
	frameData = 0x0
	framePing = 0x6
)

// frameCounter is a TCP proxy that counts the HTTP/2 frames passing it,
// by type, in both directions.
type frameCounter struct {
	addr   string
	lis    net.Listener
	frames [10]atomic.Int64
	wg     sync.WaitGroup
}

func startFrameCounter(t *testing.T, target string) *frameCounter {
	lis := listen(t)
	p := &frameCounter{addr: lis.Addr().String(), lis: lis}
	t.Cleanup(p.close)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			in, err := lis.Accept()
			if err != nil {
				return // the test ended
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				t.Error(err)
				return
			}
			p.wg.Add(2)
			go p.copy(t, out, in, len("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
			go p.copy(t, in, out, 0)
		}
	}()
	return p
}

// close stops accepting and returns once every connection has ended.
func (p *frameCounter) close() {
	p.lis.Close()
	p.wg.Wait()
}

// copy forwards src to dst frame by frame, after a preface of n bytes.
func (p *frameCounter) copy(t *testing.T, dst, src net.Conn, preface int) {
	defer p.wg.Done()
	defer dst.Close()
	defer src.Close()
	r := bufio.NewReader(src)
	if _, err := io.CopyN(dst, r, int64(preface)); err != nil {
		t.Error(err)
		return
	}
	var h [9]byte
	for {
		if _, err := io.ReadFull(r, h[:]); err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				t.Logf("frame counter: %v", err) // a connection reset at Close
			}
			return
		}
		if typ := int(h[3]); typ < len(p.frames) {
			p.frames[typ].Add(1)
		}
		n := int64(binary.BigEndian.Uint32(append([]byte{0}, h[:3]...)))
		if _, err := dst.Write(h[:]); err != nil {
			return
		}
		if _, err := io.CopyN(dst, r, n); err != nil {
			return
		}
	}
}
