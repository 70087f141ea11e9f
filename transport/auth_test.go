package transport

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/kahunago/kahuna/internal/testcert"
	"github.com/kahunago/kahuna/lease"
	pb "github.com/kahunago/kahuna/transport/lockspb"
)

func TestReadTokens(t *testing.T) {
	got, err := ReadTokens(strings.NewReader("# clients\n\n  alpha  \n\t# old\nbeta\r\n"))
	if err != nil || strings.Join(got, ",") != "alpha,beta" {
		t.Fatalf("ReadTokens = %q, %v; want alpha, beta", got, err)
	}
	for _, bad := range []string{"", "# only a comment\n\n", "Bearer alpha\n", "a b\n"} {
		if got, err := ReadTokens(strings.NewReader(bad)); err == nil {
			t.Errorf("ReadTokens(%q) = %q, want an error", bad, got)
		}
	}
}

func TestTokensSetAndReload(t *testing.T) {
	tk, err := NewTokens("alpha", "beta")
	if err != nil {
		t.Fatal(err)
	}
	for tok, want := range map[string]bool{"alpha": true, "beta": true, "alph": false, "alphaa": false, "": false} {
		if tk.Valid(tok) != want {
			t.Errorf("Valid(%q) = %v, want %v", tok, !want, want)
		}
	}
	if tk.Primary() != "alpha" {
		t.Errorf("Primary = %q, want alpha", tk.Primary())
	}
	file := filepath.Join(t.TempDir(), "tokens")
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("gamma\n")
	if err := tk.ReloadTokenFile(file); err != nil {
		t.Fatal(err)
	}
	if tk.Valid("alpha") || !tk.Valid("gamma") {
		t.Fatal("reload did not replace the set")
	}
	// A bad file, or none, keeps the set in force.
	write("# emptied by mistake\n")
	if err := tk.ReloadTokenFile(file); err == nil {
		t.Fatal("reloading a file without tokens succeeded")
	}
	if err := tk.ReloadTokenFile(file + ".missing"); err == nil {
		t.Fatal("reloading a missing file succeeded")
	}
	if !tk.Valid("gamma") || tk.Len() != 1 {
		t.Fatal("a failed reload changed the set")
	}
}

// countingLocker counts the calls that reach it.
type countingLocker struct {
	lease.Locker
	calls atomic.Int64
}

func (c *countingLocker) TryLock(ctx context.Context, r string, o []byte, ttl time.Duration, d lease.Durability) (lease.Result, error) {
	c.calls.Add(1)
	return c.Locker.TryLock(ctx, r, o, ttl, d)
}

func authServer(t *testing.T, opts ServerOptions) (*testServer, *countingLocker) {
	t.Helper()
	l := &countingLocker{Locker: newFake()}
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeReply(w, http.StatusOK, mustMarshal(map[string]string{"ok": "yes"}))
	})
	opts.Extra = map[string]http.Handler{"/metrics": ok, "/v1/admin/partitions": ok}
	return startServer(t, l, opts), l
}

func restWithAuth(t *testing.T, base, path, auth string) (int, map[string]any, http.Header) {
	t.Helper()
	method, body := http.MethodPost, `{"resource":"r","owner":"`+b64("o")+`","expiresMs":1000,"durability":0}`
	if path != "/v1/locks/try-lock" {
		method, body = http.MethodGet, ""
	}
	req, err := http.NewRequest(method, "http://"+base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if path != "/healthz" {
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatalf("%s %s: reply is not JSON: %v", method, path, err)
		}
	}
	return resp.StatusCode, m, resp.Header
}

