package transport

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna/internal/testport"
	"github.com/kahunago/kahuna/lease"
)

// directPool is the pool of rc's only endpoint, or fails the test when
// its calls go through net/http.
func directPool(t *testing.T, rc *RESTClient) *h1Pool {
	t.Helper()
	if len(rc.direct) != 1 || rc.direct[0] == nil {
		t.Fatal("calls to an http:// endpoint do not take the direct path")
	}
	return rc.direct[0]
}

func idleConns(p *h1Pool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

// TestRESTClientDirect: the REST client speaks HTTP/1.1 itself to an
// http:// endpoint, on one kept-alive connection for sequential calls,
// and gets the answers net/http gets, from the fast path and from
// net/http's server alike.
func TestRESTClientDirect(t *testing.T) {
	for _, fast := range []bool{true, false} {
		srv, addr := startREST(t, newFake(), ServerOptions{}, fast)
		rc, err := DialREST([]string{"http://" + addr})
		must(t, err)
		t.Cleanup(func() { rc.Close() })
		viaNetHTTP, err := DialREST([]string{"http://" + addr}, func(c *clientConfig) { c.restViaNetHTTP = true })
		must(t, err)
		t.Cleanup(func() { viaNetHTTP.Close() })
		if viaNetHTTP.direct[0] != nil {
			t.Fatal("restViaNetHTTP left the direct path on")
		}
		p := directPool(t, rc)
		ctx := testCtx(t)
		owner := []byte("owner-1")
		res, err := rc.TryLock(ctx, "r", owner, time.Minute, pers)
		if err != nil || res.Status != lease.Locked {
			t.Fatalf("TryLock: %v %v", res, err)
		}
		res, err = viaNetHTTP.TryLock(ctx, "r", []byte("owner-2"), time.Minute, pers)
		if err != nil || res.Status != lease.Busy {
			t.Fatalf("TryLock by another owner through net/http: %v %v", res, err)
		}
		info, res, err := rc.Get(ctx, "r", pers)
		if err != nil || res.Status != lease.Got || string(info.Owner) != "owner-1" || res.ServedFrom != "http://"+addr {
			t.Fatalf("Get: %v %v %v", info, res, err)
		}
		if res, err = rc.Extend(ctx, "r", owner, time.Minute, pers); err != nil || res.Status != lease.Extended {
			t.Fatalf("Extend: %v %v", res, err)
		}
		if res, err = rc.Unlock(ctx, "r", owner, pers); err != nil || res.Status != lease.Unlocked {
			t.Fatalf("Unlock: %v %v", res, err)
		}
		if n := idleConns(p); n != 1 {
			t.Errorf("fast=%v: %d idle connections after sequential calls, want 1", fast, n)
		}
		// Both clients' requests are in the server's fast path.
		if n := srv.fast.served.Load(); fast && n != 5 {
			t.Errorf("fast path served %d of the 5 calls", n)
		}
	}
}

// TestRESTClientServerClosedIdle: a connection the server closed while it
// idled (a restart, its idle timeout) is noticed before reuse, and the
// call goes out on a new one.
func TestRESTClientServerClosedIdle(t *testing.T) {
	// On a reserved port, so nothing else takes it between the two servers.
	srv, addr := serveREST(t, newFake(), ServerOptions{}, true, testport.Listen(t))
	rc, err := DialREST([]string{"http://" + addr})
	must(t, err)
	defer rc.Close()
	ctx := testCtx(t)
	if _, err := rc.TryLock(ctx, "r", []byte("A"), time.Minute, pers); err != nil {
		t.Fatal(err)
	}
	// Shutdown closes the idle connection; a new server takes the port.
	must(t, srv.Shutdown(ctx))
	l2 := newFake()
	s2 := NewServer(l2, ServerOptions{})
	lis, err := net.Listen("tcp", addr)
	must(t, err)
	go func() { _ = s2.ServeHTTP(lis) }()
	defer s2.Close()
	time.Sleep(h1ProbeAfter) // not a wait for anything: only connections idle this long are probed
	res, err := rc.TryLock(ctx, "r", []byte("A"), time.Minute, pers)
	if err != nil || res.Status != lease.Locked || l2.served.Load() != 1 {
		t.Fatalf("call after the server closed the idle connection: %v %v (served %d)", res, err, l2.served.Load())
	}
}

// TestRESTClientContextEnds: a call whose context ends while the server
// holds it returns ctx.Err(), and its connection is not reused (the
// answer may still come on it).
func TestRESTClientContextEnds(t *testing.T) {
	f := newFake()
	g := newGate("parked")
	f.hook = g.hook
	_, addr := startREST(t, f, ServerOptions{}, true)
	rc, err := DialREST([]string{"http://" + addr})
	must(t, err)
	defer rc.Close()
	p := directPool(t, rc)
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() {
		_, err := rc.TryLock(ctx, "parked", []byte("A"), time.Minute, pers)
		done <- err
	}()
	<-g.arrived
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("call whose context ended: %v, want context.Canceled", err)
	}
	close(g.release)
	if n := idleConns(p); n != 0 {
		t.Fatalf("%d idle connections after a cut-short call, want 0", n)
	}
	if res, err := rc.TryLock(testCtx(t), "r", []byte("A"), time.Minute, pers); err != nil || res.Status != lease.Locked {
		t.Fatalf("next call: %v %v", res, err)
	}
}

