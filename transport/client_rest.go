package transport

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	pauses "github.com/kahunago/kahuna/internal/backoff"
	"github.com/kahunago/kahuna/lease"
)

// RESTClient is a lease.Locker over Kahuna's REST API (/v1/locks/*): JSON
// bodies, owner as base64, statuses as numbers. Calls go round robin over
// the endpoints on kept-alive connections, and MustRetry answers are
// retried like the gRPC Client does; Errored answers and failed calls are
// returned, never retried.
//
// Calls to an http:// endpoint (without a proxy from the environment) are
// written and read on the caller's goroutine over kept-alive HTTP/1.1
// connections (client_h1.go); https:// and proxied endpoints go through
// net/http. A call made after Close, or one whose connection could not be
// opened on that direct path, is known not to have been sent (its error
// wraps lease.ErrNotApplied); every other error leaves the outcome
// unknown. (net/http may send a request again on a new connection after
// the first attempt, so there even a dial error does not prove that no
// attempt reached the server.)
//
// A request that Request.Check rejects is answered InvalidInput, with its
// Result.Reason, without a round trip; an InvalidInput from the server
// carries the server's "reason" field (kahuna's; Kahuna sends none).
type RESTClient struct {
	client    *http.Client
	endpoints []string
	direct    []*h1Pool // per endpoint: its calls without net/http (client_h1.go), or nil
	next      atomic.Uint64
	budget    time.Duration
	token     func() string // nil: no Authorization header
	closed    atomic.Bool
}

var (
	_ lease.Locker = (*RESTClient)(nil)
	_ lease.Doer   = (*RESTClient)(nil)
)

