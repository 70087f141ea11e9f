package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// RESTTarget drives a kahuna node (or Kahuna itself) through its REST API,
// /v1/locks/*, with JSON bodies as Kahuna's server speaks them.
func RESTTarget() Target {
	return Target{
		Name:           "rest",
		Aliases:        []string{"kahuna-rest"},
		About:          "a kahuna node over REST (/v1/locks/*) at --endpoints",
		NeedsEndpoints: true,
		Open: func(_ context.Context, s Settings) (System, error) {
			l, err := NewRESTLocker(s.Endpoints, s.Concurrency, s.Insecure)
			if err != nil {
				return nil, err
			}
			return Shared{L: l, CloseFn: l.Close}, nil
		},
	}
}

// RESTLocker is a lease.Locker over Kahuna's REST API. Requests go round
// robin over the endpoints on kept-alive HTTP/1.1 connections.
type RESTLocker struct {
	client    *http.Client
	endpoints []string
	next      atomic.Uint64
}

var _ lease.Locker = (*RESTLocker)(nil)

// NewRESTLocker returns a client of endpoints ("http://host:port" or
// "https://…"). conns is how many connections per host to keep alive (the
// run's concurrency, so no call waits for a connection to be dialled).
// insecure skips TLS certificate checks.
func NewRESTLocker(endpoints []string, conns int, insecure bool) (*RESTLocker, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("no endpoints")
	}
	eps := make([]string, len(endpoints))
	for i, e := range endpoints {
		if !strings.HasPrefix(e, "http://") && !strings.HasPrefix(e, "https://") {
			return nil, fmt.Errorf("endpoint %q: want http://host:port or https://host:port", e)
		}
		eps[i] = strings.TrimRight(e, "/")
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 0
	tr.MaxIdleConnsPerHost = max(conns, 2)
	tr.DisableCompression = true
	if insecure {
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // asked for with --insecure
	}
	return &RESTLocker{client: &http.Client{Transport: tr}, endpoints: eps}, nil
}

// Close drops the idle connections.
func (r *RESTLocker) Close() error {
	r.client.CloseIdleConnections()
	return nil
}

// restLockRequest is Kahuna's KahunaLockRequest: owner travels as base64
// (encoding/json's []byte), durability and statuses as numbers.
type restLockRequest struct {
	Resource   string `json:"resource"`
	Owner      []byte `json:"owner"`
	ExpiresMs  int64  `json:"expiresMs"`
	Durability int32  `json:"durability"`
}

type restLockResponse struct {
	ServedFrom   string `json:"servedFrom"`
	Type         int32  `json:"type"`
	FencingToken int64  `json:"fencingToken"`
}

type restGetRequest struct {
	Resource   string `json:"resource"`
	Durability int32  `json:"durability"`
}

// restGetResponse is KahunaGetLockResponse. expires is a hybrid logical
// clock timestamp: l is its physical part in unix milliseconds.
type restGetResponse struct {
	ServedFrom string `json:"servedFrom"`
	Type       int32  `json:"type"`
	Owner      []byte `json:"owner"`
	Expires    struct {
		L int64 `json:"l"`
	} `json:"expires"`
	FencingToken int64 `json:"fencingToken"`
}

// TryLock implements lease.Locker.
func (r *RESTLocker) TryLock(ctx context.Context, resource string, owner []byte, ttl time.Duration, d lease.Durability) (lease.Result, error) {
	return r.lockCall(ctx, "try-lock", restLockRequest{resource, owner, ttl.Milliseconds(), int32(d)})
}

// Extend implements lease.Locker.
func (r *RESTLocker) Extend(ctx context.Context, resource string, owner []byte, ttl time.Duration, d lease.Durability) (lease.Result, error) {
	return r.lockCall(ctx, "try-extend", restLockRequest{resource, owner, ttl.Milliseconds(), int32(d)})
}

// Unlock implements lease.Locker.
func (r *RESTLocker) Unlock(ctx context.Context, resource string, owner []byte, d lease.Durability) (lease.Result, error) {
	return r.lockCall(ctx, "try-unlock", restLockRequest{Resource: resource, Owner: owner, Durability: int32(d)})
}

// Get implements lease.Locker.
func (r *RESTLocker) Get(ctx context.Context, resource string, d lease.Durability) (lease.LockInfo, lease.Result, error) {
	var resp restGetResponse
	if err := r.post(ctx, "get-info", restGetRequest{resource, int32(d)}, &resp); err != nil {
		return lease.LockInfo{}, lease.Result{}, err
	}
	res := lease.Result{Status: lease.Status(resp.Type), FencingToken: resp.FencingToken, ServedFrom: resp.ServedFrom}
	if res.Status != lease.Got {
		return lease.LockInfo{}, res, nil
	}
	return lease.LockInfo{Owner: resp.Owner, Expires: time.UnixMilli(resp.Expires.L), FencingToken: resp.FencingToken}, res, nil
}

func (r *RESTLocker) lockCall(ctx context.Context, path string, req restLockRequest) (lease.Result, error) {
	var resp restLockResponse
	if err := r.post(ctx, path, req, &resp); err != nil {
		return lease.Result{}, err
	}
	return lease.Result{Status: lease.Status(resp.Type), FencingToken: resp.FencingToken, ServedFrom: resp.ServedFrom}, nil
}

// post sends one JSON request and decodes the answer. Any HTTP status but
// 200 is a failure of the call: Kahuna answers lock outcomes, retryable
// conditions included, with 200 and a type.
func (r *RESTLocker) post(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("rest %s: encode: %w", path, err)
	}
	ep := r.endpoints[r.next.Add(1)%uint64(len(r.endpoints))]
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep+"/v1/locks/"+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("rest %s: %w", path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.client.Do(req)
	if err != nil {
		return fmt.Errorf("rest %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		return fmt.Errorf("rest %s: HTTP %d: %s", path, resp.StatusCode, bytes.TrimSpace(snippet))
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("rest %s: decode: %w", path, err)
	}
	// Drain so the connection goes back to the pool.
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}