// TestRESTClientAnswerShapes: answers as other servers may send them, in
// chunks or with Connection: close, are read; a connection the server
// closes is not reused. An answer that is not 200 is an error saying so.
func TestRESTClientAnswerShapes(t *testing.T) {
	var conns atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/locks/try-lock", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Authorization") != "Bearer t0k" {
			http.Error(w, "headers", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"servedFrom":"",`)
		w.(http.Flusher).Flush() // the rest goes as a second chunk
		io.WriteString(w, `"type":0,"fencingToken":7}`)
	})
	mux.HandleFunc("/v1/locks/try-extend", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		io.WriteString(w, `{"servedFrom":"","type":2,"fencingToken":7}`)
	})
	mux.HandleFunc("/v1/locks/try-unlock", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "teapot", http.StatusTeapot)
	})
	hs := &http.Server{Handler: mux, ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}}
	lis := listen(t)
	go func() { _ = hs.Serve(lis) }()
	defer hs.Close()
	rc, err := DialREST([]string{"http://" + lis.Addr().String()}, WithToken("t0k"))
	must(t, err)
	defer rc.Close()
	ctx := testCtx(t)
	for range 2 {
		if res, err := rc.TryLock(ctx, "r", []byte("A"), time.Minute, pers); err != nil || res.Status != lease.Locked || res.FencingToken != 7 {
			t.Fatalf("chunked answer: %v %v", res, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for two calls, want 1", n)
	}
	if res, err := rc.Extend(ctx, "r", []byte("A"), time.Minute, pers); err != nil || res.Status != lease.Extended {
		t.Fatalf("answer with Connection: close: %v %v", res, err)
	}
	if res, err := rc.TryLock(ctx, "r", []byte("A"), time.Minute, pers); err != nil || res.Status != lease.Locked {
		t.Fatalf("call after Connection: close: %v %v", res, err)
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want a second one after Connection: close", n)
	}
	if _, err := rc.Unlock(ctx, "r", []byte("A"), pers); err == nil || !strings.Contains(err.Error(), "HTTP 418: teapot") {
		t.Fatalf("418 answer: %v", err)
	}
}

// TestRESTClientNothingSent: a call that cannot connect, or whose token
// cannot be a header value, is known not to have been sent.
func TestRESTClientNothingSent(t *testing.T) {
	rc, err := DialREST([]string{"http://" + testport.Addr(t)}) // reserved: nothing listens
	must(t, err)
	defer rc.Close()
	if _, err := rc.TryLock(testCtx(t), "r", []byte("A"), time.Minute, pers); !errors.Is(err, lease.ErrNotApplied) {
		t.Fatalf("call to a closed port: %v, want lease.ErrNotApplied", err)
	}
	f := newFake()
	_, addr := startREST(t, f, ServerOptions{}, true)
	rc2, err := DialREST([]string{"http://" + addr}, WithToken("a\r\nX-Injected: 1"))
	must(t, err)
	defer rc2.Close()
	if _, err := rc2.TryLock(testCtx(t), "r", []byte("A"), time.Minute, pers); !errors.Is(err, lease.ErrNotApplied) || f.served.Load() != 0 {
		t.Fatalf("token with CRLF: %v (served %d), want lease.ErrNotApplied and nothing served", err, f.served.Load())
	}
}
