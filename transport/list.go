package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	pauses "github.com/kahunago/kahuna/internal/backoff"
	"github.com/kahunago/kahuna/lease"
)

// ListPath is the REST route of listings: GET ListPath?prefix=P&limit=N&after=NAME
// answers a page of the live locks whose name starts with P, in name
// order, after NAME (listReply). It is kahuna's, not Kahuna's, and only
// over REST: the gRPC services have no listing.
const ListPath = "/v1/locks"

// maxListReply bounds a listing's answer read by the client: a full page
// of the longest names and owners fits.
const maxListReply = 16 << 20

// Lister is a Locker whose live locks can be listed (the embedded node,
// which gathers a listing from every partition's leader). The server
// serves GET ListPath when its Locker is one.
type Lister interface {
	// List returns a page of the live locks req asks for. A refusal is a
	// *lease.ListError: InvalidInput (nothing read) or MustRetry.
	List(ctx context.Context, req lease.ListRequest) (lease.LockPage, error)
}

// listedLock is one lock of a listReply: camelCase, owner as base64,
// durability as a number, as the lock routes have them.
type listedLock struct {
	Resource     string `json:"resource"`
	Owner        []byte `json:"owner"`
	FencingToken int64  `json:"fencingToken"`
	ExpiresMs    int64  `json:"expiresMs"` // wall-clock unix ms
	Durability   int32  `json:"durability"`
	// Holders, for a semaphore or a read/write lock, are its live holders.
	Holders []listedHolder `json:"holders,omitempty"`
}

// listedHolder is one holder of a listedLock.
type listedHolder struct {
	Slot         int    `json:"slot"`
	Owner        []byte `json:"owner"`
	FencingToken int64  `json:"fencingToken"`
	ExpiresMs    int64  `json:"expiresMs"`
}

// holdersJSON is hs as JSON carries them (nil for none).
func holdersJSON(hs []lease.Holder) []listedHolder {
	var out []listedHolder
	for _, h := range hs {
		out = append(out, listedHolder{Slot: h.Slot, Owner: h.Owner, FencingToken: h.FencingToken, ExpiresMs: h.Expires.UnixMilli()})
	}
	return out
}

// holdersOf is holders read from JSON (nil for none).
func holdersOf(js []listedHolder) []lease.Holder {
	var out []lease.Holder
	for _, h := range js {
		out = append(out, lease.Holder{Slot: h.Slot, Owner: h.Owner, FencingToken: h.FencingToken, Expires: time.UnixMilli(h.ExpiresMs)})
	}
	return out
}

// listReply answers GET ListPath: a page, and the after of the next one
// ("" or absent: the listing is complete).
type listReply struct {
	Locks []listedLock `json:"locks"`
	Next  string       `json:"next,omitempty"`
}

// listRefusal answers a list refused: 400 with type InvalidInput, 503
// with MustRetry, and why.
type listRefusal struct {
	Type   lease.Status `json:"type"`
	Error  string       `json:"error"`
	Reason string       `json:"reason"`
}

// listHandler serves GET ListPath on l.
func listHandler(l Lister) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed, use GET", r.Method))
			return
		}
		req, why := listQuery(r.URL.Query())
		var page lease.LockPage
		err := error(&lease.ListError{Status: lease.InvalidInput, Reason: why})
		if why == "" {
			page, err = l.List(r.Context(), req)
		}
		var le *lease.ListError
		switch {
		case err == nil:
		case errors.As(err, &le) && le.Status == lease.InvalidInput:
			writeReply(w, http.StatusBadRequest, mustMarshal(listRefusal{Type: le.Status, Error: le.Error(), Reason: le.Reason}))
			return
		case errors.As(err, &le):
			writeReply(w, http.StatusServiceUnavailable, mustMarshal(listRefusal{Type: le.Status, Error: le.Error(), Reason: le.Reason}))
			return
		default:
			writeReply(w, http.StatusServiceUnavailable, mustMarshal(listRefusal{Type: lease.MustRetry, Error: err.Error(), Reason: err.Error()}))
			return
		}
		reply := listReply{Locks: make([]listedLock, len(page.Locks)), Next: page.Next}
		for i, l := range page.Locks {
			reply.Locks[i] = listedLock{Resource: l.Resource, Owner: l.Owner, FencingToken: l.FencingToken,
				ExpiresMs: l.Expires.UnixMilli(), Durability: int32(l.Durability)}
			reply.Locks[i].Holders = holdersJSON(l.Holders)
		}
		writeReply(w, http.StatusOK, mustMarshal(reply))
	})
}

// listQuery reads a ListRequest from GET ListPath's query, or says why
// it cannot; the request is checked too (lease.ListRequest.Check).
func listQuery(q url.Values) (lease.ListRequest, string) {
	for k, vs := range q {
		switch {
		case k != "prefix" && k != "after" && k != "limit":
			return lease.ListRequest{}, fmt.Sprintf("unknown parameter %q (prefix, after and limit are)", lease.Excerpt(k))
		case len(vs) > 1:
			return lease.ListRequest{}, fmt.Sprintf("parameter %q given %d times", k, len(vs))
		}
	}
	req := lease.ListRequest{Prefix: q.Get("prefix"), After: q.Get("after")}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			return req, fmt.Sprintf("limit %q is not a number", lease.Excerpt(s))
		}
		req.Limit = n
	}
	return req, req.Check()
}

