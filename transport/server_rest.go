package transport

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// Kahuna's REST DTOs: camelCase names, enums as numbers, bytes as base64.
// Field names match case-insensitively, like ASP.NET's web defaults, and
// unknown fields are ignored because Kahuna's clients may send extras. The
// owner field was once called lockId; a request that still uses it binds
// no owner and is answered InvalidInput, as Kahuna does.

// lockBody is the request of try-lock, try-extend and try-unlock
// (try-unlock ignores expiresMs).
type lockBody struct {
	Resource   string `json:"resource"`
	Owner      []byte `json:"owner"`
	ExpiresMs  int32  `json:"expiresMs"`
	Durability int32  `json:"durability"`
	// Permits and Limit (a semaphore's try-lock) and Shared (a read lock's)
	// are kahuna's, not Kahuna's; lease.Request.Check says where they go.
	Permits int32 `json:"permits"`
	Limit   int32 `json:"limit"`
	Shared  bool  `json:"shared"`
	Resize  bool  `json:"resize"`
	// NewOwner, kahuna's too, makes a try-extend of an election a proclaim
	// (lease.Request.NewOwner).
	NewOwner []byte `json:"newOwner"`
	// Also, kahuna's too, names more resources for a try-lock to lock at
	// once, all or none; for a try-extend or try-unlock, more to extend or
	// release each on its own, a batch (lease.Request.Also).
	Also []string `json:"also"`
}

type lockReply struct {
	ServedFrom   string       `json:"servedFrom"`
	Type         lease.Status `json:"type"`
	FencingToken int64        `json:"fencingToken"`
	// Reason is kahuna's, not Kahuna's: for InvalidInput, why (and for a MustRetry refused for want of disk space, why)
	// (lease.Check). Kahuna's clients ignore a field they do not know.
	Reason string `json:"reason,omitempty"`
	// Grants, kahuna's too, are a semaphore's permits granted or extended,
	// and PermitsFree (with them) the permits left free.
	Grants      []grantReply `json:"grants,omitempty"`
	PermitsFree *int         `json:"permitsFree,omitempty"`
	// Each, kahuna's too, is a batch's answer for each name.
	Each []lease.Status `json:"each,omitempty"`
}

// grantReply is one permit of a semaphore: its slot and fencing token.
type grantReply struct {
	Slot         int   `json:"slot"`
	FencingToken int64 `json:"fencingToken"`
}

type getBody struct {
	Resource   string `json:"resource"`
	Durability int32  `json:"durability"`
}

// getReply answers get-info for a live lock.
type getReply struct {
	ServedFrom   string       `json:"servedFrom"`
	Type         lease.Status `json:"type"`
	Owner        []byte       `json:"owner"`
	Expires      hlcTime      `json:"expires"`
	FencingToken int64        `json:"fencingToken"`
	// Holders, ours and not Kahuna's, are a semaphore's or a read/write
	// lock's live holders (owner is then empty, expires the last one's).
	Holders []listedHolder `json:"holders,omitempty"`
}

// statusReply answers get-info when there is no live lock: Kahuna sets
// only the type then; we add the reason of an InvalidInput, and the node
// the call was forwarded to, so that a client knows which node answered
// (a client takes an answer without it as the called node's own).
type statusReply struct {
	ServedFrom string       `json:"servedFrom,omitempty"`
	Type       lease.Status `json:"type"`
	Reason     string       `json:"reason,omitempty"`
}

// hlcTime is Kahuna's HLC timestamp: node, physical unix ms, counter. We
// carry wall-clock ms in l and leave n and c 0.
type hlcTime struct {
	N int32  `json:"n"`
	L int64  `json:"l"`
	C uint32 `json:"c"`
}

// errorReply is the body of an HTTP error. A body that is not a JSON
// request object (400) also has a short reason, as InvalidInput does.
type errorReply struct {
	Error  string `json:"error"`
	Reason string `json:"reason,omitempty"`
}

// restHandler serves one lock route over net/http: it checks what the
// fast path's head parser checks (method, Content-Type, size), reads the
// body and answers through restAnswer, as the fast path does (http1.go).
func (s *Server) restHandler(route restRoute) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := s.readJSONBody(w, r)
		if !ok {
			return
		}
		code, reply := s.restAnswer(r.Context(), nil, route, body)
		writeReply(w, code, reply)
	})
}

