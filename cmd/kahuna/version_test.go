package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestVersion: --version prints one line and starts nothing (no data dir,
// no listener), whatever else is on the command line.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"-version"}, {"--version", "--storage-path", "/nonexistent/x", "--http-ports", "1"}} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), args, &stdout, &stderr)
		if code != 0 || !strings.HasPrefix(stdout.String(), "kahuna ") || strings.Count(stdout.String(), "\n") != 1 || stderr.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, stdout.String(), stderr.String())
		}
	}

}
