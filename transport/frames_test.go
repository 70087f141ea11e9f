package transport

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kahunago/kahuna/lease"
)

// A client on an http:// endpoint speaks kahuna's framing on both ports,
// Locks and batch calls alike, and no connection of its reaches grpc.
func TestFramesOnBothPorts(t *testing.T) {
	srv := startServer(t, newWaitingFake(), ServerOptions{})
	for _, addr := range []string{srv.native, srv.mixed} {
		before := srv.frames.accepted.Load()
		c := dial(t, []string{"http://" + addr}, WithStreamsPerEndpoint(1))
		ctx := testCtx(t)
		if r, err := c.TryLock(ctx, "r/"+addr, []byte("A"), time.Minute, eph); err != nil || r.Status != lease.Locked {
			t.Fatalf("TryLock at %s: %v %v", addr, r, err)
		}
		if r, err := c.Lock(ctx, "free/"+addr, []byte("A"), time.Minute, time.Second, eph); err != nil || r.Status != lease.Locked {
			t.Fatalf("Lock at %s: %v %v", addr, r, err)
		}
		if n := srv.frames.accepted.Load() - before; n != 2 {
			t.Fatalf("%d framed streams at %s, want 2 (a batch stream and a LockStream)", n, addr)
		}
	}
	if sn := shared(t, srv); sn.toGRPC.Load() != 0 || sn.toFrames.Load() != 2 {
		t.Fatalf("shared port: %d connections to gRPC and %d framed, want 0 and 2", sn.toGRPC.Load(), sn.toFrames.Load())
	}
}

// A server that does not serve the native streams (an older kahuna)
// closes a framed hello; the client then speaks gRPC to it.
func TestFramesFallBackToGRPC(t *testing.T) {
	srv := startServer(t, newWaitingFake(), ServerOptions{})
	srv.noLockStream = true
	c := dial(t, []string{"http://" + srv.native})
	if r, err := c.TryLock(testCtx(t), "r", []byte("A"), time.Minute, eph); err != nil || r.Status != lease.Locked {
		t.Fatalf("TryLock: %v %v", r, err)
	}
	d := c.endpoints[0].streams[0].frames
	if d.use() {
		t.Fatal("the client still means to frame streams to a server that closed its hello")
	}
	// For a while only: an upgraded node at the same address gets it back.
	if until := time.Unix(0, d.offUntil.Load()); time.Until(until) > framesOff {
		t.Fatalf("framing off until %v, more than %v from now", until, framesOff)
	}
	d.offUntil.Store(time.Now().Add(-time.Second).UnixNano())
	if !d.use() {
		t.Fatal("the framing is still off once its while is over")
	}
	if n := srv.frames.accepted.Load(); n != 0 {
		t.Fatalf("%d framed streams accepted", n)
	}
}

// The ports of an older kahuna, which do not speak the framing, turn it off
// at the hello at once: its native port (grpc-go's server, which reads a
// whole HTTP/2 preface before it closes a connection that does not open
// with one) and its shared one (net/http, which answers a request line it
// cannot parse with 400).
func TestFramesOffAtAnOlderServer(t *testing.T) {
	srv := startServer(t, newWaitingFake(), ServerOptions{})
	grpcOnly := listen(t)
	go srv.serveGRPC(grpcOnly) // no sniffing: a native port before the framing
	httpOnly := listen(t)
	hs := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: time.Minute}
	go hs.Serve(httpOnly)
	t.Cleanup(func() { hs.Close() })
	for _, lis := range []net.Listener{grpcOnly, httpOnly} {
		d := &frameDialer{addr: lis.Addr().String()}
		// Not a timeout: the dial's own bound is 5 s, the test's 20 s.
		if _, err := d.open(testCtx(t), frameKindBatch); !errors.Is(err, errNoFrames) {
			t.Fatalf("open at %s = %v, want errNoFrames", lis.Addr(), err)
		}
		if d.use() {
			t.Fatal("the dialer is still on")
		}
	}
	c := dial(t, []string{"http://" + grpcOnly.Addr().String()})
	if r, err := c.TryLock(testCtx(t), "r", []byte("A"), time.Minute, eph); err != nil || r.Status != lease.Locked {
		t.Fatalf("TryLock at the older native port: %v %v", r, err)
	}
}

