package kahuna

import (
	"encoding/json"
	"fmt"
	"net/http"
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
// partition) and POST AdminTransferPath (a TransferRequest), for operators
// and kahunactl.
func (n *Node) AdminHandler() http.Handler {
	mux := http.NewServeMux()
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
		if err := n.TransferLeadership(req.Partition, req.To); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusAccepted, req)
	})
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
