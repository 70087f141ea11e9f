package admin

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxAnswer bounds the answer read of one call: a full LocksView of
// lease.MaxListLimit locks with the longest names and owners fits.
const maxAnswer = 16 << 20

// Client calls the admin API of kahuna nodes. Every method takes the
// node's endpoint (its API URL, e.g. http://10.0.0.2:2070), so one
// Client serves a whole cluster. It is safe for concurrent use.
//
// A call that got no answer returns net/http's error (a *url.Error,
// which names the method and URL): the caller may try another node. A
// node's answer that is not a success is an *Error.
type Client struct {
	hc      *http.Client
	token   func() string // nil: no Authorization
	peer    bool
	timeout time.Duration
}

// ClientOption configures a Client.
type ClientOption func(*Client)

// NewClient returns a Client. Without options it uses
// http.DefaultClient, sends no token and bounds a call by its context
// only.
func NewClient(opts ...ClientOption) *Client {
	c := &Client{hc: http.DefaultClient}
	for _, o := range opts {
		o(c)
	}
	return c
}

// WithHTTPClient makes the client send its requests through hc (its
// transport's TLS settings, its timeout). The last of WithHTTPClient and
// WithTLSConfig wins.
func WithHTTPClient(hc *http.Client) ClientOption {
	return func(c *Client) { c.hc = hc }
}

// WithTLSConfig verifies https:// endpoints with tc (e.g. a private CA in
// RootCAs), over HTTP/1.1 as the node's REST side serves it. The last of
// WithHTTPClient and WithTLSConfig wins.
func WithTLSConfig(tc *tls.Config) ClientOption {
	return func(c *Client) {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = tc.Clone()
		tr.ForceAttemptHTTP2 = false
		c.hc = &http.Client{Transport: tr}
	}
}

// WithToken sends "Authorization: Bearer token" on every call, for nodes
// that ask for a token ("": none).
func WithToken(token string) ClientOption {
	return func(c *Client) { c.token = func() string { return token } }
}

// WithPeerSecret makes every call a request between members: marked as
// such, so the receiver serves it itself and never passes it on again,
// and carrying the cluster secret secret() as its bearer token (read on
// every call, so a reload is picked up; nil or "": no token). A member's
// admin API takes the secret as well as a client token. It replaces
// WithToken.
func WithPeerSecret(secret func() string) ClientOption {
	return func(c *Client) { c.peer, c.token = true, secret }
}

// WithTimeout bounds every call by d (0: by its context only).
func WithTimeout(d time.Duration) ClientOption {
	return func(c *Client) { c.timeout = d }
}

// Error is a node's answer that is not a success: an HTTP status other
// than 2xx (Code, Status, and the server's own Message), or a 2xx whose
// body is not the expected message (Err).
type Error struct {
	Endpoint string // as given to the call, without a trailing slash
	Method   string
	Path     string // the admin path, e.g. MembersPath
	Code     int    // HTTP status code
	Status   string // HTTP status line, e.g. "401 Unauthorized"
	// Message is the server's "error" (else "reason") field, else its
	// whole answer, trimmed.
	Message string
	Body    string // the answer, trimmed
	Err     error  // a 2xx that did not decode
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s %s%s: bad answer: %v", e.Method, e.Endpoint, e.Path, e.Err)
	}
	if e.Message == "" {
		return fmt.Sprintf("%s %s%s: %s", e.Method, e.Endpoint, e.Path, e.Status)
	}
	return fmt.Sprintf("%s %s%s: %s: %s", e.Method, e.Endpoint, e.Path, e.Status, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// Do sends one admin request: method on endpoint+path, with body (JSON;
// nil: none) and then header's fields, which replace the client's own
// (e.g. a caller's Authorization passed on). The answer's body is read
// (up to 16 MiB) before Do returns, so the response outlives ctx; its
// status is the caller's to judge.
func (c *Client) Do(ctx context.Context, endpoint, method, path string, body []byte, header http.Header) (*http.Response, error) {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(endpoint, "/")+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.peer {
		req.Header.Set(forwardedHeader, "1")
	}
	if c.token != nil {
		if tok := c.token(); tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
	}
	for k, vs := range header {
		req.Header[http.CanonicalHeaderKey(k)] = vs
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("%s %s: read the answer: %w", method, req.URL, err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(data))
	return resp, nil
}

// call sends in (nil: no body) and decodes a 2xx answer into out (nil:
// ignored). A failure answer is an *Error; with failureInto, its body is
// decoded into out as well when it can be (a membership change answers
// its result whatever the status).
func (c *Client) call(ctx context.Context, endpoint, method, path string, in, out any, failureInto bool) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return err
		}
	}
	resp, err := c.Do(ctx, endpoint, method, path, body, nil)
	if err != nil {
		return err
	}
	data, _ := io.ReadAll(resp.Body)
	e := &Error{Endpoint: strings.TrimSuffix(endpoint, "/"), Method: method, Path: path, Code: resp.StatusCode, Status: resp.Status, Body: strings.TrimSpace(string(data))}
	if resp.StatusCode/100 != 2 {
		e.Message = serverMessage(data)
		if failureInto && out != nil {
			_ = json.Unmarshal(data, out)
		}
		return e
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			e.Err = err
			return e
		}
	}
	return nil
}

