package admin

import (
	"time"

	"github.com/kahunago/kahuna/lease"
)

// RequestEvent describes one lock request a node answered. It is what
// kahuna.Config.Observe receives (cmd/kahuna's metrics), and what the node
// logs per request at debug.
type RequestEvent struct {
	Op         lease.Op
	Resource   string
	Durability lease.Durability
	Partition  int
	// Status is the answer. A call that failed (Err set) is counted as the
	// wire API answers it: MustRetry when it certainly did not apply,
	// Errored otherwise.
	Status  lease.Status
	Err     error
	Latency time.Duration
	// Forwarded marks a request a peer forwarded to this node.
	Forwarded bool
	// ForwardedTo is the leader this node forwarded the request to (0: it
	// was served here, or no leader was known and it was not sent).
	ForwardedTo uint64
}