// restAnswer serves body, the JSON request of route, and returns the HTTP
// status and the JSON reply, appended to dst: 200 with Kahuna's reply, or
// 400 for a body that is not a request object (nothing then reaches the
// Locker).
func (s *Server) restAnswer(ctx context.Context, dst []byte, route restRoute, body []byte) (int, []byte) {
	if route == routeCheckToken {
		return s.checkToken(ctx, dst, body)
	}
	if route == routeGet {
		b, ok := decodeGetBody(body) // json_fast.go, else encoding/json
		if !ok {
			b = getBody{}
			if why := decodeBody(body, &b); why != "" {
				return badBody(dst, why)
			}
		}
		info, res, _ := s.serve(ctx, s.locker, lease.Request{Op: lease.Get, Resource: b.Resource, Durability: lease.Durability(b.Durability)})
		if res.Status != lease.Got {
			return http.StatusOK, append(dst, mustMarshal(statusReply{ServedFrom: res.ServedFrom, Type: res.Status, Reason: res.Reason})...)
		}
		return http.StatusOK, append(dst, mustMarshal(getReply{ServedFrom: res.ServedFrom, Type: res.Status, Owner: info.Owner,
			Expires: hlcTime{L: info.Expires.UnixMilli()}, FencingToken: info.FencingToken, Holders: holdersJSON(info.Holders)})...)
	}
	b, ok := decodeLockBody(body)
	if !ok {
		b = lockBody{}
		if why := decodeBody(body, &b); why != "" {
			return badBody(dst, why)
		}
	}
	op := route.op()
	req := lease.Request{Op: op, Resource: b.Resource, Owner: b.Owner, Durability: lease.Durability(b.Durability),
		Permits: int(b.Permits), Limit: int(b.Limit), Shared: b.Shared, Resize: b.Resize, NewOwner: b.NewOwner, Also: b.Also}
	if op != lease.Unlock {
		req.TTL = msToTTL(b.ExpiresMs)
	}
	// A failed call is answered MustRetry or Errored (see serve), and
	// the error only says the asker is gone, so it is not looked at.
	_, res, _ := s.serve(ctx, s.locker, req)
	reply := lockReply{ServedFrom: res.ServedFrom, Type: res.Status, FencingToken: res.FencingToken, Reason: res.Reason}
	for _, g := range res.Grants {
		reply.Grants = append(reply.Grants, grantReply{Slot: g.Slot, FencingToken: g.Token})
	}
	if lease.IsSemaphore(req.Resource) && len(res.Grants) > 0 {
		reply.PermitsFree = &res.Free
	}
	reply.Each = res.Each
	return http.StatusOK, appendLockReply(dst, reply)
}

// checkTokenBody is a check-token request: is FencingToken the token of
// the live holder of Resource?
type checkTokenBody struct {
	Resource     string `json:"resource"`
	FencingToken int64  `json:"fencingToken"`
	Durability   int32  `json:"durability"`
}

// checkTokenReply answers check-token: valid, and the live holder's token
// and lease end (-1 and none when no lock is held); type is the Get's
// status (Got or LockDoesNotExist, else a refusal such as MustRetry, with
// valid false).
type checkTokenReply struct {
	ServedFrom   string       `json:"servedFrom,omitempty"`
	Type         lease.Status `json:"type"`
	Valid        bool         `json:"valid"`
	FencingToken int64        `json:"fencingToken"`
	Expires      *hlcTime     `json:"expires,omitempty"`
	Reason       string       `json:"reason,omitempty"`
}

// checkToken serves check-token: a Get of the lock (linearizable, by the
// partition's leader under its lease), compared with the token asked
// about. It is ours, not Kahuna's: the server side of fencing for a
// resource that keeps no high-water mark of its own.
func (s *Server) checkToken(ctx context.Context, dst []byte, body []byte) (int, []byte) {
	var b checkTokenBody
	if why := decodeBody(body, &b); why != "" {
		return badBody(dst, why)
	}
	if b.FencingToken < 0 {
		return badBody(dst, "fencingToken must not be negative")
	}
	info, res, _ := s.serve(ctx, s.locker, lease.Request{Op: lease.Get, Resource: b.Resource, Durability: lease.Durability(b.Durability)})
	reply := checkTokenReply{ServedFrom: res.ServedFrom, Type: res.Status, FencingToken: -1, Reason: res.Reason}
	if res.Status == lease.Got {
		reply.Valid = info.FencingToken == b.FencingToken
		reply.FencingToken = info.FencingToken
		reply.Expires = &hlcTime{L: info.Expires.UnixMilli()}
	}
	return http.StatusOK, append(dst, mustMarshal(reply)...)
}

