package main

import (
	"bytes"
	"context"
	"runtime/debug"
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
	for _, c := range []struct {
		bi   *debug.BuildInfo
		want string
	}{
		{nil, "(devel)"},
		{&debug.BuildInfo{GoVersion: "go1.26.0"}, "(devel) go1.26.0"},
		{&debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.modified", Value: "true"}}}, "v1.2.3 revision 0123abcd (modified) go1.26.0"},
	} {
		if got := describeBuild(c.bi); got != c.want {
			t.Errorf("describeBuild = %q, want %q", got, c.want)
		}
	}
}
