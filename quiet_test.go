package kahuna_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
)

const quietChildEnv = "KAHUNA_TEST_QUIET_CHILD"

// An embedded node with no Logger writes nothing on stderr: neither
// dragonboat's, badger's or pebble's lines (pebble's background error
// "vfs: not supported" on the in-memory file system, which comes through
// the std logger and which the durability package diverts to the library
// logs) nor the node's. The node
// runs in a child process, whose stderr is its own.
func TestEmbeddedNodeWritesNothingToStderr(t *testing.T) {
	if os.Getenv(quietChildEnv) != "" {
		n, err := kahuna.Open(kahuna.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.TryLock(context.Background(), "quiet", []byte("me"), time.Minute, kahuna.Persistent); err != nil {
			t.Fatal(err)
		}
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestEmbeddedNodeWritesNothingToStderr$", "-test.count=1")
	cmd.Env = append(os.Environ(), quietChildEnv+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("child: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	if stderr.Len() != 0 {
		t.Errorf("an embedded node with no Logger wrote on stderr:\n%s", stderr.String())
	}
}
