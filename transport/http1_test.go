package transport

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/kahunago/kahuna/lease"
)

// startREST serves l on a loopback shared port, with the REST fast path
// or (fast false) with net/http alone, and returns the server and address.
func startREST(t *testing.T, l lease.Locker, opts ServerOptions, fast bool) (*Server, string) {
	t.Helper()
	return serveREST(t, l, opts, fast, listen(t))
}

// serveREST is startREST on lis.
func serveREST(t *testing.T, l lease.Locker, opts ServerOptions, fast bool, lis net.Listener) (*Server, string) {
	t.Helper()
	opts.Logger = slog.New(slog.DiscardHandler)
	s := NewServer(l, opts)
	s.noFastREST = !fast
	served := make(chan error, 1)
	go func() { served <- s.ServeHTTP(lis) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-served; err != nil && !errors.Is(err, ErrServerClosed) {
			t.Errorf("ServeHTTP returned %v after Close", err)
		}
	})
	return s, lis.Addr().String()
}

// exchange writes raw on a new connection to addr and reads every
// response until the server closes the connection or want have come.
func exchange(t *testing.T, addr, raw string, want int) []*http.Response {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	must(t, err)
	defer c.Close()
	_, err = io.WriteString(c, raw)
	must(t, err)
	must(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	br := bufio.NewReader(c)
	var out []*http.Response
	for len(out) < want {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				break
			}
			t.Fatalf("reading response %d: %v", len(out)+1, err)
		}
		body, err := io.ReadAll(resp.Body)
		must(t, err)
		resp.Body = io.NopCloser(bytes.NewReader(body))
		out = append(out, resp)
	}
	return out
}

// summary is what a client can tell of a response, less its Date.
func summary(resp *http.Response) string {
	body, _ := io.ReadAll(resp.Body)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return strings.Join([]string{resp.Status, resp.Proto, resp.Header.Get("Content-Type"),
		resp.Header.Get("Content-Length"), resp.Header.Get("Connection"), resp.Header.Get("Www-Authenticate"),
		resp.Header.Get("Allow"), string(body)}, " | ")
}

