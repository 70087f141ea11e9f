package transport

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// shared returns the sniffer of srv's ServeHTTP listener, once it runs.
func shared(t *testing.T, srv *testServer) *sniffer {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		srv.mu.Lock()
		n := len(srv.sniffers)
		srv.mu.Unlock()
		if n == 1 {
			srv.mu.Lock()
			defer srv.mu.Unlock()
			return srv.sniffers[0]
		}
	}
	t.Fatal("the shared listener is not served")
	return nil
}

// rawHTTP writes req on a new connection to addr and reads one response.
func rawHTTP(t *testing.T, addr, req string) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	must(t, err)
	t.Cleanup(func() { c.Close() })
	_, err = io.WriteString(c, req)
	must(t, err)
	must(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	must(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// TestSharedPortSplitsByPreface: on the shared port, a gRPC client's
// connection (HTTP/2 preface) goes to the native grpc.Server and every
// HTTP/1.x one to net/http, including requests shorter than the preface
// and an "Upgrade: h2c" that is answered over HTTP/1.1.
func TestSharedPortSplitsByPreface(t *testing.T) {
	srv := startServer(t, newWaitingFake(), ServerOptions{})
	sn := shared(t, srv)

	c := dial(t, []string{"http://" + srv.mixed}, WithGRPCOnly())
	for i := range 5 {
		if r, err := c.TryLock(testCtx(t), "split", []byte("A"), time.Second, pers); err != nil || r.Status != lease.Locked && i == 0 {
			t.Fatalf("gRPC on the shared port: %v, %v", r, err)
		}
	}
	grpcConns := sn.toGRPC.Load()
	if h := sn.toHTTP.Load(); grpcConns == 0 || h != 0 {
		t.Fatalf("after a gRPC client: %d connections to gRPC, %d to HTTP, want some and 0", grpcConns, h)
	}
	// A client in kahuna's framing (the default on http://) gets it.
	if r, err := dial(t, []string{"http://" + srv.mixed}).TryLock(testCtx(t), "split", []byte("A"), time.Second, pers); err != nil || r.Status != lease.Locked {
		t.Fatalf("framed on the shared port: %v, %v", r, err)
	}
	if f, h := sn.toFrames.Load(), sn.toHTTP.Load(); f == 0 || h != 0 || sn.toGRPC.Load() != grpcConns {
		t.Fatalf("after a framed client: %d connections framed, %d to HTTP, %d more to gRPC, want some, 0 and 0", f, h, sn.toGRPC.Load()-grpcConns)
	}

	newREST(t, srv.mixed).post("/v1/locks/get-info", `{"resource":"split","durability":1}`)
	// 18 bytes, shorter than the preface: told apart at the first byte.
	if resp := rawHTTP(t, srv.mixed, "GET /healthz HTTP/1.0\r\n\r\n"); resp.StatusCode != 200 {
		t.Fatalf("HTTP/1.0 /healthz: %d", resp.StatusCode)
	}
	// An h2c upgrade is not taken up: the request is answered as HTTP/1.1.
	resp := rawHTTP(t, srv.mixed, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n")
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || resp.ProtoMajor != 1 || string(b) != "ok" {
		t.Fatalf("Upgrade: h2c: %s %d %q, want HTTP/1.1 200 ok", resp.Proto, resp.StatusCode, b)
	}
	if g, h := sn.toGRPC.Load(), sn.toHTTP.Load(); g != grpcConns || h != 3 {
		t.Fatalf("%d connections to gRPC, %d to HTTP, want %d and 3", g, h, grpcConns)
	}
}

// TestSharedPortSilentConnections: a connection that says nothing, or
// starts the preface and stops, is closed after SniffTimeout, and does not
// hold up the connections behind it.
func TestSharedPortSilentConnections(t *testing.T) {
	const sniff = 300 * time.Millisecond
	srv := startServer(t, newFake(), ServerOptions{SniffTimeout: sniff})
	sn := shared(t, srv)
	var (
		silent []net.Conn
		dialed []time.Time
	)
	for _, first := range []string{"", "PRI * HTTP/2"} {
		dialed = append(dialed, time.Now())
		c, err := net.Dial("tcp", srv.mixed)
		must(t, err)
		defer c.Close()
		if first != "" {
			_, err = io.WriteString(c, first)
			must(t, err)
		}
		silent = append(silent, c)
	}
	// Served meanwhile, on both halves.
	c := dial(t, []string{"http://" + srv.mixed})
	if r, err := c.TryLock(testCtx(t), "busy-port", []byte("A"), time.Second, pers); err != nil || r.Status != lease.Locked {
		t.Fatalf("gRPC beside silent connections: %v, %v", r, err)
	}
	newREST(t, srv.mixed).post("/v1/locks/get-info", `{"resource":"busy-port","durability":1}`)

	// Closed after SniffTimeout, counted from the accept (after the dial
	// began): never sooner. And by SniffTimeout, not by the default: the
	// read gives up halfway to the default, which a server that ignored
	// the option would still be waiting for.
	for i, c := range silent {
		must(t, c.SetReadDeadline(dialed[i].Add(DefaultSniffTimeout/2)))
		n, err := c.Read(make([]byte, 1))
		if n != 0 || err != io.EOF {
			t.Fatalf("silent connection %d: read %d, %v, want EOF (closed by the server within %v of the dial)", i, n, err, DefaultSniffTimeout/2)
		}
		if waited := time.Since(dialed[i]); waited < sniff {
			t.Fatalf("silent connection %d closed %v after its dial, before the SniffTimeout %v", i, waited, sniff)
		}
	}
	if d := sn.dropped.Load(); d != 2 {
		t.Fatalf("%d connections dropped, want 2", d)
	}
}

// TestSharedPortClosesItsListener: Shutdown stops both halves and closes
// the listener underneath.
func TestSharedPortClosesItsListener(t *testing.T) {
	srv := NewServer(newFake(), ServerOptions{})
	lis := listen(t)
	served := make(chan error, 1)
	go func() { served <- srv.ServeHTTP(lis) }()
	c := dial(t, []string{"http://" + lis.Addr().String()})
	if r, err := c.TryLock(testCtx(t), "x", []byte("A"), time.Second, pers); err != nil || r.Status != lease.Locked {
		t.Fatalf("TryLock: %v, %v", r, err)
	}
	must(t, srv.Shutdown(testCtx(t)))
	if err := <-served; err != nil {
		t.Fatalf("ServeHTTP after Shutdown: %v", err)
	}
	if c, err := net.Dial("tcp", lis.Addr().String()); err == nil {
		c.Close()
		t.Fatal("the shared listener is still open after Shutdown")
	}
}
