package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"

	"github.com/kahunago/kahuna/admin"
	"github.com/kahunago/kahuna/internal/node"
	"github.com/kahunago/kahuna/lease"
)

// EmbeddedTarget is a kahuna node inside the harness's process: no network,
// no server to start. Ephemeral runs keep everything in memory; persistent
// runs commit through Raft onto disk, in --data-dir or else a temp dir that
// is removed afterwards (so "persistent" always means fsynced to disk).
// The node is a lease.WaitLocker: hot-wait waits in its queue.
func EmbeddedTarget() Target {
	return Target{
		Name:      "embedded",
		Aliases:   []string{"kahuna-embedded"},
		About:     "an in-process kahuna node; persistent runs use --data-dir or a temp dir on disk",
		InProcess: true,
		Open:      openEmbedded,
	}
}

func openEmbedded(_ context.Context, s Settings) (System, error) {
	node, requests, closeNode, err := openNode(s)
	if err != nil {
		return nil, err
	}
	sys := System(Shared{L: node, CloseFn: closeNode})
	if requests != nil {
		sys = Counted{System: sys, N: requests, What: observed}
	}
	return sys, nil
}

// observed is what a node's request count is, in reports.
const observed = "node requests (Config.Observe)"

// openNode opens the node of an embedded or in-process wire target. With
// s.CountRequests, requests counts every request it answers (its
// Config.Observe); else it is nil.
func openNode(s Settings) (n *node.Node, requests *atomic.Int64, closeFn func() error, err error) {
	dir, cleanup := s.DataDir, func() error { return nil }
	if dir == "" && s.Durability == lease.Persistent {
		tmp, err := os.MkdirTemp("", "kahuna-bench-")
		if err != nil {
			return nil, nil, nil, fmt.Errorf("temp data dir: %w", err)
		}
		dir, cleanup = tmp, func() error { return os.RemoveAll(tmp) }
	}
	cfg := node.Config{
		DataDir:    dir,
		Partitions: s.Partitions,
		LockActors: s.LockActors,
		Logger:     s.Logger,
	}
	if s.CountRequests {
		requests = new(atomic.Int64)
		cfg.Observe = func(admin.RequestEvent) { requests.Add(1) }
	}
	n, err = node.Open(cfg)
	if err != nil {
		return nil, nil, nil, errors.Join(err, cleanup())
	}
	return n, requests, func() error { return errors.Join(n.Close(), cleanup()) }, nil
}
