// Package httpfence fences writes to an HTTP service: middleware that
// checks the token a request carries in the Kahuna-Fence header against a
// fence.Store before the handler runs, and a client side that adds the
// header.
//
// The middleware answers, with a small JSON body, and nothing written:
//
//   - 428 Precondition Required: no Kahuna-Fence header;
//   - 400 Bad Request: a header that does not parse, given twice, with a
//     negative token or a name over fence.MaxNameLen;
//   - 409 Conflict: a stale token; the current mark is in the
//     Kahuna-Fence-Current header and the body's "current" field (with a
//     fence.Checked store, also a token whose lease ended: without them,
//     with Kahuna-Fence-Lapsed: true);
//   - 500 Internal Server Error: the store failed, before the handler or
//     at the commit after it (the handler's answer is then dropped); the
//     body does not say how, see WithErrorLog.
//
// Otherwise the handler runs inside Store.Fence, so its write and the
// raise of the mark are one step as far as the store makes them one: with
// fence.MemoryStore the key stays locked until the handler returns, so no
// request with a lower token is checked between the check and the
// handler's write, as long as every write to that state goes through the
// middleware in this process; with sqlfence the handler's statements on
// sqlfence.TxFrom(r.Context()) commit with the mark. The handler's answer
// is buffered and sent after Fence returns: a 4xx or 5xx answer (or a
// panic) counts as a failed write, so the mark is not raised (and the SQL
// transaction rolls back), and a client never sees a 2xx for a write whose
// commit then failed. Handlers behind it therefore cannot stream or flush.
// The key stays held while the handler reads the request body, so a slow
// client delays the other writers of its key: give the server a
// ReadTimeout.
package httpfence

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/kahunago/kahuna/fence"
)

// Option configures Handler.
type Option func(*options)

type options struct {
	resource func(*http.Request) string
	errorLog func(r *http.Request, err error)
}

// WithResource names the resource a request writes, for requests that
// write different resources under one lock. By default every request is
// resource "": one mark per lock and slot for the whole service behind
// the middleware, the safe choice when a lock guards more than one path.
func WithResource(f func(*http.Request) string) Option {
	return func(o *options) { o.resource = f }
}

// WithErrorLog is called with the store's error on a 500 answer.
func WithErrorLog(f func(r *http.Request, err error)) Option {
	return func(o *options) { o.errorLog = f }
}

// Handler fences next with store.
func Handler(store fence.Store, next http.Handler, opts ...Option) http.Handler {
	o := options{
		resource: func(*http.Request) string { return "" },
		errorLog: func(*http.Request, error) {},
	}
	for _, opt := range opts {
		opt(&o)
	}
	return &handler{store: store, next: next, o: o}
}

type handler struct {
	store fence.Store
	next  http.Handler
	o     options
}

// failedWrite is what a handler's 4xx or 5xx answer becomes inside Fence.
type failedWrite struct{ status int }

func (e failedWrite) Error() string { return fmt.Sprintf("handler answered %d", e.status) }

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	vals := r.Header.Values(Header)
	switch len(vals) {
	case 0:
		answer(w, http.StatusPreconditionRequired, body{Error: "missing " + Header + " header"})
		return
	case 1:
	default:
		answer(w, http.StatusBadRequest, body{Error: "bad " + Header + " header", Reason: "given more than once"})
		return
	}
	tok, err := ParseHeader(vals[0])
	if err != nil {
		answer(w, http.StatusBadRequest, body{Error: "bad " + Header + " header", Reason: reason(err)})
		return
	}
	rec := &recorder{header: make(http.Header)}
	err = h.store.Fence(r.Context(), h.o.resource(r), tok, func(ctx context.Context) error {
		rec.reset() // a store that retries write sends only the last answer
		h.next.ServeHTTP(rec, r.WithContext(ctx))
		if rec.status() >= 400 {
			return failedWrite{rec.status()}
		}
		return nil
	})
	var stale *fence.StaleError
	var failed failedWrite
	switch {
	case err == nil, errors.As(err, &failed):
		rec.sendTo(w)
	case errors.As(err, &stale) && stale.Lapsed:
		w.Header().Set(LapsedHeader, "true")
		answer(w, http.StatusConflict, body{Error: "fencing token's lease ended", Token: &tok.Value})
	case errors.As(err, &stale):
		w.Header().Set(CurrentHeader, fmt.Sprint(stale.Current))
		answer(w, http.StatusConflict, body{Error: "stale fencing token", Token: &tok.Value, Current: &stale.Current})
	default:
		h.o.errorLog(r, err)
		answer(w, http.StatusInternalServerError, body{Error: "fence store failed"})
	}
}

// reason is err's text without ErrBadHeader's prefix, which the body's
// "error" field already says.
func reason(err error) string {
	s := err.Error()
	if p := ErrBadHeader.Error() + ": "; len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

// body is the middleware's JSON answer.
type body struct {
	Error   string  `json:"error"`
	Reason  string  `json:"reason,omitempty"`
	Token   *uint64 `json:"token,omitempty"`
	Current *uint64 `json:"current,omitempty"`
}

func answer(w http.ResponseWriter, status int, b body) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(b) // the client is gone if this fails; nothing to do
}

// recorder buffers a handler's answer.
type recorder struct {
	header http.Header
	code   int
	buf    bytes.Buffer
}

func (r *recorder) reset() {
	clear(r.header)
	r.code = 0
	r.buf.Reset()
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.buf.Write(p)
}

func (r *recorder) status() int {
	if r.code == 0 {
		return http.StatusOK
	}
	return r.code
}

func (r *recorder) sendTo(w http.ResponseWriter) {
	for k, v := range r.header {
		w.Header()[k] = v
	}
	w.WriteHeader(r.status())
	w.Write(r.buf.Bytes()) // the client is gone if this fails; nothing to do
}
