package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kahunago/kahuna/internal/testport"
	"github.com/kahunago/kahuna/lease"
)

// These tests pin the statuses' promise on the wire: MustRetry means certainly not
// applied, Errored (or an error that does not wrap lease.ErrNotApplied)
// means the outcome is unknown.

// failingHook fails requests by resource: the Locker's errors and panics
// that the server must answer.
func failingHook(_ context.Context, _ lease.Op, resource string) (lease.Status, error, bool) {
	switch resource {
	case "not-applied":
		return 0, fmt.Errorf("node closing: %w", lease.ErrNotApplied), true
	case "unknown":
		return 0, errors.New("proposal dropped"), true
	case "own-deadline": // the Locker's own timeout, not the asker's
		return 0, fmt.Errorf("proposal: %w", context.DeadlineExceeded), true
	case "panic":
		panic("handler bug")
	case "panic-not-applied": // a panic proves nothing, whatever it carries
		panic(fmt.Errorf("bug: %w", lease.ErrNotApplied))
	}
	return 0, nil, false
}

var failingCases = []struct {
	resource string
	want     lease.Status
}{
	{"not-applied", lease.MustRetry},
	{"unknown", lease.Errored},
	{"own-deadline", lease.Errored},
	{"panic", lease.Errored},
	{"panic-not-applied", lease.Errored},
}

// TestServerAnswersLockerFailuresByOutcome: a Locker error that wraps
// lease.ErrNotApplied is answered MustRetry; any other error, and a panic,
// Errored; on gRPC unary calls, both batch streams and REST.
func TestServerAnswersLockerFailuresByOutcome(t *testing.T) {
	f := newFake()
	f.hook = failingHook
	srv := startServer(t, f, ServerOptions{Forwarded: f})
	conn := rawConn(t, srv.native)
	rest := newREST(t, srv.mixed)

	for _, tc := range failingCases {
		t.Run(tc.resource, func(t *testing.T) {
			if got := rawInvoke(t, conn, "/Locker/TryLock", wTryLock(tc.resource, "A", 1000, 1)).varint(t, 2); got != uint64(tc.want) {
				t.Errorf("unary TryLock answered %d, want %d (%v)", got, tc.want, tc.want)
			}
			if got := rawInvoke(t, conn, "/Locker/GetLock", wGet(tc.resource, 1)).varint(t, 2); got != uint64(tc.want) {
				t.Errorf("unary GetLock answered %d, want %d (%v)", got, tc.want, tc.want)
			}
			for _, method := range []string{"/Locker/BatchClientLockRequests", "/Locker/BatchServerLockRequests"} {
				st := rawStream(t, conn, method)
				must(t, st.SendMsg(wEnvelope(1, 7, 3, wTryLock(tc.resource, "A", 1000, 1))))
				m := recvWire(t, st)
				if m.varint(t, 2) != 7 || m.sub(t, 3).varint(t, 2) != uint64(tc.want) {
					t.Errorf("%s answered %v, want id 7 status %d (%v)", method, m, tc.want, tc.want)
				}
				// The stream lives on.
				must(t, st.SendMsg(wEnvelope(1, 8, 3, wTryLock("fine/"+tc.resource+method, "A", 1000, 1))))
				if m := recvWire(t, st); m.varint(t, 2) != 8 || m.sub(t, 3).varint(t, 2) != uint64(lease.Locked) {
					t.Errorf("%s after the failure: %v", method, m)
				}
			}
			body := fmt.Sprintf(`{"resource":%q,"owner":%q,"expiresMs":1000,"durability":1}`, tc.resource, b64("A"))
			if got := num(t, rest.post("/v1/locks/try-lock", body), "type"); got != int64(tc.want) {
				t.Errorf("REST try-lock answered %d, want %d (%v)", got, tc.want, tc.want)
			}
			if got := num(t, rest.post("/v1/locks/get-info", fmt.Sprintf(`{"resource":%q,"durability":1}`, tc.resource)), "type"); got != int64(tc.want) {
				t.Errorf("REST get-info answered %d, want %d (%v)", got, tc.want, tc.want)
			}
		})
	}
}

// TestServerAskerGoneIsErrored: when the asker goes away while the Locker
// holds its request, the Locker's work may still apply it, so the server
// counts the request Errored, never MustRetry.
func TestServerAskerGoneIsErrored(t *testing.T) {
	f := newFake()
	g := newGate("parked")
	f.hook = g.hook
	defer close(g.release)
	observed := make(chan lease.Status, 16)
	srv := startServer(t, f, ServerOptions{Observe: func(_ lease.Op, st lease.Status) { observed <- st }})
	conn := rawConn(t, srv.native)

	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() {
		var resp []byte
		done <- conn.Invoke(ctx, "/Locker/TryLock", wTryLock("parked", "A", 1000, 1), &resp)
	}()
	<-g.arrived
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled call was answered")
	}
	// The fake returns its context's error once the gate lets go of it.
	if st := <-observed; st != lease.Errored {
		t.Fatalf("a request whose asker left was counted %v, want Errored", st)
	}
}

