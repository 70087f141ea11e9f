package transport

import (
	"bytes"

	"golang.org/x/net/http/httpguts"

	"github.com/kahunago/kahuna/lease"
)

// The REST fast path (http1.go) serves the requests Kahuna's clients send
// to the lock routes without net/http. It takes only a strict subset of
// HTTP/1.1, one that net/http reads the same way (FuzzFastHead holds it to
// that); a request outside it is handed to net/http with the connection,
// which answers it as before.

// restRoute is one of the REST lock routes: Kahuna's four, and
// check-token.
type restRoute uint8

const (
	routeNone restRoute = iota
	routeTryLock
	routeExtend
	routeUnlock
	routeGet
	routeCheckToken
)

// restRoutePaths are the routes' paths, as the mux in listener.go has them.
var restRoutePaths = [...]string{
	routeTryLock:    "/v1/locks/try-lock",
	routeExtend:     "/v1/locks/try-extend",
	routeUnlock:     "/v1/locks/try-unlock",
	routeGet:        "/v1/locks/get-info",
	routeCheckToken: "/v1/locks/check-token",
}

// op is the lock operation of a route (routeGet's and routeCheckToken's
// is lease.Get).
func (r restRoute) op() lease.Op {
	switch r {
	case routeExtend:
		return lease.Extend
	case routeUnlock:
		return lease.Unlock
	case routeGet, routeCheckToken:
		return lease.Get
	}
	return lease.TryLock
}

// fastHead is what the fast path needs of a request head.
type fastHead struct {
	framing
	route restRoute
	auth  []string // Authorization values, in order
}

// framing is what frames a message, request or answer: its length, and
// whether the connection closes after it.
type framing struct {
	lengths       int // Content-Length headers seen
	contentLength int
	close         bool // Connection: close
}

// field reads name and value when they frame the message: handled says
// whether they do, ok whether the value is in the fast paths' subset (one
// digits-only Content-Length up to maxBody; Connection only of
// "keep-alive" and "close"; no Transfer-Encoding or Trailer).
func (f *framing) field(name, value []byte, maxBody int) (handled, ok bool) {
	switch {
	case asciiEqualFold(name, "content-length"):
		f.lengths++
		f.contentLength, ok = parseLength(value, maxBody)
		return true, ok
	case asciiEqualFold(name, "connection"):
		close, ok := connectionClose(value)
		f.close = f.close || close
		return true, ok
	case asciiEqualFold(name, "transfer-encoding"), asciiEqualFold(name, "trailer"):
		return true, false
	}
	return false, true
}

// parseFastHead reads head, a request head ending with its blank line
// (CRLF CRLF). ok is false for anything outside the fast path's subset:
//
//   - the request line is exactly "POST <route path> HTTP/1.1";
//   - every line ends with CRLF, none is folded, every name is a token and
//     every value is free of control characters, as net/http insists;
//   - one Host header, not empty and valid as net/http's server checks it;
//   - one Content-Length of digits only, at most maxBody;
//   - Content-Type "application/json", bare or with "; charset=utf-8";
//   - no Transfer-Encoding, Expect, Upgrade, TE or Trailer header, and a
//     Connection header only of "keep-alive" and "close".
//
// Other headers are ignored, as the lock routes ignore them.
func parseFastHead(head []byte, maxBody int) (h fastHead, ok bool) {
	line, rest, ok := cutLine(head)
	if !ok {
		return h, false
	}
	if h.route = routeOfRequestLine(line); h.route == routeNone {
		return h, false
	}
	hosts, types := 0, 0
	ok = eachField(rest, func(name, value []byte) bool {
		if handled, ok := h.field(name, value, maxBody); handled {
			return ok
		}
		switch {
		case asciiEqualFold(name, "host"):
			hosts++
			return len(value) > 0 && httpguts.ValidHostHeader(string(value))
		case asciiEqualFold(name, "content-type"):
			types++
			return asciiEqualFold(value, "application/json") || asciiEqualFold(value, "application/json; charset=utf-8")
		case asciiEqualFold(name, "authorization"):
			h.auth = append(h.auth, string(value))
		case asciiEqualFold(name, "expect"), asciiEqualFold(name, "upgrade"), asciiEqualFold(name, "te"):
			return false
		}
		return true
	})
	return h, ok && hosts == 1 && h.lengths == 1 && types == 1
}

