package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kahunago/kahuna/internal/testport"
)

// logWatch collects the node's log and tells when a line containing a
// given text has appeared a given number of times.
type logWatch struct {
	mu      sync.Mutex
	buf     strings.Builder
	changed chan struct{} // closed and replaced on every write
}

func newLogWatch() *logWatch { return &logWatch{changed: make(chan struct{})} }

func (w *logWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	close(w.changed)
	w.changed = make(chan struct{})
	return len(p), nil
}

// wait returns once text has been logged n times.
func (w *logWatch) wait(t *testing.T, text string, n int) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		w.mu.Lock()
		got, changed := strings.Count(w.buf.String(), text), w.changed
		w.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("%q not logged %d times after 30s:\n%s", text, n, w.buf.String())
		}
	}
}

func TestAuthTokenFileReloadedOnSIGHUP(t *testing.T) {
	t.Setenv("KAHUNA_HOME", t.TempDir())
	tokenFile := filepath.Join(t.TempDir(), "tokens")
	write := func(s string) {
		if err := os.WriteFile(tokenFile, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("# clients\nalpha\n\nbeta\n")
	httpPort, raftPort := testport.Port(t), testport.Port(t)
	args := []string{"--http-ports", strconv.Itoa(httpPort), "--grpc-cleartext-ports", "", "--raft-port", strconv.Itoa(raftPort), "--auth-token-file", tokenFile}
	base := "http://127.0.0.1:" + strconv.Itoa(httpPort)
	ctx, cancel := context.WithCancel(context.Background())
	out, log := newOutput(), newLogWatch()
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, out, log) }()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("exit %d", code)
		}
	}()
	select {
	case <-out.ready:
	case code := <-done:
		t.Fatalf("exited %d before ready: %s", code, out.String())
	}
	call := func(method, path, token string) int {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(`{"resource":"r","owner":"b3duZXI=","expiresMs":60000,"durability":1}`))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	lock := func(token string) int { return call(http.MethodPost, "/v1/locks/try-lock", token) }
	for tok, want := range map[string]int{"": 401, "gamma": 401, "alpha": 200, "beta": 200} {
		if got := lock(tok); got != want {
			t.Errorf("try-lock with %q: HTTP %d, want %d", tok, got, want)
		}
	}
	for path, want := range map[string]int{"/healthz": 200, "/metrics": 200, "/v1/admin/partitions": 401} {
		if got := call(http.MethodGet, path, ""); got != want {
			t.Errorf("GET %s without a token: HTTP %d, want %d", path, got, want)
		}
	}

	write("gamma\n")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	log.wait(t, "tokens reloaded", 1)
	if lock("alpha") != 401 || lock("gamma") != 200 {
		t.Fatal("the reloaded file is not in force")
	}

	// A bad file keeps the set in force, and the log says why.
	write("# nobody\n")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	log.wait(t, "token reload failed, keeping the old tokens", 1)
	if lock("gamma") != 200 {
		t.Fatal("a failed reload dropped the tokens in force")
	}
}

func TestAuthFlags(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, []byte("# none\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"--metrics-auth"}, 2, "--metrics-auth needs --auth-token-file"},
		{[]string{"--peer-cert", "c.pem"}, 2, "go together"},
		{[]string{"--peer-port", "2074"}, 2, "--peer-port serves mutual TLS"},
		{[]string{"--auth-token-file", empty}, 1, "no tokens"},
		{[]string{"--auth-token-file", empty + ".missing"}, 1, "--auth-token-file"},
	} {
		var stderr strings.Builder
		args := append([]string{"--storage-path", t.TempDir(), "--http-ports", strconv.Itoa(testport.Port(t)), "--grpc-cleartext-ports", ""}, c.args...)
		if code := run(context.Background(), args, io.Discard, &stderr); code != c.code || !strings.Contains(stderr.String(), c.says) {
			t.Errorf("%v: exit %d, %q; want %d saying %q", c.args, code, stderr.String(), c.code, c.says)
		}
	}
}
