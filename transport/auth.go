package transport

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	v1 "github.com/kahunago/kahuna/transport/kahunav1pb"
	pb "github.com/kahunago/kahuna/transport/lockspb"
)

// Tokens is a set of bearer tokens that a Server accepts, safe for
// concurrent use. Set replaces the whole set at once, so a reload never
// leaves a half-read set in force. Tokens are kept as SHA-256 digests and
// compared in constant time, with every listed token checked, so neither
// the time of an answer nor an early exit says how close a guess was.
type Tokens struct {
	set atomic.Pointer[tokenSet]
}

type tokenSet struct {
	first   string     // the token a node sends to its peers (Primary)
	digests [][32]byte // of every token, in file order
}

// NewTokens returns a set holding tokens (see Set).
func NewTokens(tokens ...string) (*Tokens, error) {
	t := new(Tokens)
	if err := t.Set(tokens); err != nil {
		return nil, err
	}
	return t, nil
}

// Set replaces the set with tokens. It refuses an empty list or an empty
// token, keeping the set it had: a set that accepts nobody is a mistake,
// not a setting.
func (t *Tokens) Set(tokens []string) error {
	if len(tokens) == 0 {
		return errors.New("no tokens")
	}
	ts := &tokenSet{first: tokens[0], digests: make([][32]byte, len(tokens))}
	for i, tok := range tokens {
		if tok == "" {
			return fmt.Errorf("token %d is empty", i+1)
		}
		ts.digests[i] = sha256.Sum256([]byte(tok))
	}
	t.set.Store(ts)
	return nil
}

// Valid reports whether token is in the set, in time that depends only on
// the size of the set.
func (t *Tokens) Valid(token string) bool {
	ts := t.set.Load()
	if ts == nil {
		return false
	}
	d := sha256.Sum256([]byte(token))
	ok := 0
	for i := range ts.digests {
		ok |= subtle.ConstantTimeCompare(d[:], ts.digests[i][:])
	}
	return ok == 1
}

// Primary is the first token of the set ("" if none): the one a node
// presents to its peers. Listing a new secret second, then first, then
// dropping the old one rotates it without a moment where peers disagree.
func (t *Tokens) Primary() string {
	if ts := t.set.Load(); ts != nil {
		return ts.first
	}
	return ""
}

// Len is the number of tokens in the set.
func (t *Tokens) Len() int {
	if ts := t.set.Load(); ts != nil {
		return len(ts.digests)
	}
	return 0
}

// ReadTokens reads a token file: one token a line, surrounding blanks
// trimmed, blank lines and lines starting with '#' ignored. A file with no
// token, or a token with a blank inside (a line holding two tokens, or a
// "Bearer " prefix left in), is an error.
func ReadTokens(r io.Reader) ([]string, error) {
	var tokens []string
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.ContainsAny(l, " \t") {
			return nil, fmt.Errorf("line %d: a token has no blanks inside (one token a line)", line)
		}
		tokens = append(tokens, l)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(tokens) == 0 {
		return nil, errors.New("no tokens (only blank lines and # comments)")
	}
	return tokens, nil
}

// LoadTokenFile reads the token file at path (see ReadTokens).
func LoadTokenFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tokens, err := ReadTokens(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return tokens, nil
}

// ReloadTokenFile replaces t with the tokens of the file at path. On any
// error t keeps its old set, and the error says why.
func (t *Tokens) ReloadTokenFile(path string) error {
	tokens, err := LoadTokenFile(path)
	if err != nil {
		return err
	}
	return t.Set(tokens)
}

// Why a call was refused, said to the caller.
const (
	errNoToken  = "missing bearer token: send Authorization: Bearer TOKEN"
	errBadToken = "bearer token not accepted"
	errBadAuth  = "malformed Authorization: want Bearer TOKEN"
)

// bearer extracts the token of an Authorization value; why is set when
// there is none.
func bearer(values []string) (token, why string) {
	if len(values) == 0 || values[0] == "" {
		return "", errNoToken
	}
	scheme, tok, ok := strings.Cut(strings.TrimSpace(values[0]), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return "", errBadAuth
	}
	return strings.TrimSpace(tok), ""
}

