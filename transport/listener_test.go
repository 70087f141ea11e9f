package transport

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kahunago/kahuna/lease"
)

func TestOneListenerServesRESTAndGRPC(t *testing.T) {
	srv := startServer(t, newFake(), ServerOptions{})
	body := `{"resource":"mixed","owner":"` + b64("A") + `","expiresMs":10000,"durability":1}`

	// REST over HTTP/1.1 ...
	resp, err := http.Post("http://"+srv.mixed+"/v1/locks/try-lock", "application/json", strings.NewReader(body))
	must(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 1 || resp.StatusCode != 200 || !strings.Contains(string(raw), `"type":0`) {
		t.Fatalf("HTTP/1.1 REST: %s %d %s", resp.Proto, resp.StatusCode, raw)
	}
	// ... but not REST over h2c with prior knowledge: that connection is
	// handed to grpc-go's server (sniff.go), which refuses a request
	// that is not gRPC ...
	resp, err = h2cClient(t).Post("http://"+srv.mixed+"/v1/locks/get-info", "application/json", strings.NewReader(`{"resource":"mixed","durability":1}`))
	must(t, err)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Fatalf("h2c REST: %s %d, want HTTP/2 415", resp.Proto, resp.StatusCode)
	}
	// ... and gRPC on the same port.
	c := dial(t, []string{"http://" + srv.mixed})
	if r, err := c.TryLock(testCtx(t), "mixed", []byte("B"), time.Second, pers); err != nil || r.Status != lease.Busy {
		t.Fatalf("gRPC on the REST port: %v, %v", r, err)
	}
	// The native listener speaks gRPC only.
	c = dial(t, []string{"http://" + srv.native})
	if r, err := c.Unlock(testCtx(t), "mixed", []byte("A"), pers); err != nil || r.Status != lease.Unlocked {
		t.Fatalf("native gRPC: %v, %v", r, err)
	}
}

func TestHealthzExtraAndObserve(t *testing.T) {
	type seen struct {
		op lease.Op
		st lease.Status
	}
	var mu sync.Mutex
	var observed []seen
	srv := startServer(t, newFake(), ServerOptions{
		Extra: map[string]http.Handler{"/metrics": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			io.WriteString(w, "kahuna_up 1\n")
		})},
		Observe: func(op lease.Op, st lease.Status) {
			mu.Lock()
			observed = append(observed, seen{op, st})
			mu.Unlock()
		},
	})
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + srv.mixed + path)
		must(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 || body != "ok" {
		t.Fatalf("/healthz = %d %q", code, body)
	}
	if code, body := get("/metrics"); code != 200 || body != "kahuna_up 1\n" {
		t.Fatalf("/metrics = %d %q", code, body)
	}
	if code, _ := get("/nope"); code != 404 {
		t.Fatalf("/nope = %d", code)
	}

	// One observation per request, whatever the transport.
	c := dial(t, []string{"http://" + srv.native})
	c.TryLock(testCtx(t), "obs", []byte("A"), time.Second, pers)
	c.TryLock(testCtx(t), "obs", []byte("B"), time.Second, pers)
	c.TryLock(testCtx(t), "", []byte("B"), time.Second, pers) // refused by the client: not sent
	rawInvoke(t, rawConn(t, srv.mixed), "/Locker/GetLock", wGet("obs", 1))
	rawInvoke(t, rawConn(t, srv.mixed), "/Locker/Unlock", wUnlock("", "A", 1))
	newREST(t, srv.mixed).post("/v1/locks/try-unlock", `{"resource":"obs","owner":"`+b64("A")+`","durability":1}`)
	mu.Lock()
	defer mu.Unlock()
	want := []seen{{lease.TryLock, lease.Locked}, {lease.TryLock, lease.Busy}, {lease.Get, lease.Got},
		{lease.Unlock, lease.InvalidInput}, {lease.Unlock, lease.Unlocked}}
	if len(observed) != len(want) {
		t.Fatalf("observed %v, want %v", observed, want)
	}
	for i := range want {
		if observed[i] != want[i] {
			t.Fatalf("observed %v, want %v", observed, want)
		}
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key as PEM files
// and returns their paths and a pool trusting the certificate.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "kahuna test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	must(t, err)
	cert, err := x509.ParseCertificate(der)
	must(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	must(t, err)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	must(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	must(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600))
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

func TestTLS(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	srv := startServer(t, newFake(), ServerOptions{})
	lis := listen(t)
	addr := lis.Addr().String()
	served := make(chan error, 1)
	go func() { served <- srv.ServeTLS(lis, certFile, keyFile) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; err != nil {
			t.Errorf("ServeTLS after Close: %v", err)
		}
	})

	// gRPC over TLS, trusting the certificate ...
	c := dial(t, []string{"https://" + addr}, WithTLSConfig(&tls.Config{RootCAs: pool}))
	if r, err := c.TryLock(testCtx(t), "tls", []byte("A"), time.Second, pers); err != nil || r.Status != lease.Locked {
		t.Fatalf("TryLock over TLS: %v, %v", r, err)
	}
	// ... or skipping verification ...
	c = dial(t, []string{"https://" + addr}, WithInsecureSkipVerify())
	if r, err := c.TryLock(testCtx(t), "tls", []byte("B"), time.Second, pers); err != nil || r.Status != lease.Busy {
		t.Fatalf("TryLock over TLS, unverified: %v, %v", r, err)
	}
	// ... but not trusting an unknown certificate.
	if c, err := Dial(testCtx(t), []string{"https://" + addr}); err == nil {
		c.Close()
		t.Fatal("Dial trusted a self-signed certificate")
	}

	// REST over TLS: HTTP/2 by ALPN, and HTTP/1.1 for a client without h2.
	for _, h2 := range []bool{true, false} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: h2}
		if !h2 {
			tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
		}
		hc := &http.Client{Transport: tr}
		resp, err := hc.Post("https://"+addr+"/v1/locks/get-info", "application/json", strings.NewReader(`{"resource":"tls","durability":1}`))
		must(t, err)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		tr.CloseIdleConnections()
		wantMajor := 1
		if h2 {
			wantMajor = 2
		}
		if resp.ProtoMajor != wantMajor || resp.TLS.NegotiatedProtocol != map[bool]string{true: "h2", false: "http/1.1"}[h2] ||
			!strings.Contains(string(raw), `"type":4`) {
			t.Fatalf("REST over TLS (h2=%v): %s alpn=%q %s", h2, resp.Proto, resp.TLS.NegotiatedProtocol, raw)
		}
	}
}

func TestServeAfterClose(t *testing.T) {
	srv := NewServer(newFake(), ServerOptions{})
	must(t, srv.Close())
	for name, serve := range map[string]func(net.Listener) error{
		"ServeHTTP": srv.ServeHTTP,
		"ServeGRPC": srv.ServeGRPC,
		"ServeTLS":  func(l net.Listener) error { return srv.ServeTLS(l, "none", "none") },
	} {
		lis := listen(t)
		if err := serve(lis); err != ErrServerClosed {
			t.Errorf("%s after Close = %v, want ErrServerClosed", name, err)
		}
		if _, err := net.Dial("tcp", lis.Addr().String()); err == nil {
			t.Errorf("%s left its listener open", name)
		}
	}
	must(t, srv.Shutdown(context.Background()))
}
