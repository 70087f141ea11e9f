package httpfence

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/kahunago/kahuna/fence"
)

// WithFence returns a copy of c (nil: http.DefaultClient) whose requests
// carry tok in the Kahuna-Fence header, for a holder that writes with one
// token; NewTransport serves many tokens from one client.
func WithFence(c *http.Client, tok fence.Token) *http.Client {
	if c == nil {
		c = http.DefaultClient
	}
	cc := *c
	cc.Transport = &transport{base: c.Transport, tok: &tok}
	return &cc
}

// NewTransport returns a RoundTripper over base (nil: http.DefaultTransport)
// that adds the Kahuna-Fence header to requests whose context carries a
// token (ContextWithToken) and sends others unchanged.
func NewTransport(base http.RoundTripper) http.RoundTripper {
	return &transport{base: base}
}

type tokenKey struct{}

// ContextWithToken returns ctx carrying tok, for NewTransport.
func ContextWithToken(ctx context.Context, tok fence.Token) context.Context {
	return context.WithValue(ctx, tokenKey{}, tok)
}

type transport struct {
	base http.RoundTripper
	tok  *fence.Token // nil: from the request's context
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	tok := t.tok
	if tok == nil {
		if v, ok := req.Context().Value(tokenKey{}).(fence.Token); ok {
			tok = &v
		}
	}
	base := t.base
	if base == nil {
		base = http.DefaultTransport
	}
	if tok == nil {
		return base.RoundTrip(req)
	}
	if err := tok.Validate(); err != nil {
		if req.Body != nil {
			req.Body.Close() // a RoundTripper closes the body, even on error
		}
		return nil, fmt.Errorf("httpfence: %s %s: %w", req.Method, req.URL.Redacted(), err)
	}
	// A RoundTripper must not change the caller's request.
	req = req.Clone(req.Context())
	req.Header.Set(Header, FormatHeader(*tok))
	return base.RoundTrip(req)
}

// Stale returns the *fence.StaleError a 409 answer of the middleware
// stands for (Lapsed set for a token whose lease ended) (tok is the token the request carried, resource the
// resource's name if the caller knows it), or nil for any other answer.
func Stale(resp *http.Response, resource string, tok fence.Token) *fence.StaleError {
	if resp.StatusCode != http.StatusConflict {
		return nil
	}
	if resp.Header.Get(LapsedHeader) == "true" {
		return &fence.StaleError{Resource: resource, Token: tok, Lapsed: true}
	}
	cur, err := strconv.ParseUint(resp.Header.Get(CurrentHeader), 10, 64)
	if err != nil {
		return nil
	}
	return &fence.StaleError{Resource: resource, Token: tok, Current: cur}
}