// TestServerUnsendableAnswerEndsTheStream: an answer that cannot be sent
// (here: a ServedFrom that is not UTF-8 cannot be encoded) ends the batch
// stream with an error status (grpc writes the failed Send's), never the
// clean end that promises "unanswered = unprocessed", so the client's
// error does not claim the request was not applied: it was.
func TestServerUnsendableAnswerEndsTheStream(t *testing.T) {
	f := newFake()
	srv := startServer(t, forwardedTo{f, "n\xff"}, ServerOptions{})
	for _, fwd := range []bool{false, true} {
		opts := []ClientOption{WithStreamsPerEndpoint(1)}
		if fwd {
			opts = append(opts, WithForwarding())
		}
		c := dial(t, []string{"http://" + srv.native}, opts...)
		before := f.served.Load()
		_, err := c.TryLock(testCtx(t), fmt.Sprint("unsendable/", fwd), []byte("A"), time.Second, pers)
		if err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, lease.ErrNotApplied) {
			t.Fatalf("forwarding=%v: call with an unsendable answer = %v, want an error of unknown outcome", fwd, err)
		}
		if n := f.served.Load() - before; n != 1 {
			t.Fatalf("forwarding=%v: the Locker served %d requests, want 1 (no silent resend)", fwd, n)
		}
	}
}

// TestClientDoesNotRetryErrored: the gRPC and REST clients retry MustRetry
// only; an Errored answer, or a Locker failure of unknown outcome, comes
// back after one attempt.
func TestClientDoesNotRetryErrored(t *testing.T) {
	f := newFake()
	f.hook = func(ctx context.Context, op lease.Op, resource string) (lease.Status, error, bool) {
		if resource == "errored" {
			return lease.Errored, nil, true
		}
		return failingHook(ctx, op, resource)
	}
	srv := startServer(t, f, ServerOptions{})
	grpcC := dial(t, []string{"http://" + srv.mixed})
	fwdC := dial(t, []string{"http://" + srv.native}, WithForwarding())
	restC, err := DialREST([]string{"http://" + srv.mixed})
	must(t, err)
	t.Cleanup(func() { restC.Close() })

	for _, c := range []struct {
		name string
		l    lease.Locker
	}{{"grpc", grpcC}, {"forwarding", fwdC}, {"rest", restC}} {
		for _, res := range []string{"errored", "unknown", "panic"} {
			ctx := testCtx(t)
			calls := []struct {
				op   string
				call func() (lease.Result, error)
			}{
				{"TryLock", func() (lease.Result, error) { return c.l.TryLock(ctx, res, []byte("A"), time.Second, pers) }},
				{"Extend", func() (lease.Result, error) { return c.l.Extend(ctx, res, []byte("A"), time.Second, pers) }},
				{"Unlock", func() (lease.Result, error) { return c.l.Unlock(ctx, res, []byte("A"), pers) }},
				{"Get", func() (lease.Result, error) { _, r, err := c.l.Get(ctx, res, pers); return r, err }},
			}
			for _, op := range calls {
				before := f.served.Load()
				r, err := op.call()
				if err != nil || r.Status != lease.Errored {
					t.Errorf("%s %s(%s) = %v, %v, want Errored", c.name, op.op, res, r, err)
				}
				if n := f.served.Load() - before; n != 1 {
					t.Errorf("%s %s(%s): %d attempts, want 1", c.name, op.op, res, n)
				}
			}
		}
	}
}

// cutProxy is a TCP proxy whose connections can be cut at once.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	p := &cutProxy{ln: listen(t), target: target}
	go func() {
		for {
			c, err := p.ln.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, b)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(b, c); b.Close() }()
			go func() { _, _ = io.Copy(c, b); c.Close() }()
		}
	}()
	t.Cleanup(func() { p.ln.Close(); p.cut() })
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

// cut closes every connection through the proxy.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TestForwardingBrokenAfterSendIsUnknown: a forwarding client whose
// connection breaks after its request was written (the server holds it)
// fails with an error that is not lease.ErrNotApplied, and rightly so: the
// server applies the request after the break. The request is not sent
// again.
func TestForwardingBrokenAfterSendIsUnknown(t *testing.T) {
	f := newFake()
	arrived, release, applied := make(chan struct{}, 4), make(chan struct{}), make(chan struct{})
	f.hook = func(_ context.Context, _ lease.Op, resource string) (lease.Status, error, bool) {
		if resource != "held" {
			return 0, nil, false
		}
		arrived <- struct{}{}
		<-release // like an actor: the work goes on without the asker
		close(applied)
		return lease.Locked, nil, true
	}
	srv := startServer(t, f, ServerOptions{})
	proxy := newCutProxy(t, srv.native)
	c := dial(t, []string{"http://" + proxy.addr()}, WithForwarding(), WithStreamsPerEndpoint(1))

	done := make(chan error, 1)
	go func() {
		_, err := c.TryLock(testCtx(t), "held", []byte("A"), time.Second, pers)
		done <- err
	}()
	<-arrived // written, and received by the server
	proxy.cut()
	err := <-done
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryLock over a broken connection = %v, want a transport error", err)
	}
	if errors.Is(err, lease.ErrNotApplied) || errors.Is(err, errUnsent) {
		t.Fatalf("TryLock sent before the break = %v, classified not applied", err)
	}
	close(release)
	<-applied // the "unknown" outcome was in fact applied
	if n := f.served.Load(); n != 1 {
		t.Fatalf("the server saw %d attempts, want 1: a request of unknown outcome was sent again", n)
	}
}