// The token travels in the hello: a wrong one is refused before anything
// is served, as ErrUnauthenticated and not applied.
func TestFramesNeedAToken(t *testing.T) {
	tk, _ := NewTokens("alpha")
	w := newWaitingFake()
	srv := startServer(t, w, ServerOptions{Tokens: tk})
	bad := dial(t, []string{"http://" + srv.native}, WithToken("wrong"))
	_, err := bad.TryLock(testCtx(t), "r", []byte("A"), time.Minute, eph)
	if !errors.Is(err, lease.ErrUnauthenticated) || !errors.Is(err, lease.ErrNotApplied) {
		t.Fatalf("TryLock with a wrong token: %v, want ErrUnauthenticated, not applied", err)
	}
	if n := w.served.Load(); n != 0 {
		t.Fatalf("%d requests of a refused client reached the Locker", n)
	}
	good := dial(t, []string{"http://" + srv.native}, WithToken("alpha"))
	if r, err := good.TryLock(testCtx(t), "r", []byte("A"), time.Minute, eph); err != nil || r.Status != lease.Locked {
		t.Fatalf("TryLock with a listed token: %v %v", r, err)
	}
	if n := srv.frames.accepted.Load(); n == 0 {
		t.Fatal("the listed client's call was not framed")
	}
}

// Bad input on a framed connection ends that connection alone, with a
// status when the hello was good, and changes nothing.
func TestFramesBadInput(t *testing.T) {
	w := newWaitingFake()
	srv := startServer(t, w, ServerOptions{MaxRequestBytes: 1 << 10, SniffTimeout: 300 * time.Millisecond}) // bounds the cut hello
	hello := func(kind byte) []byte { return appendHello(nil, kind, "") }
	for _, tc := range []struct {
		name   string
		send   []byte
		status codes.Code // of the end frame; OK: the server closes without one
	}{
		{"unknown kind", hello('x'), codes.OK},
		{"bad magic", append([]byte("\x00KF9"), hello('b')[4:]...), codes.OK},
		{"a hello cut short", hello('b')[:helloHeader-1], codes.OK},
		{"frame over the limit", binary.BigEndian.AppendUint32(hello(frameKindBatch), 1<<20), codes.ResourceExhausted},
		{"not a Batch message", append(binary.BigEndian.AppendUint32(hello(frameKindBatch), 3), 0xff, 0xff, 0xff), codes.Unknown},
		{"not a LockStream message", append(binary.BigEndian.AppendUint32(hello(frameKindLocks), 3), 0xff, 0xff, 0xff), codes.Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", srv.native)
			must(t, err)
			defer conn.Close()
			must(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
			_, err = conn.Write(tc.send)
			must(t, err)
			r := bufio.NewReader(conn)
			answer, err := r.ReadByte()
			if tc.status == codes.OK {
				if err == nil {
					t.Fatalf("answered %q, want the connection closed", answer)
				}
				return
			}
			if err != nil || answer != frameAccepted {
				t.Fatalf("answer %q, %v: want accepted", answer, err)
			}
			f := &frameConn{conn: conn, r: r}
			if _, err := f.read(1 << 20); status.Code(err) == codes.OK || err == errCleanEnd {
				t.Fatalf("read = %v, want an end with an error status", err)
			} else if tc.status != codes.Unknown && status.Code(err) != tc.status {
				t.Fatalf("read = %v, want %v", err, tc.status)
			}
		})
	}
	if n := w.served.Load(); n != 0 {
		t.Fatalf("%d requests reached the Locker", n)
	}
	c := dial(t, []string{"http://" + srv.native})
	if r, err := c.TryLock(testCtx(t), "after", []byte("A"), time.Minute, eph); err != nil || r.Status != lease.Locked {
		t.Fatalf("TryLock after the bad connections: %v %v", r, err)
	}
}

// A client's end of its half is seen by the server as the end of the
// stream's requests, as gRPC's CloseSend.
func TestFramesCloseSendIsEOF(t *testing.T) {
	srv := startServer(t, newWaitingFake(), ServerOptions{})
	d := &frameDialer{addr: srv.native}
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	st, err := d.open(ctx, frameKindBatch)
	must(t, err)
	must(t, st.CloseSend())
	if err := st.RecvMsg(new(replyPack)); err != io.EOF {
		t.Fatalf("RecvMsg after CloseSend = %v, want the server's clean end (io.EOF)", err)
	}
}

// A connection silent in its hello does not hold Shutdown up: it is closed,
// where streams past their hello are let wind down.
func TestFramesShutdownNotHeldByAHello(t *testing.T) {
	srv := startServer(t, newWaitingFake(), ServerOptions{SniffTimeout: time.Minute})
	conn, err := net.Dial("tcp", srv.native)
	must(t, err)
	defer conn.Close()
	_, err = conn.Write([]byte(framesMagic[:2])) // a hello begun, never finished
	must(t, err)
	for srv.frames.open() == 0 { // until the server has taken it as framed
		if testCtx(t).Err() != nil {
			t.Fatal("the begun hello never reached the framing")
		}
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(testCtx(t), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown = %v, with a connection silent in its hello", err)
	}
}
