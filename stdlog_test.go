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

const hostLogChildEnv = "KAHUNA_TEST_NODE_HOST_LOG_CHILD"

// A program that imports kahuna and opens a node keeps its standard
// logger: the default flags and prefix, and its log.Print lines on stderr
// in the log package's own format, before the node opens, while it runs a
// persistent lock and after it closes, with nothing of the node's in
// between. (log.Writer() is not os.Stderr itself: the Raft library's log
// store writes through the standard logger, and those lines alone go to
// the node's logger instead.) It runs in a child process so that the
// stderr seen is the one an embedder's program has.
func TestOpeningANodeLeavesTheHostLoggerAlone(t *testing.T) {
	if os.Getenv(hostLogChildEnv) != "" {
		nodeHostLogChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestOpeningANodeLeavesTheHostLoggerAlone$", "-test.count=1")
	cmd.Env = append(os.Environ(), hostLogChildEnv+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("child: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	want := regexp.MustCompile(`^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} host line before open\n` +
		`\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} host line while a lock is held\n` +
		`\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} host line after close\n$`)
	if !want.Match(stderr.Bytes()) {
		t.Errorf("the host's standard log lines on stderr are not the log package's own, or the node wrote there:\n%s", stderr.String())
	}
}

func nodeHostLogChild(t *testing.T) {
	check := func(when string) {
		if f, p := log.Flags(), log.Prefix(); f != log.LstdFlags || p != "" {
			t.Errorf("%s: log.Flags() = %d, log.Prefix() = %q; want the defaults %d and \"\"", when, f, p, log.LstdFlags)
		}
	}
	check("after import")
	log.Print("host line before open")
	n, err := kahuna.Open(kahuna.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if r, err := n.TryLock(ctx, "host/log", []byte("me"), time.Minute, kahuna.Persistent); err != nil || r.Status != kahuna.Locked {
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