func post(path, headers, body string) string {
	return "POST " + path + " HTTP/1.1\r\nHost: kahuna\r\n" + headers +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

const (
	jsonCT   = "Content-Type: application/json\r\n"
	lockJSON = `{"resource":"r","owner":"b3duZXI=","expiresMs":30000,"durability":0}`
)

// TestFastRESTAnswersAsNetHTTP sends the same bytes to a server with the
// REST fast path and to one with net/http alone: every response must be
// the same (Date aside), and the fast path must have served the requests
// in its subset and handed the rest on.
func TestFastRESTAnswersAsNetHTTP(t *testing.T) {
	bigHeader := "X-Padding: " + strings.Repeat("p", fastHeadMax) + "\r\n"
	cases := []struct {
		name     string
		raw      string
		n        int   // responses expected
		fast     int64 // of them served by the fast path
		handedOn bool  // the connection went on to net/http
	}{
		{"try-lock", post("/v1/locks/try-lock", jsonCT, lockJSON), 1, 1, false},
		// As Node.js 20's fetch sends it (captured), lowercase names and all.
		{"node fetch", "POST /v1/locks/try-lock HTTP/1.1\r\nhost: 127.0.0.1:2070\r\nconnection: keep-alive\r\n" +
			"Content-Type: application/json\r\naccept: */*\r\naccept-language: *\r\nsec-fetch-mode: cors\r\n" +
			"user-agent: node\r\naccept-encoding: gzip, deflate\r\ncontent-length: 63\r\n\r\n" +
			`{"resource":"r","owner":"b3du","expiresMs":1000,"durability":0}`, 1, 1, false},
		{"charset and case", post("/v1/locks/try-lock", "content-type: Application/JSON; charset=UTF-8\r\n", lockJSON), 1, 1, false},
		{"get-info", post("/v1/locks/get-info", jsonCT, `{"resource":"r"}`), 1, 1, false},
		{"try-extend", post("/v1/locks/try-extend", jsonCT, lockJSON), 1, 1, false},
		{"try-unlock", post("/v1/locks/try-unlock", jsonCT, lockJSON), 1, 1, false},
		{"keep-alive", post("/v1/locks/try-lock", jsonCT+"Connection: keep-alive\r\n", lockJSON), 1, 1, false},
		{"close", post("/v1/locks/try-lock", jsonCT+"Connection: close\r\n", lockJSON), 1, 1, false},
		{"null body", post("/v1/locks/try-lock", jsonCT, "null"), 1, 1, false},
		{"malformed JSON", post("/v1/locks/try-lock", jsonCT, `{"resource":`), 1, 1, false},
		{"trailing bytes", post("/v1/locks/try-lock", jsonCT, lockJSON+"x"), 1, 1, false},
		{"bad base64", post("/v1/locks/try-lock", jsonCT, `{"resource":"r","owner":"!!","expiresMs":1}`), 1, 1, false},
		{"empty resource", post("/v1/locks/try-lock", jsonCT, `{"owner":"b3duZXI=","expiresMs":1}`), 1, 1, false},
		{"pipelined", post("/v1/locks/try-lock", jsonCT, lockJSON) + post("/v1/locks/get-info", jsonCT, `{"resource":"r"}`) +
			post("/v1/locks/try-unlock", jsonCT, lockJSON), 3, 3, false},
		{"then healthz", post("/v1/locks/try-lock", jsonCT, lockJSON) + "GET /healthz HTTP/1.1\r\nHost: k\r\n\r\n" +
			post("/v1/locks/get-info", jsonCT, `{"resource":"r"}`), 3, 1, true},
		{"charset without space", post("/v1/locks/try-lock", "Content-Type: application/json;charset=utf-8\r\n", lockJSON), 1, 0, true},
		{"text/plain", post("/v1/locks/try-lock", "Content-Type: text/plain\r\n", lockJSON), 1, 0, true},
		{"no content type", post("/v1/locks/try-lock", "", lockJSON), 1, 0, true},
		{"two content types", post("/v1/locks/try-lock", jsonCT+jsonCT, lockJSON), 1, 0, true},
		{"GET a lock route", "GET /v1/locks/try-lock HTTP/1.1\r\nHost: k\r\n\r\n", 1, 0, true},
		{"query string", post("/v1/locks/try-lock?x=1", jsonCT, lockJSON), 1, 0, true},
		{"unknown route", post("/v1/locks/nope", jsonCT, lockJSON), 1, 0, true},
		{"HTTP/1.0", strings.Replace(post("/v1/locks/try-lock", jsonCT, lockJSON), "HTTP/1.1", "HTTP/1.0", 1), 1, 0, true},
		{"no Host", "POST /v1/locks/try-lock HTTP/1.1\r\n" + jsonCT + "Content-Length: 2\r\n\r\n{}", 1, 0, true},
		{"two Hosts", post("/v1/locks/try-lock", jsonCT+"Host: b\r\n", lockJSON), 1, 0, true},
		{"bad Host", strings.Replace(post("/v1/locks/try-lock", jsonCT, lockJSON), "Host: kahuna", "Host: a b", 1), 1, 0, true},
		{"chunked", "POST /v1/locks/try-lock HTTP/1.1\r\nHost: k\r\n" + jsonCT + "Transfer-Encoding: chunked\r\n\r\n" +
			"5\r\n{\"res\r\n" + strconv.FormatInt(int64(len(lockJSON)-6), 16) + "\r\n" + lockJSON[6:] + "\r\n0\r\n\r\n", 1, 0, true},
		{"expect", post("/v1/locks/try-lock", jsonCT+"Expect: 100-continue\r\n", lockJSON), 2, 0, true},
		{"no length", "POST /v1/locks/try-lock HTTP/1.1\r\nHost: k\r\n" + jsonCT + "\r\n", 1, 0, true},
		{"two lengths", strings.Replace(post("/v1/locks/try-lock", jsonCT, lockJSON), "\r\n\r\n", "\r\nContent-Length: 69\r\n\r\n", 1), 1, 0, true},
		{"signed length", strings.Replace(post("/v1/locks/try-lock", jsonCT, lockJSON), "Content-Length: ", "Content-Length: +", 1), 1, 0, true},
		{"over the size limit", post("/v1/locks/try-lock", jsonCT, `{"resource":"`+strings.Repeat("x", DefaultMaxRequestBytes)+`"}`), 1, 0, true},
		{"bare LF", strings.ReplaceAll(post("/v1/locks/try-lock", jsonCT, lockJSON), "\r\n", "\n"), 1, 0, true},
		{"folded header", post("/v1/locks/try-lock", jsonCT+"X-A: b\r\n c\r\n", lockJSON), 1, 0, true},
		{"space before colon", post("/v1/locks/try-lock", jsonCT+"X-A : b\r\n", lockJSON), 1, 0, true},
		{"control byte in a value", post("/v1/locks/try-lock", jsonCT+"X-A: b\x01c\r\n", lockJSON), 1, 0, true},
		{"Connection: upgrade", post("/v1/locks/try-lock", jsonCT+"Connection: upgrade\r\nUpgrade: h2c\r\n", lockJSON), 1, 0, true},
		{"head over the buffer", post("/v1/locks/try-lock", jsonCT+bigHeader, lockJSON), 1, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fastSrv, fastAddr := startREST(t, newFake(), ServerOptions{}, true)
			_, plainAddr := startREST(t, newFake(), ServerOptions{}, false)
			got := exchange(t, fastAddr, tc.raw, tc.n)
			want := exchange(t, plainAddr, tc.raw, tc.n)
			if len(got) != len(want) || len(got) != tc.n {
				t.Fatalf("%d responses with the fast path, %d with net/http, want %d", len(got), len(want), tc.n)
			}
			for i := range got {
				if g, w := summary(got[i]), summary(want[i]); g != w {
					t.Errorf("response %d:\n fast path: %s\n net/http:  %s", i+1, g, w)
				}
			}
			if served, handed := fastSrv.fast.served.Load(), fastSrv.fast.handedOff.Load(); served != tc.fast || (handed == 1) != tc.handedOn {
				t.Errorf("fast path served %d (want %d), handed on %d connections (want %v)", served, tc.fast, handed, tc.handedOn)
			}
		})
	}
}

