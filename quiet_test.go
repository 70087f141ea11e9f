package kahuna_test

import (
	"bytes"
	"context"
	"log"
	"os"
	"os/exec"
	"regexp"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
)

const quietChildEnv = "KAHUNA_TEST_QUIET_CHILD"

// An embedded node with no Logger writes nothing on stderr (neither
// dragonboat's, badger's or pebble's lines, nor the node's: pebble's
// background error "vfs: not supported" on the in-memory file system comes
// through the std logger, and the durability package diverts it to the
// library logs), and a program that imports kahuna and opens a node keeps
// its standard logger: the default flags and prefix, and its log.Print
// lines on stderr in the log package's own format, before the node opens,
// while it holds a persistent lock and after it closes. (log.Writer() is
// not os.Stderr itself: that diverter is it.) The node runs in a child
// process, whose stderr is its own, as an embedder's program's is.
func TestEmbeddedNodeWritesNothingToStderr(t *testing.T) {
	t.Parallel()
	if os.Getenv(quietChildEnv) != "" {
		quietChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestEmbeddedNodeWritesNothingToStderr$", "-test.count=1")
	cmd.Env = append(os.Environ(), quietChildEnv+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("child: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	want := regexp.MustCompile(`^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} host line before open\n` +
		`\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} host line while a lock is held\n` +
		`\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} host line after close\n$`)
	if !want.Match(stderr.Bytes()) {
		t.Errorf("stderr holds more than the host's three standard log lines, or not them as the log package writes them:\n%s", stderr.String())
	}
}

func quietChild(t *testing.T) {
	check := func(when string) {
		if f, p := log.Flags(), log.Prefix(); f != log.LstdFlags || p != "" {
			t.Errorf("%s: log.Flags() = %d, log.Prefix() = %q; want the defaults %d and \"\"", when, f, p, log.LstdFlags)
		}
	}
	check("after import")
	log.Print("host line before open")
	n, err := kahuna.Open(kahuna.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := n.TryLock(context.Background(), "quiet", []byte("me"), time.Minute, kahuna.Persistent); err != nil || r.Status != kahuna.Locked {
		t.Fatalf("lock: %v %v", r.Status, err)
	}
	check("while a lock is held")
	log.Print("host line while a lock is held")
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	check("after close")
	log.Print("host line after close")
}
