package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// Node is what the admin API serves: a kahuna node, which knows its
// partitions and members and changes them. The handler turns its answers
// and errors into HTTP.
type Node interface {
	Partitions() PartitionsView
	Status() NodeStatus
	Members() MembersView
	// AddMember and RemoveMember change the membership on every
	// partition. An error is a *MembershipError when some partitions are
	// left (503), matches ErrMemberRemoved or ErrMemberConflict when
	// refused for good (409), ErrNotMember for the removal of an ID that
	// is no member (404), else is a bad request (400).
	AddMember(ctx context.Context, id uint64, raftAddress, endpoint string) error
	RemoveMember(ctx context.Context, id uint64) error
	// TransferLeadership asks to move partition p to node to. On a node
	// that does not lead p the error matches ErrNotLeader and leader is
	// the node that does (0: none known yet).
	TransferLeadership(p int, to uint64) (leader uint64, err error)
	// Endpoint is member id's API URL ("": none known).
	Endpoint(id uint64) string
	// PeerChange serves a request of another member (req.Op set, already
	// checked): "learn", "joined" and "forget" record what it says; "add"
	// and "remove" apply to req.Partitions, which this node leads, and
	// the result says which are done. An error means nothing was tried:
	// ErrMemberRemoved (409), or this node cannot change members now
	// (503).
	PeerChange(ctx context.Context, req MemberRequest) (MemberChangeResult, error)
	// ListLocks lists the live locks of req.Partitions that this node
	// serves (LocksPath). An error matching ErrInvalidList is a bad
	// request (400); any other, the node could not read them (503).
	ListLocks(ctx context.Context, req LocksRequest) (LocksView, error)
}

// transferWait bounds how long a transfer request waits for the
// partition to have a serving leader.
const transferWait = 5 * time.Second

// forwardTimeout bounds a transfer passed on to the partition's leader.
const forwardTimeout = 10 * time.Second

// NewHandler serves the admin API of n (the paths are in this package's
// constants) for operators, kahunactl and the other members. c passes a
// transfer on to the partition's leader: it is a client of requests
// between members (WithPeerSecret), trusting the cluster's certificates.
// Routes lists the patterns to mount it on.
func NewHandler(n Node, c *Client) http.Handler {
	h := &handler{n: n, c: c}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PartitionsPath, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, n.Partitions())
	})
	mux.HandleFunc("GET "+StatusPath, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, n.Status())
	})
	mux.HandleFunc("GET "+MembersPath, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, n.Members())
	})
	mux.HandleFunc("GET "+LocksPath, h.listLocks)
	mux.HandleFunc("POST "+TransferPath, h.transfer)
	mux.HandleFunc("POST "+MembersPath, h.addMember)
	mux.HandleFunc("DELETE "+MembersPath+"/{id}", h.removeMember)
	return mux
}

// Routes maps every admin path pattern to h, for servers that mount
// handlers by pattern (transport.ServerOptions.Extra).
func Routes(h http.Handler) map[string]http.Handler {
	return map[string]http.Handler{
		PartitionsPath:    h,
		TransferPath:      h,
		MembersPath:       h,
		MembersPath + "/": h,
		StatusPath:        h,
		LocksPath:         h,
	}
}

type handler struct {
	n Node
	c *Client
}

// fromPeer: r is a request between members, never passed on again.
func fromPeer(r *http.Request) bool { return r.Header.Get(forwardedHeader) != "" }

func (h *handler) transfer(w http.ResponseWriter, r *http.Request) {
	var req TransferRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("bad transfer request: %v", err)})
		return
	}
	// While the partition is electing or its new leader is fencing its
	// epoch there is nobody to ask: wait a little for one, as a client
	// retries MustRetry.
	var leader uint64
	var err error
	deadline := time.Now().Add(transferWait)
	for {
		leader, err = h.n.TransferLeadership(req.Partition, req.To)
		if !errors.Is(err, ErrNotLeader) || leader != 0 || !time.Now().Before(deadline) {
			break
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-r.Context().Done():
			return
		}
	}
	notLeader := errors.Is(err, ErrNotLeader)
	if notLeader && leader != 0 && !fromPeer(r) {
		// Only the leader may start a transfer: pass it on, once.
		h.forward(w, r, leader, req)
		return
	}
	if err != nil {
		code := http.StatusBadRequest
		if notLeader {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusAccepted, req)
}