// TestNeverSentIsNotApplied: every way a request certainly never reaches
// the server is classified lease.ErrNotApplied.
func TestNeverSentIsNotApplied(t *testing.T) {
	closedPort := func() string { return testport.Addr(t) } // reserved: nothing listens

	t.Run("dial to a closed port", func(t *testing.T) {
		_, err := Dial(testCtx(t), []string{"http://" + closedPort()}, WithForwarding())
		if err == nil || !errors.Is(err, lease.ErrNotApplied) {
			t.Fatalf("Dial to a closed port = %v, want lease.ErrNotApplied", err)
		}
	})

	t.Run("stream to a closed port", func(t *testing.T) {
		conn, err := grpc.NewClient("passthrough:///"+closedPort(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		must(t, err)
		life, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		s := newBatchStream(life, &wg, "closed", conn, batchServerMethod, nil)
		defer func() { s.close(); cancel(); wg.Wait() }()
		cl := newCall()
		cl.encode(1, lease.TryLock, "r", []byte("A"), time.Second, pers)
		err = s.do(testCtx(t), cl)
		if !errors.Is(err, lease.ErrNotApplied) || !errors.Is(err, errUnsent) {
			t.Fatalf("call on a stream that cannot open = %v, want not applied", err)
		}
	})

	t.Run("server shut down", func(t *testing.T) {
		// A server that shut down ended its streams cleanly and stopped
		// listening: a later call finds the stream ended, or cannot open
		// one.
		f := newFake()
		srv := startServer(t, f, ServerOptions{})
		c := dial(t, []string{"http://" + srv.native}, WithForwarding())
		if r, err := c.TryLock(testCtx(t), "warm", []byte("A"), time.Second, pers); err != nil || r.Status != lease.Locked {
			t.Fatalf("TryLock = %v, %v", r, err)
		}
		must(t, srv.Shutdown(testCtx(t)))
		for i := range 5 {
			_, err := c.TryLock(testCtx(t), fmt.Sprint("after", i), []byte("A"), time.Second, pers)
			if !errors.Is(err, lease.ErrNotApplied) {
				t.Fatalf("call %d after Shutdown = %v, want lease.ErrNotApplied", i, err)
			}
		}
		if n := f.served.Load(); n != 1 {
			t.Fatalf("served %d, want only the first call", n)
		}
	})

	t.Run("client closed", func(t *testing.T) {
		srv := startServer(t, newFake(), ServerOptions{})
		c := dial(t, []string{"http://" + srv.native}, WithForwarding())
		must(t, c.Close())
		_, err := c.TryLock(testCtx(t), "r", []byte("A"), time.Second, pers)
		if !errors.Is(err, ErrClosed) || !errors.Is(err, lease.ErrNotApplied) {
			t.Fatalf("call after Close = %v, want ErrClosed and lease.ErrNotApplied", err)
		}
		rc, err := DialREST([]string{"http://" + srv.mixed})
		must(t, err)
		must(t, rc.Close())
		_, err = rc.TryLock(testCtx(t), "r", []byte("A"), time.Second, pers)
		if !errors.Is(err, ErrClosed) || !errors.Is(err, lease.ErrNotApplied) {
			t.Fatalf("REST call after Close = %v, want ErrClosed and lease.ErrNotApplied", err)
		}
	})
}

// TestCloseWithCallInFlightIsUnknown: Close fails a call the server holds
// with ErrClosed, and that ErrClosed does not claim the call was not
// applied.
func TestCloseWithCallInFlightIsUnknown(t *testing.T) {
	f := newFake()
	g := newGate("parked")
	f.hook = g.hook
	defer close(g.release)
	srv := startServer(t, f, ServerOptions{})
	c := dial(t, []string{"http://" + srv.native}, WithForwarding())
	done := make(chan error, 1)
	go func() {
		_, err := c.TryLock(testCtx(t), "parked", []byte("A"), time.Second, pers)
		done <- err
	}()
	<-g.arrived
	must(t, c.Close())
	err := <-done
	if !errors.Is(err, ErrClosed) || errors.Is(err, lease.ErrNotApplied) {
		t.Fatalf("call in flight at Close = %v, want ErrClosed of unknown outcome", err)
	}
}