// serverMessage is what a failure answer says: its "error" field, else
// its "reason" (the lock API's refusals), else the whole answer.
func serverMessage(data []byte) string {
	var m struct {
		Error  string `json:"error"`
		Reason string `json:"reason"`
	}
	if json.Unmarshal(data, &m) == nil {
		if m.Error != "" {
			return m.Error
		}
		if m.Reason != "" {
			return m.Reason
		}
	}
	return strings.TrimSpace(string(data))
}

// Partitions asks the node at endpoint who leads each partition.
func (c *Client) Partitions(ctx context.Context, endpoint string) (PartitionsView, error) {
	var v PartitionsView
	err := c.call(ctx, endpoint, http.MethodGet, PartitionsPath, nil, &v, false)
	return v, err
}

// Status asks the node at endpoint for its view of every partition.
func (c *Client) Status(ctx context.Context, endpoint string) (NodeStatus, error) {
	var st NodeStatus
	err := c.call(ctx, endpoint, http.MethodGet, StatusPath, nil, &st, false)
	return st, err
}

// Members asks the node at endpoint for the members it knows.
func (c *Client) Members(ctx context.Context, endpoint string) (MembersView, error) {
	var v MembersView
	err := c.call(ctx, endpoint, http.MethodGet, MembersPath, nil, &v, false)
	return v, err
}

// AddMember posts req to MembersPath of the node at endpoint: adding
// member req.ID, or, between members (req.Op set, WithPeerSecret), one of
// their requests. The result comes with a failure too (an *Error: 503,
// some partitions left; 409, refused for good) when the node answered
// one.
func (c *Client) AddMember(ctx context.Context, endpoint string, req MemberRequest) (MemberChangeResult, error) {
	var res MemberChangeResult
	err := c.call(ctx, endpoint, http.MethodPost, MembersPath, req, &res, true)
	return res, err
}

// RemoveMember asks the node at endpoint to remove member id; the result
// comes as AddMember's does.
func (c *Client) RemoveMember(ctx context.Context, endpoint string, id uint64) (MemberChangeResult, error) {
	var res MemberChangeResult
	err := c.call(ctx, endpoint, http.MethodDelete, MembersPath+"/"+strconv.FormatUint(id, 10), nil, &res, true)
	return res, err
}

// Transfer asks the node at endpoint to move a partition's leadership;
// any member passes it on to the partition's leader.
func (c *Client) Transfer(ctx context.Context, endpoint string, req TransferRequest) error {
	return c.call(ctx, endpoint, http.MethodPost, TransferPath, req, nil, false)
}

// ListLocks asks the node at endpoint for its share of a listing: the
// live locks of req.Partitions it serves (LocksPath).
func (c *Client) ListLocks(ctx context.Context, endpoint string, req LocksRequest) (LocksView, error) {
	var v LocksView
	err := c.call(ctx, endpoint, http.MethodGet, LocksPath+"?"+req.Query().Encode(), nil, &v, false)
	return v, err
}