// TestFastRESTTokens: with tokens, the fast path serves a request with a
// valid one and leaves the 401 (and its reason) to net/http.
func TestFastRESTTokens(t *testing.T) {
	tokens, err := NewTokens("s3cret")
	must(t, err)
	for _, tc := range []struct {
		name, auth string
		code       int
		fast       int64
	}{
		{"valid", "Authorization: Bearer s3cret\r\n", http.StatusOK, 1},
		{"missing", "", http.StatusUnauthorized, 0},
		{"wrong", "Authorization: Bearer nope\r\n", http.StatusUnauthorized, 0},
		{"twice", "Authorization: Bearer s3cret\r\nAuthorization: Bearer s3cret\r\n", http.StatusOK, 1},
		{"valid and wrong", "Authorization: Bearer nope\r\nAuthorization: Bearer s3cret\r\n", http.StatusUnauthorized, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newFake()
			srv, addr := startREST(t, l, ServerOptions{Tokens: tokens}, true)
			_, plainAddr := startREST(t, newFake(), ServerOptions{Tokens: tokens}, false)
			raw := post("/v1/locks/try-lock", jsonCT+tc.auth, lockJSON)
			got, want := exchange(t, addr, raw, 1), exchange(t, plainAddr, raw, 1)
			if got[0].StatusCode != tc.code || summary(got[0]) != summary(want[0]) {
				t.Errorf("got %s, net/http %s, want %d", summary(got[0]), summary(want[0]), tc.code)
			}
			if n := srv.fast.served.Load(); n != tc.fast {
				t.Errorf("fast path served %d, want %d", n, tc.fast)
			}
			if tc.code != http.StatusOK && l.served.Load() != 0 {
				t.Errorf("a refused request reached the Locker")
			}
		})
	}
}

