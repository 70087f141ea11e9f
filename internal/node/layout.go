package node

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/kahunago/kahuna/internal/filelock"
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

// pidFile is the data dir's lock: held (a file lock) by the process that has
// the dir open, and holding its PID, so a second process on the same dir
// is refused saying which process has it rather than with the storage
// engine's own lock error. The kernel drops the lock when its holder
// exits, however it exits.
const pidFile = "kahuna.pid"

// ErrDataDirInUse: another node has the data dir open (another process,
// or another Node in this one).
var ErrDataDirInUse = errors.New("kahuna: data dir in use")

// lockDataDir creates dir if needed and takes its lock; release (safe to
// call more than once) lets it go. An empty dir (in memory) needs none.
func lockDataDir(dir string) (release func(), err error) {
	if dir == "" {
		return func() {}, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("kahuna: data dir: %w", err)
	}
	path := filepath.Join(dir, pidFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("kahuna: data dir: %w", err)
	}
	if err := filelock.TryLock(f); err != nil {
		holder, _ := os.ReadFile(path)
		_ = f.Close()
		if errors.Is(err, filelock.ErrHeld) {
			if pid := strings.TrimSpace(string(holder)); pid != "" {
				return nil, fmt.Errorf("%w: %s is used by another kahuna node (pid %s); stop it first, or give this one another data dir", ErrDataDirInUse, dir, pid)
			}
			return nil, fmt.Errorf("%w: %s is used by another kahuna node", ErrDataDirInUse, dir)
		}
		return nil, fmt.Errorf("kahuna: data dir %s: lock: %w", dir, err)
	}
	// The PID is for the message of a node refused; the lock itself is the
	// file lock, so a PID that could not be written costs only that message.
	if f.Truncate(0) == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	var once sync.Once
	return func() { once.Do(func() { _ = f.Close() }) }, nil // closing drops the lock
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