// DialREST returns a REST client of endpoints ("http://host:port" or
// "https://host:port"). It does not connect until the first call. Of the
// options, WithTLSConfig, WithInsecureSkipVerify, WithMustRetryBudget and
// WithToken apply.
func DialREST(endpoints []string, opts ...ClientOption) (*RESTClient, error) {
	cfg := clientConfig{mustRetryBudget: DefaultMustRetryBudget}
	for _, o := range opts {
		o(&cfg)
	}
	if len(endpoints) == 0 {
		return nil, errors.New("transport: no endpoints")
	}
	eps := make([]string, len(endpoints))
	direct := make([]*h1Pool, len(endpoints))
	for i, e := range endpoints {
		u, err := url.Parse(e)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return nil, fmt.Errorf("transport: endpoint %q: want http://host:port or https://host:port", e)
		}
		eps[i] = u.Scheme + "://" + u.Host
		if u.Scheme == "http" && !cfg.restViaNetHTTP && !proxied(u) {
			direct[i] = &h1Pool{addr: hostPort(u)}
		}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	tr.DisableCompression = true
	tr.TLSClientConfig = cfg.tls
	if cfg.insecureSkipVerify {
		if tr.TLSClientConfig == nil {
			tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		tr.TLSClientConfig.InsecureSkipVerify = true //nolint:gosec // asked for explicitly
	}
	return &RESTClient{client: &http.Client{Transport: tr}, endpoints: eps, direct: direct, budget: cfg.mustRetryBudget, token: cfg.token}, nil
}

// proxied reports whether the environment (HTTP_PROXY, NO_PROXY) sends
// requests to u through a proxy, which net/http then speaks to.
func proxied(u *url.URL) bool {
	p, err := http.ProxyFromEnvironment(&http.Request{URL: u})
	return err != nil || p != nil
}

// hostPort is u's host with the scheme's port when it names none.
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// Close drops the idle connections; later calls fail with ErrClosed.
func (r *RESTClient) Close() error {
	r.closed.Store(true)
	r.client.CloseIdleConnections()
	for _, p := range r.direct {
		if p != nil {
			p.close()
		}
	}
	return nil
}

// restLock is Kahuna's KahunaLockRequest.
type restLock struct {
	Resource   string `json:"resource"`
	Owner      []byte `json:"owner"`
	ExpiresMs  int64  `json:"expiresMs"`
	Durability int32  `json:"durability"`
}

// restWholeLock is a try-lock with kahuna's fields: a semaphore's
// permits and limit, or a read lock's shared; or a proclaim's try-extend.
type restWholeLock struct {
	restLock
	Permits int32 `json:"permits,omitempty"`
	Limit   int32 `json:"limit,omitempty"`
	Shared  bool  `json:"shared,omitempty"`
	Resize  bool  `json:"resize,omitempty"`
	// NewOwner makes a try-extend a proclaim (lease.Request.NewOwner).
	NewOwner []byte `json:"newOwner,omitempty"`
	// Also names more resources to lock at once (lease.Request.Also).
	Also []string `json:"also,omitempty"`
}

type restLockAnswer struct {
	ServedFrom   string       `json:"servedFrom"`
	Type         int32        `json:"type"`
	FencingToken int64        `json:"fencingToken"`
	Reason       string       `json:"reason"`      // ours, for InvalidInput; Kahuna sends none
	Grants       []grantReply `json:"grants"`      // ours, a semaphore's permits
	PermitsFree  int          `json:"permitsFree"` // ours, with grants: the permits left free
	Each         []int32      `json:"each"`        // ours, a batch's answer for each name
}

type restGet struct {
	Resource   string `json:"resource"`
	Durability int32  `json:"durability"`
}

// restGetAnswer is KahunaGetLockResponse; expires.l is unix milliseconds.
type restGetAnswer struct {
	ServedFrom string `json:"servedFrom"`
	Type       int32  `json:"type"`
	Owner      []byte `json:"owner"`
	Expires    struct {
		L int64 `json:"l"`
	} `json:"expires"`
	FencingToken int64          `json:"fencingToken"`
	Reason       string         `json:"reason"`
	Holders      []listedHolder `json:"holders"`
}

// invalidLocally answers a request Request.Check rejects without a round
// trip (a ttl over the limit would not even fit expiresMs), with its
// reason.
func invalidLocally(op lease.Op, resource string, owner []byte, ttl time.Duration, d lease.Durability) (lease.Result, bool) {
	_, reason := lease.Request{Op: op, Resource: resource, Owner: owner, TTL: ttl, Durability: d}.Check()
	return lease.Result{Status: lease.InvalidInput, Reason: reason}, reason != ""
}

func (r *RESTClient) TryLock(ctx context.Context, resource string, owner []byte, ttl time.Duration, d lease.Durability) (lease.Result, error) {
	if res, bad := invalidLocally(lease.TryLock, resource, owner, ttl, d); bad {
		return res, nil
	}
	return r.lockCall(ctx, "try-lock", restLock{resource, owner, ttl.Milliseconds(), int32(d)})
}

func (r *RESTClient) Extend(ctx context.Context, resource string, owner []byte, ttl time.Duration, d lease.Durability) (lease.Result, error) {
	if res, bad := invalidLocally(lease.Extend, resource, owner, ttl, d); bad {
		return res, nil
	}
	return r.lockCall(ctx, "try-extend", restLock{resource, owner, ttl.Milliseconds(), int32(d)})
}

func (r *RESTClient) Unlock(ctx context.Context, resource string, owner []byte, d lease.Durability) (lease.Result, error) {
	if res, bad := invalidLocally(lease.Unlock, resource, owner, 0, d); bad {
		return res, nil
	}
	return r.lockCall(ctx, "try-unlock", restLock{Resource: resource, Owner: owner, Durability: int32(d)})
}

func (r *RESTClient) Get(ctx context.Context, resource string, d lease.Durability) (lease.LockInfo, lease.Result, error) {
	if res, bad := invalidLocally(lease.Get, resource, nil, 0, d); bad {
		return lease.LockInfo{}, res, nil
	}
	var a restGetAnswer
	res, err := r.retry(ctx, func() (lease.Result, error) {
		a = restGetAnswer{}
		if err := r.post(ctx, "get-info", restGet{resource, int32(d)}, &a); err != nil {
			return lease.Result{}, err
		}
		return lease.Result{Status: lease.Status(a.Type), FencingToken: a.FencingToken, ServedFrom: a.ServedFrom, Reason: a.Reason}, nil
	})
	if err != nil || res.Status != lease.Got {
		return lease.LockInfo{}, res, err
	}
	return lease.LockInfo{Owner: a.Owner, Expires: time.UnixMilli(a.Expires.L), FencingToken: a.FencingToken, Holders: holdersOf(a.Holders)}, res, nil
}

// Do implements lease.Doer, so that a request goes whole: a semaphore's
// permits and limit, a read lock's Shared. REST has no wait on the server,
// so a TryLock's Wait is not sent: it is answered at once (Busy where it
// would wait, others queued before it included), and a caller that waits
// asks again (kahuna.Acquire polls).
func (r *RESTClient) Do(ctx context.Context, req lease.Checked) (lease.LockInfo, lease.Result, error) {
	q := req.Request()
	switch q.Op {
	case lease.TryLock:
		if q.Permits == 0 && q.Limit == 0 && !q.Shared && !q.Resize && q.Also == nil {
			res, err := r.TryLock(ctx, q.Resource, q.Owner, q.TTL, q.Durability)
			return lease.LockInfo{}, res, err
		}
		body := restWholeLock{restLock: restLock{q.Resource, q.Owner, q.TTL.Milliseconds(), int32(q.Durability)},
			Permits: int32(q.Permits), Limit: int32(q.Limit), Shared: q.Shared, Resize: q.Resize, Also: q.Also} // checked: at most lease.MaxPermits
		res, err := r.lockCall(ctx, "try-lock", body)
		return lease.LockInfo{}, res, err
	case lease.Extend, lease.Unlock:
		if q.IsBatch() {
			path := "try-extend"
			if q.Op == lease.Unlock {
				path = "try-unlock"
			}
			body := restWholeLock{restLock: restLock{q.Resource, q.Owner, q.TTL.Milliseconds(), int32(q.Durability)}, Also: q.Also}
			// Sent once: its names are retried by its caller, each as its
			// answer says (a second unlock of a name the first released
			// would answer LockDoesNotExist).
			res, err := r.lockOnce(ctx, path, body)
			return lease.LockInfo{}, res, err
		}
		if q.Op == lease.Unlock {
			res, err := r.Unlock(ctx, q.Resource, q.Owner, q.Durability)
			return lease.LockInfo{}, res, err
		}
		if q.NewOwner != nil {
			body := restWholeLock{restLock: restLock{q.Resource, q.Owner, q.TTL.Milliseconds(), int32(q.Durability)}, NewOwner: q.NewOwner}
			res, err := r.lockCall(ctx, "try-extend", body)
			return lease.LockInfo{}, res, err
		}
		res, err := r.Extend(ctx, q.Resource, q.Owner, q.TTL, q.Durability)
		return lease.LockInfo{}, res, err
	}
	return r.Get(ctx, q.Resource, q.Durability)
}

func (r *RESTClient) lockCall(ctx context.Context, path string, body any) (lease.Result, error) {
	return r.retry(ctx, func() (lease.Result, error) { return r.lockOnce(ctx, path, body) })
}

// lockOnce sends one lock call and decodes its answer.
func (r *RESTClient) lockOnce(ctx context.Context, path string, body any) (lease.Result, error) {
	var a restLockAnswer
	if err := r.post(ctx, path, body, &a); err != nil {
		return lease.Result{}, err
	}
	res := lease.Result{Status: lease.Status(a.Type), FencingToken: a.FencingToken, ServedFrom: a.ServedFrom, Reason: a.Reason}
	for _, g := range a.Grants {
		res.Grants = append(res.Grants, lease.Grant{Slot: g.Slot, Token: g.FencingToken})
	}
	res.Free = a.PermitsFree
	for _, st := range a.Each {
		res.Each = append(res.Each, lease.Status(st))
	}
	return res, nil
}

// retry repeats call while it answers MustRetry, and only then, for the
// client's budget.
func (r *RESTClient) retry(ctx context.Context, call func() (lease.Result, error)) (lease.Result, error) {
	deadline := time.Now().Add(r.budget)
	var bo backoff
	for {
		res, err := call()
		if err != nil || res.Status != lease.MustRetry {
			return res, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return res, nil
		}
		if err := pauses.Sleep(ctx, min(bo.next(), left)); err != nil {
			return lease.Result{}, err
		}
	}
}

// post sends one JSON request and decodes the answer. Any HTTP status but
// 200 is a failure of the call: lock outcomes, retryable ones included,
// come with 200 and a type.
func (r *RESTClient) post(ctx context.Context, path string, in, out any) error {
	if r.closed.Load() {
		return errClosedUnsent
	}
	var (
		body []byte
		err  error
	)
	if l, ok := in.(restLock); ok {
		body = appendRestLock(nil, l) // json_fast.go
	} else if body, err = json.Marshal(in); err != nil {
		return fmt.Errorf("transport: rest %s: encode: %w", path, err)
	}
	i := r.next.Add(1) % uint64(len(r.endpoints))
	ep := r.endpoints[i]
	var token string
	if r.token != nil {
		token = r.token()
	}
	var (
		code  int
		reply []byte
	)
	if p := r.direct[i]; p != nil {
		code, reply, err = p.post(ctx, path, token, body)
	} else {
		code, reply, err = r.postNetHTTP(ctx, ep+"/v1/locks/"+path, token, body)
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("transport: rest %s: %w", path, err)
	}
	if code == http.StatusUnauthorized {
		return fmt.Errorf("%w: rest %s: %s", lease.ErrUnauthenticated, path, snippet(reply))
	}
	if code != http.StatusOK {
		return fmt.Errorf("transport: rest %s: HTTP %d: %s", path, code, snippet(reply))
	}
	if err := decodeAnswer(reply, out); err != nil {
		return fmt.Errorf("transport: rest %s: decode: %w", path, err)
	}
	if a, ok := out.(servedHere); ok {
		a.servedHere(ep)
	}
	return nil
}

// decodeAnswer reads a JSON answer into out: a lock answer in the usual
// shape without reflection (json_fast.go), anything else with
// encoding/json.
func decodeAnswer(reply []byte, out any) error {
	if a, ok := out.(*restLockAnswer); ok {
		if fast, ok := decodeLockAnswer(reply); ok {
			*a = fast
			return nil
		}
	}
	return json.Unmarshal(reply, out)
}

// postNetHTTP is post's call through net/http (https, a proxy).
func (r *RESTClient) postNetHTTP(ctx context.Context, url, token string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	reply, err := readReply(resp.Body)
	return resp.StatusCode, reply, err
}

// snippet is the start of an error answer, for the error's text.
func snippet(reply []byte) string {
	return strings.TrimSpace(string(reply[:min(len(reply), 200)]))
}

// servedHere is an answer whose servedFrom "" (served by the node called,
// as Kahuna says it) becomes that node's URL, as the gRPC client does.
type servedHere interface{ servedHere(endpoint string) }

func (a *restLockAnswer) servedHere(ep string) {
	if a.ServedFrom == "" {
		a.ServedFrom = ep
	}
}

func (a *restGetAnswer) servedHere(ep string) {
	if a.ServedFrom == "" {
		a.ServedFrom = ep
	}
}