// readJSONBody reads a POSTed JSON body, or answers the client's mistake
// with an HTTP error and a JSON body and returns false.
func (s *Server) readJSONBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed, use POST", r.Method))
		return nil, false
	}
	// ParseMediaType lowercases the type and accepts parameters such as
	// charset=utf-8, which .NET's HttpClient adds.
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, "Content-Type must be application/json")
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(s.opts.MaxRequestBytes)))
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", mbe.Limit))
			return nil, false
		}
		writeError(w, http.StatusBadRequest, "reading body: "+err.Error())
		return nil, false
	}
	return body, true
}

// decodeBody reads body, a JSON request object, into v, or says in the
// request's terms why it cannot.
func decodeBody(body []byte, v any) (why string) {
	// json.Unmarshal would accept null, a bare value being nothing we
	// could serve; insist on an object.
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return "body must be a JSON object"
	}
	// Unmarshal also rejects anything after the object.
	if err := json.Unmarshal(body, v); err != nil {
		return jsonProblem(err)
	}
	return ""
}

// jsonProblem describes a decoding error in the request's terms rather
// than in Go's.
func jsonProblem(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var b64 base64.CorruptInputError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("malformed JSON at byte %d: %v", syn.Offset, err)
	case errors.As(err, &typ):
		if why := ttlOverLimit(typ); why != "" {
			return why
		}
		// Value may hold the number as sent, of any length.
		return fmt.Sprintf("field %q: JSON %s is not a valid value", lease.Excerpt(typ.Field), lease.Excerpt(typ.Value))
	case errors.As(err, &b64):
		return "owner: not valid base64"
	}
	return "malformed JSON: " + err.Error()
}

// ttlOverLimit is lease.Check's reason for an expiresMs that is a whole
// number of milliseconds too large for the wire's int32 (the TTL limit),
// or "" for any other decoding error: a client asking for a long lease is
// told the limit, not that its JSON number is invalid.
func ttlOverLimit(typ *json.UnmarshalTypeError) string {
	ms, isNumber := strings.CutPrefix(typ.Value, "number ")
	if typ.Field != "expiresMs" || !isNumber || ms == "" || strings.Trim(ms, "0123456789") != "" {
		return ""
	}
	ttl := "more than 2562047h" // beyond time.Duration
	if n, err := strconv.ParseInt(ms, 10, 64); err == nil && n <= math.MaxInt64/int64(time.Millisecond) {
		ttl = (time.Duration(n) * time.Millisecond).String()
	}
	return "ttl " + ttl + " is over the limit of " + lease.MaxTTL.String()
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeReply(w, code, mustMarshal(errorReply{Error: msg}))
}

// badBody answers 400 for a body that is not a valid request object,
// saying why in both fields: error as before, reason as InvalidInput has.
func badBody(dst []byte, why string) (int, []byte) {
	return http.StatusBadRequest, append(dst, mustMarshal(errorReply{Error: why, Reason: why})...)
}

// mustMarshal encodes one of our reply types, which always marshal.
func mustMarshal(v any) []byte {
	body, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("transport: encoding reply %T: %v", v, err))
	}
	return body
}

// jsonContentType is the Content-Type of every JSON reply.
const jsonContentType = "application/json; charset=utf-8"

func writeReply(w http.ResponseWriter, code int, body []byte) {
	w.Header().Set("Content-Type", jsonContentType)
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// healthz answers health probes: "ok", or 503 with "starting: " and what
// the node waits for while ready says it has not finished starting.
func healthz(ready func() (bool, string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed, use GET", r.Method))
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if ready != nil {
			if ok, waiting := ready(); !ok {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = io.WriteString(w, "starting: "+waiting+"\n")
				return
			}
		}
		_, _ = io.WriteString(w, "ok")
	}
}
