package durability_test

import (
	"bytes"
	"log"
	"os"
	"os/exec"
	"regexp"
	"testing"

	"github.com/kahunago/kahuna/durability"
)

const hostLogChildEnv = "KAHUNA_TEST_HOST_LOG_CHILD"

// A program that imports kahuna keeps its standard logger: the default
// flags and prefix, and its log.Print lines on stderr in the log
// package's own format, before and after a Raft backend opens and closes;
// the libraries under the backend add nothing there. It runs in a child
// process so that the stderr seen is the one an embedder's program has.
func TestHostStandardLoggerUntouched(t *testing.T) {
	if os.Getenv(hostLogChildEnv) != "" {
		hostLogChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHostStandardLoggerUntouched$", "-test.count=1")
	cmd.Env = append(os.Environ(), hostLogChildEnv+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("child: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	want := regexp.MustCompile(`^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} host line before open\n` +
		`\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} host line after close\n$`)
	if !want.Match(stderr.Bytes()) {
		t.Errorf("the host's standard log lines on stderr are not the log package's own:\n%s", stderr.String())
	}
}

func hostLogChild(t *testing.T) {
	check := func(when string) {
		if f, p := log.Flags(), log.Prefix(); f != log.LstdFlags || p != "" {
			t.Errorf("%s: log.Flags() = %d, log.Prefix() = %q; want the defaults %d and \"\"", when, f, p, log.LstdFlags)
		}
	}
	check("after import")
	log.Print("host line before open")
	r, err := durability.OpenRaft(durability.RaftConfig{Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	check("after open and close")
	log.Print("host line after close")
}
