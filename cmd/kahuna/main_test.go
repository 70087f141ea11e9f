package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/internal/testport"
)

// output collects what run prints and signals once the node is ready.
type output struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	ready chan struct{}
	once  sync.Once
}

func newOutput() *output { return &output{ready: make(chan struct{})} }

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf.Write(p)
	if strings.Contains(o.buf.String(), "kahuna node ready") {
		o.once.Do(func() { close(o.ready) })
	}
	return len(p), nil
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

func TestBadFlagsExitTwoWithOneLine(t *testing.T) {
	for _, args := range [][]string{
		{"--http-ports", "abc"},
		{"--initial-cluster-partitions", "0"},
		{"--log-level", "loud"},
		{"--https-certificate", "cert.pem"},
		{"--raft-nodeid", "2", "--initial-cluster", "1=127.0.0.1:2073", "--initial-cluster-endpoints", "1=http://127.0.0.1:2070"},
		{"--initial-cluster", "1=127.0.0.1:2073"},
		{"--raft-rtt", "0s"},
		{"--raft-rtt", "1500us"},
		{"--initial-cluster-state", "old"},
		{"extra-arg"},
	} {
		var stderr bytes.Buffer
		code := run(context.Background(), args, io.Discard, &stderr)
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		if code != 2 || !strings.HasPrefix(lines[len(lines)-1], "kahuna: ") {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr.String())
		}
	}
}

func TestUnusablePortOrDataDirExitsOne(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := strconv.Itoa(busy.Addr().(*net.TCPAddr).Port)
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := map[string][]string{
		"api port in use":  {"--http-ports", busyPort, "--grpc-cleartext-ports", "", "--storage-path", t.TempDir()},
		"raft port in use": {"--http-ports", strconv.Itoa(testport.Port(t)), "--grpc-cleartext-ports", "", "--raft-port", busyPort, "--storage-path", t.TempDir()},
		"data dir a file":  {"--http-ports", strconv.Itoa(testport.Port(t)), "--grpc-cleartext-ports", "", "--raft-port", strconv.Itoa(testport.Port(t)), "--storage-path", file},
	}
	for name, args := range cases {
		var stderr bytes.Buffer
		code := run(context.Background(), args, io.Discard, &stderr)
		if code != 1 || strings.Count(strings.TrimSpace(stderr.String()), "\n") != 0 || !strings.HasPrefix(stderr.String(), "kahuna: ") ||
			strings.HasPrefix(stderr.String(), "kahuna: kahuna: ") {
			t.Errorf("%s: exit %d, stderr %q: want one line, kahuna: said once", name, code, stderr.String())
		}
	}
}

func TestClusterStateAndTokenFlags(t *testing.T) {
	t.Setenv("KAHUNA_HOME", t.TempDir())
	o, err := parseFlags(nil, io.Discard)
	if err != nil || o.clusterState != "" || o.clusterToken != "" {
		t.Fatalf("defaults: %+v, %v", o, err)
	}
	o, err = parseFlags([]string{"--initial-cluster-state", "new", "--initial-cluster-token", "prod-eu"}, io.Discard)
	if err != nil || o.clusterState != kahuna.ClusterStateNew || o.clusterToken != "prod-eu" {
		t.Fatalf("new, prod-eu: %+v, %v", o, err)
	}
	if o, err = parseFlags([]string{"--initial-cluster-state", "existing"}, io.Discard); err != nil || o.clusterState != kahuna.ClusterStateExisting {
		t.Fatalf("existing: %+v, %v", o, err)
	}
}

// A node that may not found (a cluster member without
// --initial-cluster-state new, or a single node with existing) refuses a
// fresh data dir at once: exit 1 and one line saying what to do, not a wait
// for a quorum.
func TestFreshDataDirWithoutFoundingExitsOne(t *testing.T) {
	raft1, raft2 := testport.Port(t), testport.Port(t)
	cluster := []string{
		"--initial-cluster", "1=127.0.0.1:" + strconv.Itoa(raft1) + ",2=127.0.0.1:" + strconv.Itoa(raft2),
		"--initial-cluster-endpoints", "1=http://127.0.0.1:1,2=http://127.0.0.1:2",
		"--raft-port", strconv.Itoa(raft1),
	}
	cases := map[string][]string{
		"member, default":         cluster,
		"member, existing":        append([]string{"--initial-cluster-state", "existing"}, cluster...),
		"single node, existing":   {"--initial-cluster-state", "existing", "--raft-port", strconv.Itoa(testport.Port(t))},
		"member, token, existing": append([]string{"--initial-cluster-state", "existing", "--initial-cluster-token", "t"}, cluster...),
	}
	for name, args := range cases {
		dir := t.TempDir()
		args = append([]string{"--http-ports", strconv.Itoa(testport.Port(t)), "--grpc-cleartext-ports", "", "--storage-path", dir, "--log-level", "error"}, args...)
		var stderr bytes.Buffer
		done := make(chan int, 1)
		go func() { done <- run(context.Background(), args, io.Discard, &stderr) }()
		var code int
		select {
		case code = <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: still running after 20s (waiting for a quorum instead of refusing?)", name)
		}
		out := strings.TrimSpace(stderr.String())
		if code != 1 || strings.Count(out, "\n") != 0 || !strings.HasPrefix(out, "kahuna: ") ||
			!strings.Contains(out, dir) || !strings.Contains(out, "--initial-cluster-state new") {
			t.Errorf("%s: exit %d, stderr %q", name, code, out)
		}
	}
}