// List implements Lister over GET ListPath: a page of the live locks req
// asks for, from the first endpoint that answers, from the round robin's
// next on. A MustRetry (a partition between leaders) is asked again with
// backoff within the client's MustRetry budget; an endpoint that cannot
// be reached, at once at the next one. A refusal is a *lease.ListError.
func (r *RESTClient) List(ctx context.Context, req lease.ListRequest) (lease.LockPage, error) {
	if why := req.Check(); why != "" {
		return lease.LockPage{}, &lease.ListError{Status: lease.InvalidInput, Reason: why}
	}
	q := url.Values{}
	if req.Prefix != "" {
		q.Set("prefix", req.Prefix)
	}
	if req.After != "" {
		q.Set("after", req.After)
	}
	if req.Limit != 0 {
		q.Set("limit", strconv.Itoa(req.Limit))
	}
	deadline := time.Now().Add(r.budget)
	pause := time.Millisecond
	for {
		page, err := r.listOnce(ctx, q.Encode())
		var le *lease.ListError
		if !errors.As(err, &le) || le.Status != lease.MustRetry || !time.Now().Add(pause).Before(deadline) {
			return page, err
		}
		if err := pauses.Sleep(ctx, pauses.Jitter(pause)); err != nil {
			return lease.LockPage{}, err
		}
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// listOnce asks the endpoints in turn until one answers.
func (r *RESTClient) listOnce(ctx context.Context, query string) (lease.LockPage, error) {
	var errs []error
	start := r.next.Add(1)
	for k := range uint64(len(r.endpoints)) {
		if r.closed.Load() {
			return lease.LockPage{}, ErrClosed
		}
		ep := r.endpoints[(start+k)%uint64(len(r.endpoints))]
		page, answered, err := r.listAt(ctx, ep, query)
		if answered || ctx.Err() != nil {
			return page, err
		}
		errs = append(errs, err)
	}
	return lease.LockPage{}, fmt.Errorf("transport: rest list: no endpoint answered: %w", errors.Join(errs...))
}

// listAt asks one endpoint; answered is false when it could not be
// reached (the next may be).
func (r *RESTClient) listAt(ctx context.Context, ep, query string) (page lease.LockPage, answered bool, err error) {
	hr, err := http.NewRequestWithContext(ctx, http.MethodGet, ep+ListPath+"?"+query, nil)
	if err != nil {
		return lease.LockPage{}, true, err
	}
	if r.token != nil {
		if tok := r.token(); tok != "" {
			hr.Header.Set("Authorization", "Bearer "+tok)
		}
	}
	resp, err := r.client.Do(hr)
	if err != nil {
		if ctx.Err() != nil {
			return lease.LockPage{}, true, ctx.Err()
		}
		return lease.LockPage{}, false, fmt.Errorf("transport: rest list at %s: %w", ep, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxListReply+1))
	if err == nil && len(body) > maxListReply {
		err = fmt.Errorf("answer over %d bytes", maxListReply)
	}
	if err != nil {
		return lease.LockPage{}, true, fmt.Errorf("transport: rest list at %s: %w", ep, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusUnauthorized:
		return lease.LockPage{}, true, fmt.Errorf("%w: rest list: %s", lease.ErrUnauthenticated, snippet(body))
	case http.StatusBadRequest, http.StatusServiceUnavailable:
		var ref listRefusal
		if decodeAnswer(body, &ref) == nil && (ref.Type == lease.InvalidInput || ref.Type == lease.MustRetry) {
			return lease.LockPage{}, true, &lease.ListError{Status: ref.Type, Reason: ref.Reason}
		}
		fallthrough
	default:
		// A node without listings (Kahuna, an older kahuna) answers 404 or 405.
		return lease.LockPage{}, true, fmt.Errorf("transport: rest list at %s: HTTP %d: %s", ep, resp.StatusCode, snippet(body))
	}
	var reply listReply
	if err := decodeAnswer(body, &reply); err != nil {
		return lease.LockPage{}, true, fmt.Errorf("transport: rest list at %s: decode: %w", ep, err)
	}
	page.Next = reply.Next
	page.Locks = make([]lease.ListedLock, len(reply.Locks))
	for i, l := range reply.Locks {
		page.Locks[i] = lease.ListedLock{Resource: l.Resource, Owner: l.Owner, FencingToken: l.FencingToken,
			Expires: time.UnixMilli(l.ExpiresMs), Durability: lease.Durability(l.Durability), Holders: holdersOf(l.Holders)}
	}
	if !sortedAfter(page.Locks) {
		return lease.LockPage{}, true, fmt.Errorf("transport: rest list at %s: the page is not in name order", ep)
	}
	return page, true, nil
}

// sortedAfter reports whether locks are in strictly rising name order.
func sortedAfter(locks []lease.ListedLock) bool {
	for i := 1; i < len(locks); i++ {
		if strings.Compare(locks[i-1].Resource, locks[i].Resource) >= 0 {
			return false
		}
	}
	return true
}