func TestAuthREST(t *testing.T) {
	tk, _ := NewTokens("alpha", "beta")
	ts, l := authServer(t, ServerOptions{Tokens: tk, Unauthenticated: []string{"/metrics"}})
	for _, c := range []struct{ auth, why string }{
		{"", "missing bearer token"},
		{"Bearer wrong", "not accepted"},
		{"Bearer alph", "not accepted"},
		{"Basic YWxwaGE6", "malformed"},
		{"alpha", "malformed"},
	} {
		for _, path := range []string{"/v1/locks/try-lock", "/v1/admin/partitions"} {
			code, m, h := restWithAuth(t, ts.mixed, path, c.auth)
			if code != http.StatusUnauthorized || !strings.Contains(m["error"].(string), c.why) {
				t.Errorf("%s with %q: %d %v, want 401 saying %q", path, c.auth, code, m, c.why)
			}
			if !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s with %q: WWW-Authenticate %q", path, c.auth, h.Get("WWW-Authenticate"))
			}
		}
	}
	if n := l.calls.Load(); n != 0 {
		t.Fatalf("%d refused calls reached the Locker", n)
	}
	code, m, _ := restWithAuth(t, ts.mixed, "/v1/locks/try-lock", "Bearer beta")
	if code != http.StatusOK || lease.Status(num(t, m, "type")) != lease.Locked {
		t.Fatalf("try-lock with a listed token: %d %v", code, m)
	}
	if code, _, _ := restWithAuth(t, ts.mixed, "/v1/admin/partitions", "bearer alpha"); code != http.StatusOK {
		t.Fatalf("admin with a listed token: %d", code)
	}
	for _, path := range []string{"/healthz", "/metrics"} {
		if code, _, _ := restWithAuth(t, ts.mixed, path, ""); code != http.StatusOK {
			t.Errorf("%s without a token: %d, want 200", path, code)
		}
	}

	// The REST client presents its token.
	for tok, wantErr := range map[string]bool{"alpha": false, "nope": true} {
		rc, err := DialREST([]string{"http://" + ts.mixed}, WithToken(tok))
		if err != nil {
			t.Fatal(err)
		}
		res, err := rc.TryLock(testCtx(t), "rc-"+tok, []byte("o"), time.Second, lease.Ephemeral)
		if (err != nil) != wantErr || (err == nil && res.Status != lease.Locked) {
			t.Errorf("REST client with %q: %v, %v", tok, res, err)
		}
		if wantErr && !errors.Is(err, lease.ErrUnauthenticated) {
			t.Errorf("REST client with %q: error %v is not ErrUnauthenticated", tok, err)
		}
	}
}

func TestAuthMetricsGuardedUnlessOpen(t *testing.T) {
	tk, _ := NewTokens("alpha")
	ts, _ := authServer(t, ServerOptions{Tokens: tk})
	if code, _, _ := restWithAuth(t, ts.mixed, "/metrics", ""); code != http.StatusUnauthorized {
		t.Fatalf("/metrics without a token and not listed open: %d, want 401", code)
	}
	if code, _, _ := restWithAuth(t, ts.mixed, "/healthz", ""); code != http.StatusOK {
		t.Fatalf("/healthz: %d, want 200", code)
	}
}

func TestNoTokensNothingChanges(t *testing.T) {
	ts, _ := authServer(t, ServerOptions{})
	if code, _, _ := restWithAuth(t, ts.mixed, "/v1/locks/try-lock", ""); code != http.StatusOK {
		t.Fatalf("REST without Tokens: %d", code)
	}
	c := dial(t, []string{"http://" + ts.native})
	if res, err := c.TryLock(testCtx(t), "x", []byte("o"), time.Second, lease.Ephemeral); err != nil || res.Status != lease.Locked {
		t.Fatalf("gRPC without Tokens: %v, %v", res, err)
	}
}

func unaryTryLock(t *testing.T, addr, auth string) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := testCtx(t)
	if auth != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", auth)
	}
	_, err = pb.NewLockerClient(conn).TryLock(ctx, &pb.GrpcTryLockRequest{Resource: "u", Owner: []byte("o"), ExpiresMs: 1000})
	return err
}

