package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kahunago/kahuna/lease"
)

// h2cClient speaks cleartext HTTP/2 with prior knowledge, like Kahuna's
// clients on an http:// URL.
func h2cClient(t *testing.T) *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// grpcFrame is a gRPC length-prefixed message: flag 0, big-endian length.
func grpcFrame(msg []byte) []byte {
	b := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// postStream opens a batch stream by hand and returns the request body's
// writer and the response (once the server has sent headers or ended).
func postStream(t *testing.T, hc *http.Client, addr string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(testCtx(t), http.MethodPost, "http://"+addr+"/Locker/BatchClientLockRequests", body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	return hc.Do(req)
}

// grpcStatus reads a finished gRPC response's status (trailers, or
// headers for a trailers-only answer).
func grpcStatus(t *testing.T, resp *http.Response) string {
	t.Helper()
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if s := resp.Trailer.Get("Grpc-Status"); s != "" {
		return s
	}
	return resp.Header.Get("Grpc-Status")
}

// TestStreamBadInputEndsOnlyThatStream: a stream that stops mid-message or
// sends bytes that are not a message ends with a gRPC error; a stream open
// alongside keeps working, and so does the server.
func TestStreamBadInputEndsOnlyThatStream(t *testing.T) {
	f := newFake()
	srv := startServer(t, f, ServerOptions{})
	for name, addr := range map[string]string{"h2c": srv.mixed, "native": srv.native} {
		t.Run(name, func(t *testing.T) {
			hc := h2cClient(t)
			healthy := rawStream(t, rawConn(t, addr), "/Locker/BatchClientLockRequests")
			ping := func(id int) {
				t.Helper()
				must(t, healthy.SendMsg(wEnvelope(1, id, 3, wTryLock("healthy", "A", 1000, 0))))
				if m := recvWire(t, healthy); m.varint(t, 2) != uint64(id) {
					t.Fatalf("healthy stream answered %v", m)
				}
			}
			ping(1)

			// Garbage: a well-framed message that is not protobuf.
			resp, err := postStream(t, hc, addr, bytes.NewReader(grpcFrame([]byte{0xff, 0xff, 0xff, 0xff})))
			must(t, err)
			if st := grpcStatus(t, resp); st != "13" {
				t.Fatalf("garbage: grpc-status %q, want 13 (Internal)", st)
			}
			ping(2)

			// Truncated: the frame announces 100 bytes, 10 arrive, then the
			// stream ends.
			frame := grpcFrame(make([]byte, 100))[:15]
			resp, err = postStream(t, hc, addr, bytes.NewReader(frame))
			must(t, err)
			if st := grpcStatus(t, resp); st == "" || st == "0" {
				t.Fatalf("truncated: grpc-status %q, want an error", st)
			}
			ping(3)

			// Cut: the client resets the stream mid-message.
			pr, pw := io.Pipe()
			got := make(chan error, 1)
			go func() {
				resp, err := postStream(t, hc, addr, pr)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				got <- err
			}()
			_, err = pw.Write(frame)
			must(t, err)
			pw.CloseWithError(io.ErrUnexpectedEOF)
			<-got // an error or an error status; either way the stream is gone
			ping(4)

			if n := f.served.Load(); n < 4 {
				t.Fatalf("served %d", n)
			}
		})
	}
}

// TestStreamBoundsInFlight: one stream has at most MaxInFlightPerStream
// requests in the Locker at once.
func TestStreamBoundsInFlight(t *testing.T) {
	const limit, sent = 4, 12
	f := newFake()
	var inFlight, peak atomic.Int32
	arrived := make(chan struct{}, sent)
	release := make(chan struct{})
	f.hook = func(context.Context, lease.Op, string) (lease.Status, error, bool) {
		n := inFlight.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		arrived <- struct{}{}
		<-release
		inFlight.Add(-1)
		return lease.Locked, nil, true
	}
	srv := startServer(t, f, ServerOptions{MaxInFlightPerStream: limit})
	st := rawStream(t, rawConn(t, srv.native), "/Locker/BatchClientLockRequests")
	for i := range sent {
		must(t, st.SendMsg(wEnvelope(1, i, 3, wTryLock("r", "A", 1000, 0))))
	}
	for range limit {
		<-arrived
	}
	// Let the requests through one at a time; each release admits at most
	// one more.
	for range sent {
		release <- struct{}{}
		recvWire(t, st)
	}
	if p := peak.Load(); p != limit {
		t.Fatalf("peak in flight = %d, want %d", p, limit)
	}
}

// TestShutdownAnswersInFlight: Shutdown lets a call parked in the Locker
// finish and answer before the stream and the server end, on either port
// and either wire (gRPC, kahuna's framing).
func TestShutdownAnswersInFlight(t *testing.T) {
	for _, native := range []bool{false, true} {
		for _, framed := range []bool{false, true} {
			w := newWaitingFake() // serves the native streams, so framing is offered
			g := newGate("parked")
			w.hook = g.hook
			srv := startServer(t, w, ServerOptions{})
			addr := srv.mixed
			if native {
				addr = srv.native
			}
			opts := []ClientOption{WithStreamsPerEndpoint(1)}
			if !framed {
				opts = append(opts, WithGRPCOnly())
			}
			c := dial(t, []string{"http://" + addr}, opts...)
			done := make(chan error, 1)
			go func() {
				r, err := c.TryLock(testCtx(t), "parked", []byte("A"), time.Second, pers)
				if err == nil && r.Status != lease.Locked {
					err = status.Errorf(codes.Unknown, "status %v", r.Status)
				}
				done <- err
			}()
			<-g.arrived
			shut := make(chan error, 1)
			go func() { shut <- srv.Shutdown(testCtx(t)) }()
			<-srv.draining // shutdown has begun
			close(g.release)
			if err := <-done; err != nil {
				t.Fatalf("native=%v framed=%v: in-flight call = %v, want answered Locked", native, framed, err)
			}
			if err := <-shut; err != nil {
				t.Fatalf("native=%v framed=%v: Shutdown = %v", native, framed, err)
			}
			if _, err := c.TryLock(testCtx(t), "after", []byte("A"), time.Second, pers); err == nil {
				t.Fatalf("native=%v framed=%v: call after Shutdown succeeded", native, framed)
			}
			if got := srv.frames.accepted.Load() > 0; got != framed {
				t.Fatalf("native=%v framed=%v: framed streams accepted: %v", native, framed, got)
			}
		}
	}
}

// TestShutdownDeadlineForcesClose: a call that never finishes cannot hold
// Shutdown beyond its context.
func TestShutdownDeadlineForcesClose(t *testing.T) {
	f := newFake()
	g := newGate("stuck")
	f.hook = g.hook
	defer close(g.release)
	srv := startServer(t, f, ServerOptions{})
	c := dial(t, []string{"http://" + srv.mixed})
	done := make(chan error, 1)
	go func() {
		_, err := c.TryLock(testCtx(t), "stuck", []byte("A"), time.Second, pers)
		done <- err
	}()
	<-g.arrived
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := srv.Shutdown(ctx); err != context.DeadlineExceeded {
		t.Fatalf("Shutdown = %v, want context.DeadlineExceeded", err)
	}
	if err := <-done; err == nil {
		t.Fatal("the stuck call succeeded")
	}
}