// TestFastRESTShutdown: Shutdown closes an idle fast-path connection,
// lets a request in flight finish and be answered, then returns.
func TestFastRESTShutdown(t *testing.T) {
	l := newFake()
	g := newGate("slow")
	l.hook = g.hook
	srv, addr := startREST(t, l, ServerOptions{}, true)

	idle, err := net.Dial("tcp", addr)
	must(t, err)
	defer idle.Close()
	_, err = io.WriteString(idle, post("/v1/locks/try-lock", jsonCT, lockJSON))
	must(t, err)
	must(t, idle.SetReadDeadline(time.Now().Add(10*time.Second)))
	ibr := bufio.NewReader(idle)
	resp, err := http.ReadResponse(ibr, nil)
	must(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)

	busy, err := net.Dial("tcp", addr)
	must(t, err)
	defer busy.Close()
	_, err = io.WriteString(busy, post("/v1/locks/try-lock", jsonCT, strings.Replace(lockJSON, `"r"`, `"slow"`, 1)))
	must(t, err)
	<-g.arrived

	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		shut <- srv.Shutdown(ctx)
	}()
	// The idle connection is closed without an answer...
	if _, err := ibr.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("idle connection at shutdown: read %v, want EOF", err)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with a request in flight", err)
	default:
	}
	// ...the busy one is answered, then closed, and Shutdown returns.
	close(g.release)
	must(t, busy.SetReadDeadline(time.Now().Add(10*time.Second)))
	bbr := bufio.NewReader(busy)
	resp, err = http.ReadResponse(bbr, nil)
	must(t, err)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("request in flight at shutdown: %s", resp.Status)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if _, err := bbr.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("busy connection after its answer: read %v, want EOF", err)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// TestFastRESTHeadInPieces: a request whose head and body arrive in
