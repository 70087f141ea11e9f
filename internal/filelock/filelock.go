// Package filelock takes an advisory, exclusive lock on an open file
// without waiting: the operating system drops it when the file is closed
// or its process exits, however it exits.
package filelock

import (
	"errors"
	"os"
)

// ErrHeld is a lock another open file (in this process or another) holds.
var ErrHeld = errors.New("file lock held elsewhere")

// TryLock takes f's lock, or returns ErrHeld at once if it is held.
// Closing f lets it go.
func TryLock(f *os.File) error { return tryLock(f) }
