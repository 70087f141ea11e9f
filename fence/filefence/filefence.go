// Package filefence fences writes to a file on a local filesystem: the
// marks are kept in a file beside the data (path + ".fence"), and a write
// replaces the data by renaming a new file over it, so a reader sees the
// old content or the new one, whole.
//
// A write is one step under a lock: writers in one process queue on a
// lock of their own, and across processes on flock(2) of path + ".lock".
// Under the lock it reads the marks, checks the token, writes the raised
// mark (temporary file, fsync, rename), then the data (the same), and
// fsyncs the directory. The mark goes first: a crash between the two
// leaves the mark raised and the old data, which wrongs no current holder
// (the lock service issued that token, so every lower one is stale) and
// lets the holder write again; the other order could leave new data under
// an old mark, open to a stale writer.
//
// Limits. The lock is advisory: a writer that does not go through
// filefence is not fenced, and readers are not locked out (they do not
// need to be). flock is per machine: on NFS and other network filesystems
// it may not exclude writers on other machines, so use it on local disks
// only. Linux and the BSDs (macOS included); other systems get
// errors.ErrUnsupported.
//
// Object stores have no rename or lock, but have the compare-and-swap
// that replaces both: keep the mark in the object's metadata, read the
// object's ETag (or generation) and mark, refuse if the mark is above the
// token, and write data and the raised mark with If-Match on that ETag; on
// 412 (or 409), read again and retry. That is described in the repository's
// docs/fencing.md, not provided here.
package filefence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/kahunago/kahuna/fence"
)

// Write replaces the file at path with data if tok passes the fence: its
// token is at least the mark of (path, tok.Lock, tok.Slot). A stale tok
// is a *fence.StaleError with the mark, nothing written.
func Write(ctx context.Context, path string, tok fence.Token, data []byte) error {
	return Update(ctx, path, tok, func([]byte) ([]byte, error) { return data, nil })
}

// Update is Write of what fn makes of the file's content (nil when there is
// no file yet), read under the lock, so no other fenced write lands
// between the read and the write. An error of fn writes nothing and is
// returned wrapped.
func Update(ctx context.Context, path string, tok fence.Token, fn func(old []byte) ([]byte, error)) error {
	if err := tok.Validate(); err != nil {
		return err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("filefence: %w", err)
	}
	unlock, err := lock(ctx, abs)
	if err != nil {
		return err
	}
	defer unlock()

	marks, err := readMarks(abs)
	if err != nil {
		return err
	}
	k := key{tok.Lock, tok.Slot}
	mark, ok := marks[k]
	if !fence.Admit(mark, ok, tok.Value) {
		return &fence.StaleError{Resource: path, Token: tok, Current: mark}
	}
	old, err := os.ReadFile(abs)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("filefence: %w", err)
	}
	data, err := fn(old)
	if err != nil {
		return fmt.Errorf("filefence: update of %s with %s: %w", path, tok, err)
	}
	if !ok || tok.Value > mark {
		marks[k] = tok.Value
		if err := writeMarks(abs, marks); err != nil {
			return err
		}
	}
	if err := replace(abs, data); err != nil {
		return err
	}
	return syncDir(filepath.Dir(abs))
}

// Mark reads the mark of (path, lock, slot), without the lock: a mark file
// is only ever replaced whole.
func Mark(path, lock, slot string) (mark uint64, ok bool, err error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return 0, false, fmt.Errorf("filefence: %w", err)
	}
	marks, err := readMarks(abs)
	if err != nil {
		return 0, false, err
	}
	mark, ok = marks[key{lock, slot}]
	return mark, ok, nil
}

type key struct{ lock, slot string }

// markFile is the JSON of path + ".fence".
type markFile struct {
	Marks []markEntry `json:"marks"`
}

type markEntry struct {
	Lock  string `json:"lock"`
	Slot  string `json:"slot,omitempty"`
	Token uint64 `json:"token"`
}

func readMarks(abs string) (map[key]uint64, error) {
	marks := make(map[key]uint64)
	b, err := os.ReadFile(abs + ".fence")
	if errors.Is(err, fs.ErrNotExist) {
		return marks, nil
	}
	if err != nil {
		return nil, fmt.Errorf("filefence: reading marks: %w", err)
	}
	var f markFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("filefence: marks in %s.fence: %w", abs, err)
	}
	for _, m := range f.Marks {
		marks[key{m.Lock, m.Slot}] = m.Token
	}
	return marks, nil
}

func writeMarks(abs string, marks map[key]uint64) error {
	var f markFile
	for k, v := range marks {
		f.Marks = append(f.Marks, markEntry{Lock: k.lock, Slot: k.slot, Token: v})
	}
	b, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("filefence: %w", err)
	}
	return replace(abs+".fence", b)
}

// replace writes data to a temporary file beside abs, fsyncs it and
// renames it over abs.
func replace(abs string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(abs), "."+filepath.Base(abs)+".tmp-*")
	if err != nil {
		return fmt.Errorf("filefence: %w", err)
	}
	name := tmp.Name()
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(name, abs)
	}
	if err != nil {
		os.Remove(name)
		return fmt.Errorf("filefence: replacing %s: %w", abs, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("filefence: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("filefence: syncing %s: %w", dir, err)
	}
	return nil
}

// locks holds one in-process lock per file ever written (a channel of
// one), so goroutines queue here and honour ctx rather than sit in flock.
var locks = struct {
	sync.Mutex
	m map[string]chan struct{}
}{m: make(map[string]chan struct{})}

// lock takes the in-process lock of abs, then flock of abs + ".lock".
func lock(ctx context.Context, abs string) (unlock func(), err error) {
	locks.Lock()
	ch := locks.m[abs]
	if ch == nil {
		ch = make(chan struct{}, 1)
		locks.m[abs] = ch
	}
	locks.Unlock()
	select {
	case ch <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("filefence: waiting for %s: %w", abs, context.Cause(ctx))
	}
	f, err := os.OpenFile(abs+".lock", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		<-ch
		return nil, fmt.Errorf("filefence: %w", err)
	}
	// flock cannot be interrupted by ctx: try without blocking, with a
	// growing pause, until it is free or ctx ends.
	for pause := 100 * time.Microsecond; ; pause = min(2*pause, 20*time.Millisecond) {
		held, err := tryFlock(f)
		if err != nil {
			f.Close()
			<-ch
			return nil, fmt.Errorf("filefence: locking %s.lock: %w", abs, err)
		}
		if held {
			break
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			f.Close()
			<-ch
			return nil, fmt.Errorf("filefence: waiting for %s.lock: %w", abs, context.Cause(ctx))
		}
	}
	return func() {
		f.Close() // closing the last descriptor releases the flock
		<-ch
	}, nil
}