func TestAuthGRPC(t *testing.T) {
	tk, _ := NewTokens("alpha", "beta")
	ts, l := authServer(t, ServerOptions{Tokens: tk})
	for _, addr := range []string{ts.mixed, ts.native} {
		for _, auth := range []string{"", "Bearer wrong", "Basic alpha"} {
			if err := unaryTryLock(t, addr, auth); status.Code(err) != codes.Unauthenticated {
				t.Errorf("unary at %s with %q: %v, want Unauthenticated", addr, auth, err)
			}
		}
		if err := unaryTryLock(t, addr, "Bearer alpha"); err != nil {
			t.Errorf("unary at %s with a listed token: %v", addr, err)
		}

		// The batch streams: refused as a whole without a token, on the
		// client stream and the forwarding one alike.
		for _, opts := range [][]ClientOption{nil, {WithToken("wrong")}, {WithForwarding()}, {WithForwarding(), WithToken("wrong")}} {
			c := dial(t, []string{"http://" + addr}, opts...)
			_, err := c.TryLock(testCtx(t), "s", []byte("o"), time.Second, lease.Ephemeral)
			if !errors.Is(err, lease.ErrUnauthenticated) || !errors.Is(err, lease.ErrNotApplied) {
				t.Errorf("stream at %s: %v, want ErrUnauthenticated (not applied)", addr, err)
			}
		}
		before := l.calls.Load()
		c := dial(t, []string{"http://" + addr}, WithToken("beta"))
		for i := range 3 {
			if res, err := c.TryLock(testCtx(t), "s", []byte("o"), time.Second, lease.Ephemeral); err != nil || res.Status != lease.Locked {
				t.Fatalf("stream call %d at %s with a listed token: %v, %v", i, addr, res, err)
			}
		}
		if got := l.calls.Load() - before; got != 3 {
			t.Errorf("%d calls reached the Locker, want 3", got)
		}
	}
	// The shared port's gRPC was the native grpc.Server's, interceptors
	// and all: no connection reached net/http.
	if sn := shared(t, ts); sn.toGRPC.Load() == 0 || sn.toHTTP.Load() != 0 {
		t.Errorf("shared port: %d connections to gRPC, %d to HTTP", sn.toGRPC.Load(), sn.toHTTP.Load())
	}
}

func TestAuthPeerTokensGuardTheForwardingStream(t *testing.T) {
	clients, _ := NewTokens("client")
	peers, _ := NewTokens("secret")
	ts, _ := authServer(t, ServerOptions{Tokens: clients, PeerTokens: peers})
	call := func(opts ...ClientOption) error {
		c := dial(t, []string{"http://" + ts.native}, opts...)
		_, err := c.TryLock(testCtx(t), "p", []byte("o"), time.Second, lease.Ephemeral)
		return err
	}
	if err := call(WithForwarding(), WithToken("client")); !errors.Is(err, lease.ErrUnauthenticated) {
		t.Errorf("forwarding stream with a client token: %v, want Unauthenticated", err)
	}
	if err := call(WithToken("secret")); !errors.Is(err, lease.ErrUnauthenticated) {
		t.Errorf("client stream with the peer secret: %v, want Unauthenticated", err)
	}
	if err := call(WithForwarding(), WithToken("secret")); err != nil {
		t.Errorf("forwarding stream with the peer secret: %v", err)
	}
	// The same for a waiting Lock, which a member forwards on
	// ForwardLockStream.
	waiting := startServer(t, newWaitingFake(), ServerOptions{Tokens: clients, PeerTokens: peers})
	lock := func(opts ...ClientOption) error {
		c := dial(t, []string{"http://" + waiting.native}, opts...)
		_, err := c.Lock(testCtx(t), "p", []byte("o"), time.Second, time.Second, lease.Ephemeral)
		return err
	}
	if err := lock(WithForwarding(), WithToken("client")); !errors.Is(err, lease.ErrUnauthenticated) {
		t.Errorf("forwarded Lock with a client token: %v, want Unauthenticated", err)
	}
	if err := lock(WithForwarding(), WithToken("secret")); err != nil {
		t.Errorf("forwarded Lock with the peer secret: %v", err)
	}
	// A token source is read on every new stream: a rotated secret is
	// used from the next stream on.
	var cur atomic.Value
	cur.Store("old")
	if err := peers.Set([]string{"old"}); err != nil {
		t.Fatal(err)
	}
	if err := call(WithForwarding(), WithTokenSource(func() string { return cur.Load().(string) })); err != nil {
		t.Errorf("forwarding with the token source: %v", err)
	}
	cur.Store("")
	if err := call(WithForwarding(), WithTokenSource(func() string { return cur.Load().(string) })); !errors.Is(err, lease.ErrUnauthenticated) {
		t.Errorf("forwarding with an empty token source: %v, want Unauthenticated", err)
	}
}

