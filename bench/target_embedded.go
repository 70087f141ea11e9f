package bench

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/lease"
)

// EmbeddedTarget is a kahuna node inside the harness's process: no network,
// no server to start. Ephemeral runs keep everything in memory; persistent
// runs commit through Raft onto disk, in --data-dir or else a temp dir that
// is removed afterwards (so "persistent" always means fsynced to disk).
func EmbeddedTarget() Target {
	return Target{
		Name:      "embedded",
		Aliases:   []string{"kahuna-embedded"},
		About:     "an in-process kahuna node (kahuna.Open); persistent runs use --data-dir or a temp dir on disk",
		InProcess: true,
		Open:      openEmbedded,
	}
}

func openEmbedded(_ context.Context, s Settings) (System, error) {
	dir, cleanup := s.DataDir, func() error { return nil }
	if dir == "" && s.Durability == lease.Persistent {
		tmp, err := os.MkdirTemp("", "kahuna-bench-")
		if err != nil {
			return nil, fmt.Errorf("temp data dir: %w", err)
		}
		dir, cleanup = tmp, func() error { return os.RemoveAll(tmp) }
	}
	node, err := kahuna.Open(kahuna.Config{
		DataDir:    dir,
		Partitions: s.Partitions,
		LockActors: s.LockActors,
		Logger:     s.Logger,
	})
	if err != nil {
		return nil, errors.Join(err, cleanup())
	}
	return Shared{L: node, CloseFn: func() error {
		return errors.Join(node.Close(), cleanup())
	}}, nil
}
