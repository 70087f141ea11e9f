package filelock

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A lock excludes another open file of the same path, in this process
// too, until the holder closes its file.
func TestTryLockExcludesUntilClosed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	open := func() *os.File {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	a, b := open(), open()
	defer b.Close()
	if err := TryLock(a); err != nil {
		t.Fatalf("first lock: %v", err)
	}
	if err := TryLock(b); !errors.Is(err, ErrHeld) {
		t.Fatalf("second lock while the first is held: %v, want ErrHeld", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := TryLock(b); err != nil {
		t.Fatalf("lock after the holder closed: %v", err)
	}
}