// TestServeRestartAndShutdown starts the node, locks over REST, shuts it
// down with its context (as a signal would), restarts it on the same data
// and finds the lock still held.
func TestServeRestartAndShutdown(t *testing.T) {
	t.Setenv("KAHUNA_HOME", t.TempDir())
	httpPort, grpcPort, raftPort := testport.Port(t), testport.Port(t), testport.Port(t)
	args := []string{"--http-ports", strconv.Itoa(httpPort), "--grpc-cleartext-ports", strconv.Itoa(grpcPort), "--raft-port", strconv.Itoa(raftPort), "--log-level", "warn"}
	base := "http://127.0.0.1:" + strconv.Itoa(httpPort)

	start := func() (context.CancelFunc, <-chan int, *output) {
		ctx, cancel := context.WithCancel(context.Background())
		out := newOutput()
		done := make(chan int, 1)
		go func() { done <- run(ctx, args, out, io.Discard) }()
		select {
		case <-out.ready:
		case code := <-done:
			t.Fatalf("exited %d before ready: %s", code, out.String())
		case <-time.After(60 * time.Second):
			t.Fatal("not ready after 60s")
		}
		return cancel, done, out
	}
	post := func(path, body string) string {
		t.Helper()
		resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}

	cancel, done, out := start()
	for _, want := range []string{filepath.Join(os.Getenv("KAHUNA_HOME"), "data"), "127.0.0.1:" + strconv.Itoa(httpPort), "127.0.0.1:" + strconv.Itoa(raftPort)} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("startup output lacks %q:\n%s", want, out.String())
		}
	}
	if got := post("/v1/locks/try-lock", `{"resource":"bin/r","owner":"b3duZXI=","expiresMs":600000,"durability":1}`); !strings.Contains(got, `"type":0`) {
		t.Fatalf("try-lock: %s", got)
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), `kahuna_requests_total{durability="persistent",op="TryLock",status="Locked"} 1`) || !strings.Contains(string(metrics), `kahuna_held_locks{durability="persistent"} 1`) {
		t.Fatalf("metrics lack the request or the held lock:\n%s", metrics)
	}
	if code := get(t, base+"/debug/pprof/cmdline"); code != http.StatusNotFound {
		t.Fatalf("/debug/pprof/ without --enable-pprof: %d, want 404", code)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("shutdown exit %d", code)
	}

	args = append(args, "--enable-pprof")
	cancel, done, _ = start()
	defer func() { cancel(); <-done }()
	if got := post("/v1/locks/try-lock", `{"resource":"bin/r","owner":"b3RoZXI=","expiresMs":1000,"durability":1}`); !strings.Contains(got, `"type":1`) {
		t.Fatalf("after restart the lock should be busy: %s", got)
	}
	// --enable-pprof: an execution trace of the running node.
	resp, err = http.Get(base + "/debug/pprof/trace?seconds=0.2")
	if err != nil {
		t.Fatal(err)
	}
	trace, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.HasPrefix(trace, []byte("go 1.")) {
		t.Fatalf("/debug/pprof/trace with --enable-pprof: %d, %.40q", resp.StatusCode, trace)
	}
}

// get returns the status of a GET of url.
func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// -help starts with a usage line and what the command does, then the
// flags, on stdout, and exits 0.
func TestHelpHasUsageLine(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"-help"}, &stdout, &stderr)
	if code != 0 || !strings.HasPrefix(stdout.String(), "Usage: kahuna [flags]\n\nRuns a kahuna lock node") || !strings.Contains(stdout.String(), "-initial-cluster-partitions") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
}