// pieces is still served by the fast path.
func TestFastRESTHeadInPieces(t *testing.T) {
	srv, addr := startREST(t, newFake(), ServerOptions{}, true)
	c, err := net.Dial("tcp", addr)
	must(t, err)
	defer c.Close()
	raw := post("/v1/locks/try-lock", jsonCT, lockJSON)
	for i := 0; i < len(raw); i += 7 {
		_, err := io.WriteString(c, raw[i:min(i+7, len(raw))])
		must(t, err)
		time.Sleep(time.Millisecond) // not a wait for anything: spreads the pieces over reads
	}
	must(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	must(t, err)
	if resp.StatusCode != http.StatusOK || srv.fast.served.Load() != 1 {
		t.Fatalf("%s, fast path served %d", resp.Status, srv.fast.served.Load())
	}
}

// FuzzFastHead holds the fast path's parser to net/http's reading: every
// request it takes, http.ReadRequest reads the same way (method, route,
// protocol, one valid Host, length, body, where the next request starts,
// Connection: close, Authorization, a JSON Content-Type) and net/http's
// server would not refuse. What it refuses, net/http answers itself.
func FuzzFastHead(f *testing.F) {
	f.Add([]byte(post("/v1/locks/try-lock", jsonCT, lockJSON)))
	f.Add([]byte(post("/v1/locks/get-info", "content-type: application/json; charset=utf-8\r\nConnection: close\r\nAuthorization: Bearer x\r\n", `{"resource":"r"}`)))
	f.Add([]byte(post("/v1/locks/try-unlock", jsonCT+"X-A:\tb \r\n", "{}") + post("/v1/locks/try-lock", jsonCT, "{}")))
	f.Add([]byte(strings.ReplaceAll(post("/v1/locks/try-lock", jsonCT, lockJSON), "\r\n", "\n")))
	f.Add([]byte(post("/v1/locks/try-extend", jsonCT+"Host: b\r\n", lockJSON)))
	f.Add([]byte(post("/v1/locks/try-lock", jsonCT+"Transfer-Encoding: chunked\r\n", "2\r\n{}\r\n0\r\n\r\n")))
	f.Fuzz(func(t *testing.T, b []byte) {
		head, err := peekHead(bufio.NewReaderSize(bytes.NewReader(b), fastHeadMax), func() {})
		if err != nil {
			return
		}
		fh, ok := parseFastHead(head, DefaultMaxRequestBytes)
		if !ok {
			return
		}
		br := bufio.NewReader(bytes.NewReader(b))
		req, err := http.ReadRequest(br)
		if err != nil {
			t.Fatalf("fast path takes %q, net/http refuses it: %v", head, err)
		}
		if req.Method != http.MethodPost || req.RequestURI != restRoutePaths[fh.route] || req.URL.Path != restRoutePaths[fh.route] ||
			req.URL.RawQuery != "" || req.Proto != "HTTP/1.1" {
			t.Fatalf("fast path: %s, net/http: %s %s %s", restRoutePaths[fh.route], req.Method, req.RequestURI, req.Proto)
		}
		if req.Host == "" || !httpguts.ValidHostHeader(req.Host) {
			t.Fatalf("net/http's server would refuse Host %q", req.Host)
		}
		for k, vv := range req.Header {
			if !httpguts.ValidHeaderFieldName(k) {
				t.Fatalf("net/http's server would refuse header name %q", k)
			}
			for _, v := range vv {
				if !httpguts.ValidHeaderFieldValue(v) {
					t.Fatalf("net/http's server would refuse %s value %q", k, v)
				}
			}
		}
		if req.ContentLength != int64(fh.contentLength) || len(req.TransferEncoding) != 0 || req.Close != fh.close {
			t.Fatalf("fast path: length %d close %v; net/http: length %d, transfer encoding %v, close %v",
				fh.contentLength, fh.close, req.ContentLength, req.TransferEncoding, req.Close)
		}
		if got := req.Header.Values("Authorization"); strings.Join(got, "\n") != strings.Join(fh.auth, "\n") || len(got) != len(fh.auth) {
			t.Fatalf("Authorization: fast path %q, net/http %q", fh.auth, got)
		}
		if mt, _, err := mime.ParseMediaType(req.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			t.Fatalf("Content-Type %q: net/http's handler reads %q, %v", req.Header.Get("Content-Type"), mt, err)
		}
		body, err := io.ReadAll(req.Body)
		rest := b[min(len(b), len(head)+fh.contentLength):]
		if len(b) < len(head)+fh.contentLength {
			if err == nil {
				t.Fatalf("body cut short: net/http read it whole (%d bytes)", len(body))
			}
			return
		}
		if err != nil || !bytes.Equal(body, b[len(head):len(head)+fh.contentLength]) {
			t.Fatalf("body: net/http read %q (%v), fast path %q", body, err, b[len(head):len(head)+fh.contentLength])
		}
		after, _ := io.ReadAll(br)
		if !bytes.Equal(after, rest) {
			t.Fatalf("the next request: net/http starts at %q, fast path at %q", after, rest)
		}
	})
}

// FuzzFastResponse holds the REST client's reader of answer heads to
// http.ReadResponse: every answer it takes, net/http reads with the same
// status, length, body, Connection: close and next answer's start.
func FuzzFastResponse(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nDate: Thu, 03 Dec 2026 11:00:00 GMT\r\nContent-Length: 2\r\n\r\n{}HTTP/1.1 200 OK\r\n"))
	f.Add([]byte("HTTP/1.1 401 Unauthorized\r\nConnection: close\r\nWww-Authenticate: Bearer realm=\"kahuna\"\r\nContent-Length: 5\r\n\r\nnope\n"))
	f.Add([]byte("HTTP/1.1 200\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"))
	f.Add([]byte("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		head, err := peekHead(bufio.NewReaderSize(bytes.NewReader(b), fastHeadMax), func() {})
		if err != nil {
			return
		}
		a, ok := parseFastResponse(head, h1MaxReply)
		if !ok {
			return
		}
		br := bufio.NewReader(bytes.NewReader(b))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("fast path takes %q, net/http refuses it: %v", head, err)
		}
		if resp.StatusCode != a.code || resp.ContentLength != int64(a.contentLength) || resp.Close != a.close ||
			len(resp.TransferEncoding) != 0 || resp.ProtoMajor != 1 || resp.ProtoMinor != 1 {
			t.Fatalf("fast path: %+v; net/http: %d length %d close %v transfer encoding %v %s",
				a, resp.StatusCode, resp.ContentLength, resp.Close, resp.TransferEncoding, resp.Proto)
		}
		body, err := io.ReadAll(resp.Body)
		if len(b) < len(head)+a.contentLength {
			if err == nil {
				t.Fatalf("body cut short: net/http read it whole (%d bytes)", len(body))
			}
			return
		}
		if err != nil || !bytes.Equal(body, b[len(head):len(head)+a.contentLength]) {
			t.Fatalf("body: net/http read %q (%v), fast path %q", body, err, b[len(head):len(head)+a.contentLength])
		}
		after, _ := io.ReadAll(br)
		if !bytes.Equal(after, b[len(head)+a.contentLength:]) {
			t.Fatalf("the next answer: net/http starts at %q, fast path at %q", after, b[len(head)+a.contentLength:])
		}
	})
}