// check says why an Authorization header does not pass t ("" if it
// does). A nil t lets every call through.
func check(t *Tokens, values []string) string {
	if t == nil {
		return ""
	}
	tok, why := bearer(values)
	if why != "" {
		return why
	}
	if !t.Valid(tok) {
		return errBadToken
	}
	return ""
}

// requireToken guards h with t (nil: h unguarded). A refused request gets
// HTTP 401 with a JSON body saying why, and never reaches h.
func requireToken(t *Tokens, h http.Handler) http.Handler {
	if t == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if why := check(t, r.Header.Values("Authorization")); why != "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="kahuna"`)
			writeError(w, http.StatusUnauthorized, why)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// requireTokenOrSecret guards an Extra handler (the admin API, metrics):
// with t set, a token of t or of the cluster secret peer passes, since
// members call each other's admin API with the secret (membership
// changes, joining). nil t: unguarded, as requireToken.
func requireTokenOrSecret(t, peer *Tokens, h http.Handler) http.Handler {
	if t == nil || peer == nil {
		return requireToken(t, h)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		why := check(t, r.Header.Values("Authorization"))
		if why != "" && check(peer, r.Header.Values("Authorization")) == "" {
			why = ""
		}
		if why != "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="kahuna"`)
			writeError(w, http.StatusUnauthorized, why)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// tokensFor is the set that guards a gRPC method: PeerTokens for the
// node-to-node calls (Kahuna's forwarding stream, the native ForwardLock,
// ForwardLockStream, ForwardWatch and ForwardBatch), else Tokens, and
// Tokens for the rest.
func (s *Server) tokensFor(fullMethod string) *Tokens {
	if peerMethod(fullMethod) && s.opts.PeerTokens != nil {
		return s.opts.PeerTokens
	}
	return s.opts.Tokens
}

func (s *Server) authenticate(ctx context.Context, fullMethod string) error {
	t := s.tokensFor(fullMethod)
	if t == nil {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if why := check(t, md.Get("authorization")); why != "" {
		return status.Error(codes.Unauthenticated, why)
	}
	return nil
}

// authUnary and authStream check the bearer token of every call, once at
// the start of a stream: a batch stream authenticated at its start serves
// every message on it.
func (s *Server) authUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := s.authenticate(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (s *Server) authStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := s.authenticate(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return h(srv, ss)
}

// WithToken makes the client send token as "authorization: Bearer TOKEN"
// (gRPC metadata, or the REST Authorization header) on every call.
func WithToken(token string) ClientOption {
	return WithTokenSource(func() string { return token })
}

// WithTokenSource is WithToken with the token read from src when a stream
// or a REST call starts, so a reloaded secret is used from the next new
// stream on. src returning "" sends no token.
func WithTokenSource(src func() string) ClientOption {
	return func(cfg *clientConfig) { cfg.token = src }
}

// tokenCreds carries the bearer token in gRPC metadata. It is allowed on
// cleartext (h2c) connections too: Kahuna's ports serve both, and whether
// a token may cross a network in the clear is the operator's choice.
type tokenCreds struct{ src func() string }

var _ credentials.PerRPCCredentials = tokenCreds{}

func (c tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	if tok := c.src(); tok != "" {
		return map[string]string{"authorization": "Bearer " + tok}, nil
	}
	return nil, nil
}

func (tokenCreds) RequireTransportSecurity() bool { return false }

// peerMethod reports whether a gRPC method is node-to-node.
func peerMethod(fullMethod string) bool {
	switch fullMethod {
	case pb.Locker_BatchServerLockRequests_FullMethodName, v1.Kahuna_ForwardLock_FullMethodName, v1.Kahuna_ForwardLockStream_FullMethodName,
		v1.Kahuna_ForwardWatch_FullMethodName, v1.Kahuna_ForwardBatch_FullMethodName:
		return true
	}
	return false
}
