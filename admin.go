package kahuna

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Admin API paths, served next to the lock API.
const (
	AdminPartitionsPath = "/v1/admin/partitions"
	AdminTransferPath   = "/v1/admin/transfer-leadership"
)

// PartitionInfo is one partition as a node sees it.
type PartitionInfo struct {
	Partition int    `json:"partition"`
	Leader    uint64 `json:"leader"`  // 0 = none known
	Serving   bool   `json:"serving"` // this node serves it now
}

// TransferRequest asks to move a partition's leadership.
type TransferRequest struct {
	Partition int    `json:"partition"`
	To        uint64 `json:"to"`
}

// AdminHandler serves GET AdminPartitionsPath (the leader of every
// partition), POST AdminTransferPath (a TransferRequest), and the
// membership and status paths (AdminMembersPath, AdminStatusPath), for
// operators and kahunactl. AdminRoutes lists the patterns to mount it on.
func (n *Node) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	n.memberRoutes(mux)
	mux.HandleFunc("GET "+AdminPartitionsPath, func(w http.ResponseWriter, _ *http.Request) {
		infos := make([]PartitionInfo, n.cfg.Partitions)
		for p := range infos {
			leader, serving := n.Leader(p)
			infos[p] = PartitionInfo{Partition: p, Leader: leader, Serving: serving}
		}
		writeJSON(w, http.StatusOK, map[string]any{"node": n.cfg.NodeID, "partitions": infos})
	})
	mux.HandleFunc("POST "+AdminTransferPath, func(w http.ResponseWriter, r *http.Request) {
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
		var err error
		var nl *NotLeaderError
		deadline := time.Now().Add(adminTransferWait)
		for {
			err, nl = n.TransferLeadership(req.Partition, req.To), nil
			if !errors.As(err, &nl) || nl.Leader != 0 || !time.Now().Before(deadline) {
				break
			}
			select {
			case <-time.After(20 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
		if nl != nil && nl.Leader != 0 && r.Header.Get(adminForwardedHeader) == "" {
			// Only the leader may start a transfer: pass it on, once.
			n.forwardAdmin(w, r, nl.Leader, req)
			return
		}
		if err != nil {
			code := http.StatusBadRequest
			if nl != nil {
				code = http.StatusServiceUnavailable
			}
			writeJSON(w, code, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusAccepted, req)
	})
	return mux
}

// adminTransferWait bounds how long a transfer request waits for the
// partition to have a serving leader.
const adminTransferWait = 5 * time.Second

// adminForwardedHeader marks an admin request passed on by another node.
const adminForwardedHeader = "Kahuna-Forwarded"

// forwardAdmin passes a transfer request on to the partition's leader and
// relays its answer.
func (n *Node) forwardAdmin(w http.ResponseWriter, r *http.Request, leader uint64, req TransferRequest) {
	m, ok := n.book.get(leader)
	if !ok || m.Endpoint == "" {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": fmt.Sprintf("partition %d is led by node %d, which has no endpoint", req.Partition, leader)})
		return
	}
	body, _ := json.Marshal(req)
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	fr, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(m.Endpoint, "/")+AdminTransferPath, bytes.NewReader(body))
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	fr.Header.Set("Content-Type", "application/json")
	authorizePeer(fr, n.cfg.peerSecret())
	if auth := r.Header.Get("Authorization"); auth != "" { // the caller's token holds on every member
		fr.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(fr)
	if err != nil {
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": fmt.Sprintf("pass the transfer on to node %d (the leader of partition %d): %v", leader, req.Partition, err)})
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, io.LimitReader(resp.Body, 64<<10))
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