// forward passes a transfer request on to the partition's leader, with
// the caller's token (it holds on every member), and relays its answer.
func (h *handler) forward(w http.ResponseWriter, r *http.Request, leader uint64, req TransferRequest) {
	endpoint := h.n.Endpoint(leader)
	if endpoint == "" {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": fmt.Sprintf("partition %d is led by node %d, which has no endpoint", req.Partition, leader)})
		return
	}
	body, _ := json.Marshal(req)
	var header http.Header
	if auth := r.Header.Get("Authorization"); auth != "" {
		header = http.Header{"Authorization": {auth}}
	}
	ctx, cancel := context.WithTimeout(r.Context(), forwardTimeout)
	defer cancel()
	resp, err := h.c.Do(ctx, endpoint, http.MethodPost, TransferPath, body, header)
	if err != nil {
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": fmt.Sprintf("pass the transfer on to node %d (the leader of partition %d): %v", leader, req.Partition, err)})
		return
	}
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

func (h *handler) listLocks(w http.ResponseWriter, r *http.Request) {
	req, err := ParseLocksQuery(r.URL.Query())
	if err == nil {
		var v LocksView
		if v, err = h.n.ListLocks(r.Context(), req); err == nil {
			if v.Locks == nil {
				v.Locks = []Lock{}
			}
			writeJSON(w, http.StatusOK, v)
			return
		}
	}
	code := http.StatusServiceUnavailable
	if errors.Is(err, ErrInvalidList) {
		code = http.StatusBadRequest
	}
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

func (h *handler) addMember(w http.ResponseWriter, r *http.Request) {
	var req MemberRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("bad member request: %v", err)})
		return
	}
	if fromPeer(r) {
		h.peerChange(w, r.Context(), req)
		return
	}
	if req.Op != "" || req.Partitions != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "op and partitions are for requests between nodes"})
		return
	}
	h.writeChange(w, "add", req.ID, h.n.AddMember(r.Context(), req.ID, req.RaftAddress, req.Endpoint))
}

func (h *handler) removeMember(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || id == 0 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("bad member ID %q", r.PathValue("id"))})
		return
	}
	h.writeChange(w, "remove", id, h.n.RemoveMember(r.Context(), id))
}

// writeChange answers a membership change with its MemberChangeResult.
func (h *handler) writeChange(w http.ResponseWriter, op string, id uint64, err error) {
	res := MemberChangeResult{Op: op, ID: id, Done: []int{}}
	var me *MembershipError
	switch {
	case err == nil:
		for _, p := range h.n.Partitions().Partitions {
			res.Done = append(res.Done, p.Partition)
		}
		writeJSON(w, http.StatusOK, res)
		return
	case errors.As(err, &me):
		res.Done = append(res.Done, me.Done...)
		res.Left = map[int]string{}
		for p, e := range me.Left {
			res.Left[p] = e.Error()
		}
	}
	res.Error = err.Error()
	res.Removed = errors.Is(err, ErrMemberRemoved)
	code := http.StatusServiceUnavailable
	switch {
	case res.Removed || errors.Is(err, ErrMemberConflict):
		code = http.StatusConflict
	case errors.Is(err, ErrNotMember):
		code = http.StatusNotFound
	case me == nil:
		code = http.StatusBadRequest
	}
	writeJSON(w, code, res)
}

// peerChange serves a request of another member.
func (h *handler) peerChange(w http.ResponseWriter, ctx context.Context, req MemberRequest) {
	switch req.Op {
	case "learn", "joined":
		if req.ID == 0 || req.RaftAddress == "" || req.Endpoint == "" {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "learn needs id, raft_address and endpoint"})
			return
		}
	case "forget", "add", "remove":
	default:
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("unknown op %q", req.Op)})
		return
	}
	res, err := h.n.PeerChange(ctx, req)
	switch {
	case req.Op != "add" && req.Op != "remove":
		writeJSON(w, http.StatusOK, map[string]string{})
	case errors.Is(err, ErrMemberRemoved):
		writeJSON(w, http.StatusConflict, MemberChangeResult{Op: req.Op, ID: req.ID, Removed: true, Error: err.Error()})
	case err != nil:
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
	default:
		writeJSON(w, http.StatusOK, res)
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