func TestAuthReloadTakesEffect(t *testing.T) {
	tk, _ := NewTokens("old")
	ts, _ := authServer(t, ServerOptions{Tokens: tk})
	if err := unaryTryLock(t, ts.native, "Bearer old"); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte("new\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := tk.ReloadTokenFile(file); err != nil {
		t.Fatal(err)
	}
	if err := unaryTryLock(t, ts.native, "Bearer old"); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("old token after reload: %v, want Unauthenticated", err)
	}
	if err := unaryTryLock(t, ts.native, "Bearer new"); err != nil {
		t.Fatalf("new token after reload: %v", err)
	}
	if code, _, _ := restWithAuth(t, ts.mixed, "/v1/locks/try-lock", "Bearer new"); code != http.StatusOK {
		t.Fatalf("REST with the new token: %d", code)
	}
}

// TestServeGRPCTLSMutual: the peer listener takes only clients with a
// certificate from its CA, and serves the forwarding stream to them.
func TestServeGRPCTLSMutual(t *testing.T) {
	dir := t.TempDir()
	ca, other := testcert.NewCA(t, dir, "cluster"), testcert.NewCA(t, dir, "other")
	srvPair, cliPair, strayPair := ca.Issue(t, dir, "server", "127.0.0.1"), ca.Issue(t, dir, "client"), other.Issue(t, dir, "client", "127.0.0.1")

	s := NewServer(newFake(), ServerOptions{})
	lis := listen(t)
	served := make(chan error, 1)
	go func() {
		served <- s.ServeGRPCTLS(lis, &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{srvPair.TLS(t)},
			ClientCAs:    ca.Pool(),
			ClientAuth:   tls.RequireAndVerifyClientCert,
		})
	}()
	t.Cleanup(func() {
		s.Close()
		if err := <-served; err != nil && !errors.Is(err, ErrServerClosed) {
			t.Errorf("ServeGRPCTLS returned %v", err)
		}
	})
	url := "https://" + lis.Addr().String()
	call := func(cfg *tls.Config) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := Dial(ctx, []string{url}, WithForwarding(), WithTLSConfig(cfg))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.TryLock(ctx, "t", []byte("o"), time.Second, lease.Ephemeral)
		return err
	}
	if err := call(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: ca.Pool(), Certificates: []tls.Certificate{cliPair.TLS(t)}}); err != nil {
		t.Fatalf("a client with the cluster's certificate: %v", err)
	}
	if err := call(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: ca.Pool()}); err == nil {
		t.Error("a client without a certificate was served")
	}
	if err := call(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: ca.Pool(), Certificates: []tls.Certificate{strayPair.TLS(t)}}); err == nil {
		t.Error("a client with another CA's certificate was served")
	}
	// And the client checks the server: a server cert from another CA fails.
	if err := call(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: other.Pool(), Certificates: []tls.Certificate{cliPair.TLS(t)}}); err == nil {
		t.Error("a server with another CA's certificate was trusted")
	}
}
