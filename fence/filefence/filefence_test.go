package filefence_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/kahunago/kahuna/fence"
	"github.com/kahunago/kahuna/fence/filefence"
	"github.com/kahunago/kahuna/fence/internal/fencetest"
)

func tok(v uint64) fence.Token { return fence.Token{Lock: "report", Value: v} }

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRule(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "report.txt")
	for _, step := range []struct {
		tok     uint64
		data    string
		current uint64
	}{
		{0, "first", 0},
		{5, "five", 0},
		{5, "five again", 0},
		{4, "stale", 5},
		{6, "six", 0},
	} {
		err := filefence.Write(ctx, path, tok(step.tok), []byte(step.data))
		if step.current == 0 {
			if err != nil || read(t, path) != step.data {
				t.Fatalf("token %d: %v, file %q", step.tok, err, read(t, path))
			}
			continue
		}
		var stale *fence.StaleError
		if !errors.As(err, &stale) || stale.Current != step.current || stale.Resource != path {
			t.Fatalf("token %d: %v, want stale with current %d", step.tok, err, step.current)
		}
		if read(t, path) == step.data {
			t.Fatalf("token %d: the stale write landed", step.tok)
		}
	}
	// A slot and another lock have marks of their own.
	for _, tk := range []fence.Token{{Lock: "report", Slot: "w", Value: 1}, {Lock: "other", Value: 1}} {
		if err := filefence.Write(ctx, path, tk, []byte("x")); err != nil {
			t.Fatalf("%v: %v", tk, err)
		}
	}
	if m, ok, err := filefence.Mark(path, "report", ""); err != nil || !ok || m != 6 {
		t.Fatalf("mark %d %v %v, want 6", m, ok, err)
	}
	if _, ok, err := filefence.Mark(filepath.Join(t.TempDir(), "none"), "report", ""); err != nil || ok {
		t.Fatalf("mark of a file never written: %v %v", ok, err)
	}
	// Only the data, the marks and the lock file are left: no temporary files.
	entries, _ := os.ReadDir(filepath.Dir(path))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "report.txt report.txt.fence report.txt.lock" {
		t.Fatalf("directory holds %v", names)
	}
}

func TestUpdateFailureWritesNothing(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "f")
	if err := filefence.Write(ctx, path, tok(2), []byte("two")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("cannot compute")
	err := filefence.Update(ctx, path, tok(9), func([]byte) ([]byte, error) { return nil, boom })
	if !errors.Is(err, boom) || errors.Is(err, fence.ErrStale) {
		t.Fatalf("%v", err)
	}
	if m, _, _ := filefence.Mark(path, "report", ""); m != 2 || read(t, path) != "two" {
		t.Fatalf("mark %d, file %q after a failed update", m, read(t, path))
	}
	if err := filefence.Write(ctx, path, fence.Token{Value: 3}, nil); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("invalid token: %v", err)
	}
}

func TestWaitEndsWithContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	// Another process's flock, as far as flock can tell: another open file.
	f, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := filefence.Write(ctx, path, tok(1), []byte("x")); !errors.Is(err, context.Canceled) {
		t.Fatalf("write under another's flock with a cancelled ctx: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("file written: %v", err)
	}
}

// history parses the file the concurrency tests append their tokens to.
func history(t *testing.T, path string) []uint64 {
	var out []uint64
	for f := range strings.SplitSeq(read(t, path), ",") {
		if f == "" {
			continue
		}
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

func appendTok(ctx context.Context, path string, v uint64) error {
	return filefence.Update(ctx, path, tok(v), func(old []byte) ([]byte, error) {
		return fmt.Appendf(old, ",%d", v), nil
	})
}

func TestConcurrentWriters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	out := fencetest.Hammer(context.Background(), 16, 25, 5, func(ctx context.Context, v uint64) error {
		return appendTok(ctx, path, v)
	})
	fencetest.Check(t, history(t, path), out)
}

// childEnv names the file a child process of TestConcurrentProcesses
// writes; the child prints one JSON outcome a line.
const childEnv = "FILEFENCE_CHILD_PATH"

type childOutcome struct {
	Token   uint64 `json:"token"`
	Stale   bool   `json:"stale"`
	Current uint64 `json:"current"`
	Err     string `json:"err"`
}

func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		seed, _ := strconv.ParseUint(os.Getenv("FILEFENCE_CHILD_SEED"), 10, 64)
		enc := json.NewEncoder(os.Stdout)
		for _, o := range fencetest.Hammer(context.Background(), 4, 25, seed, func(ctx context.Context, v uint64) error {
			return appendTok(ctx, path, v)
		}) {
			c := childOutcome{Token: o.Token}
			var stale *fence.StaleError
			switch {
			case errors.As(o.Err, &stale):
				c.Stale, c.Current = true, stale.Current
			case o.Err != nil:
				c.Err = o.Err.Error()
			}
			enc.Encode(c)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestConcurrentProcesses: four processes of four writers each append to
// one file; flock is what keeps them apart.
func TestConcurrentProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	var cmds []*exec.Cmd
	var outs []*bufio.Scanner
	for i := range 4 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+path, fmt.Sprintf("FILEFENCE_CHILD_SEED=%d", i))
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
		outs = append(outs, bufio.NewScanner(stdout))
	}
	var all []fencetest.Outcome
	for i, sc := range outs {
		for sc.Scan() {
			var c childOutcome
			if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
				t.Fatalf("child %d: %q: %v", i, sc.Text(), err)
			}
			o := fencetest.Outcome{Token: c.Token}
			switch {
			case c.Stale:
				o.Err = &fence.StaleError{Resource: path, Token: tok(c.Token), Current: c.Current}
			case c.Err != "":
				o.Err = errors.New(c.Err)
			}
			all = append(all, o)
		}
		if err := cmds[i].Wait(); err != nil {
			t.Fatalf("child %d: %v", i, err)
		}
	}
	if len(all) != 4*4*25 {
		t.Fatalf("%d outcomes from the children, want %d", len(all), 4*4*25)
	}
	fencetest.Check(t, history(t, path), all)
}