// eachField calls field with the name and value of each header line in
// rest, up to the blank line that must end it. It returns false at a
// malformed line (no colon, a name that is not a token, a value with
// control characters), a missing blank line, bytes after it, or when
// field does.
func eachField(rest []byte, field func(name, value []byte) bool) bool {
	for {
		line, next, ok := cutLine(rest)
		if !ok {
			return false
		}
		if rest = next; len(line) == 0 {
			return len(rest) == 0
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return false
		}
		name, value := line[:colon], trimOWS(line[colon+1:])
		if !httpguts.ValidHeaderFieldName(string(name)) || !validFieldValue(value) || !field(name, value) {
			return false
		}
	}
}

// routeOfRequestLine is the route of "POST <path> HTTP/1.1", or routeNone.
func routeOfRequestLine(line []byte) restRoute {
	const method, proto = "POST ", " HTTP/1.1"
	if len(line) < len(method)+len(proto) || !bytes.HasPrefix(line, []byte(method)) || !bytes.HasSuffix(line, []byte(proto)) {
		return routeNone
	}
	path := line[len(method) : len(line)-len(proto)]
	for r, p := range restRoutePaths {
		if p != "" && string(path) == p {
			return restRoute(r)
		}
	}
	return routeNone
}

// cutLine splits b after its first CRLF. A bare LF (which net/http also
// takes as a line end) or a missing CRLF is not ok.
func cutLine(b []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(b, '\n')
	if i < 1 || b[i-1] != '\r' {
		return nil, nil, false
	}
	return b[:i-1], b[i+1:], true
}

// trimOWS drops the optional whitespace (SP, HTAB) around a field value.
func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// validFieldValue: no control characters but HTAB, and no DEL. Stricter
// than net/http (which takes bytes ≥ 0x80 too), so whatever passes here
// passes there.
func validFieldValue(b []byte) bool {
	for _, c := range b {
		if (c < ' ' && c != '\t') || c >= 0x7f {
			return false
		}
	}
	return true
}

// parseLength reads a Content-Length of 1 to 9 digits, at most max.
func parseLength(b []byte, max int) (int, bool) {
	if len(b) == 0 || len(b) > 9 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, n <= max
}

// connectionClose reads a Connection value made only of "keep-alive" and
// "close" (comma-separated, any case); close says whether it has "close".
func connectionClose(v []byte) (close, ok bool) {
	for len(v) > 0 {
		tok, rest, _ := bytes.Cut(v, []byte{','})
		v = rest
		switch tok = trimOWS(tok); {
		case asciiEqualFold(tok, "close"):
			close = true
		case asciiEqualFold(tok, "keep-alive"), len(tok) == 0:
		default:
			return false, false
		}
	}
	return close, true
}

// asciiEqualFold reports whether b equals the lowercase ASCII s, ignoring
// ASCII case.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// fastAnswer is what the REST client needs of an answer's head.
type fastAnswer struct {
	framing
	code int
}

// parseFastResponse reads head, an answer's head ending with its blank
// line, when it is in the subset the REST client reads itself: status line
// "HTTP/1.1 NNN reason" with NNN from 200 to 599; lines as parseFastHead
// takes them; one Content-Length of digits only, at most maxBody; no
// Transfer-Encoding or Trailer; a Connection header only of "keep-alive"
// and "close". Anything else (not ok) goes to http.ReadResponse.
func parseFastResponse(head []byte, maxBody int) (a fastAnswer, ok bool) {
	line, rest, ok := cutLine(head)
	if !ok || len(line) < 12 || string(line[:9]) != "HTTP/1.1 " || (len(line) > 12 && line[12] != ' ') || !validFieldValue(line) {
		return a, false
	}
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return a, false
		}
		a.code = a.code*10 + int(c-'0')
	}
	if a.code < 200 || a.code > 599 {
		return a, false
	}
	ok = eachField(rest, func(name, value []byte) bool {
		_, ok := a.field(name, value, maxBody)
		return ok
	})
	return a, ok && a.lengths == 1
}
