package node

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// layoutFile records the settings a DataDir is bound to. Partitions decide
// where each persistent lock lives, so reopening with another count would
// silently lose locks: Open refuses instead.
const layoutFile = "kahuna-layout"

// recordedPartitions is the partition count dir was created with, 0 when
// there is no dir or it records none yet.
func recordedPartitions(dir string) (int, error) {
	if dir == "" {
		return 0, nil
	}
	got, err := os.ReadFile(filepath.Join(dir, layoutFile))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("kahuna: data dir: %w", err)
	}
	v, ok := strings.CutPrefix(strings.TrimSpace(string(got)), "partitions=")
	n, err := strconv.Atoi(v)
	if !ok || err != nil || n < 1 {
		return 0, fmt.Errorf("kahuna: data dir %s: %s holds %q, not partitions=N", dir, layoutFile, got)
	}
	return n, nil
}

func checkLayout(cfg Config) error {
	if cfg.DataDir == "" {
		return nil
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("kahuna: data dir: %w", err)
	}
	path := filepath.Join(cfg.DataDir, layoutFile)
	want := "partitions=" + strconv.Itoa(cfg.Partitions) + "\n"
	got, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			return fmt.Errorf("kahuna: data dir: %w", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("kahuna: data dir: %w", err)
	case string(got) != want:
		return fmt.Errorf("kahuna: data dir %s was created with %s; this node is configured with %s (changing the partition count would lose locks)",
			cfg.DataDir, strings.TrimSpace(string(got)), strings.TrimSpace(want))
	}
	return nil
}
