package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	// buildTimeout bounds `go build` (a cold cache compiles every
	// dependency; a warm one only links).
	buildTimeout = 5 * time.Minute
	// readyTimeout bounds a node's start: Open waits up to 30 s for its
	// partitions to be served.
	readyTimeout = 45 * time.Second
	// exitTimeout bounds a node's shutdown after SIGTERM (it gives calls in
	// flight 10 s).
	exitTimeout = 30 * time.Second
	// ctlTimeout bounds one kahunactl run.
	ctlTimeout = 60 * time.Second
)

// moduleRoot is the directory of go.mod above the test's working
// directory (the package directory).
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

// binaries are the built kahuna and kahunactl executables.
type binaries struct {
	root, kahuna, kahunactl string
	env                     []string // added to the nodes' environment
}

// build builds cmd/kahuna and cmd/kahunactl into t.TempDir(), with -race
// when this test runs with -race.
func build(t *testing.T) binaries {
	t.Helper()
	return buildTagged(t, "", "./cmd/kahuna", "./cmd/kahunactl")
}

// buildUnsafe builds a kahuna binary with the kahuna_unsafe tag whose nodes
// run with the protections in knobs switched off (KAHUNA_UNSAFE, see
// unsafe_knobs.go at the module root): the negative controls' binary.
func buildUnsafe(t *testing.T, knobs string) binaries {
	t.Helper()
	b := buildTagged(t, "kahuna_unsafe", "./cmd/kahuna")
	b.env = []string{"KAHUNA_UNSAFE=" + knobs}
	return b
}

// builds are the binaries built so far, by tags and packages: each is
// built once per test binary run (a -race link takes 15-30 s here), into
// a directory TestMain removes.
var builds struct {
	sync.Mutex
	dir  string
	done map[string]binaries
}

func TestMain(m *testing.M) {
	code := m.Run()
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
	}
	os.Exit(code)
}

func buildTagged(t *testing.T, tags string, pkgs ...string) binaries {
	t.Helper()
	if testing.Short() {
		t.Skip("process-level test: builds and runs the binaries")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to build the binaries: %v", err)
	}
	root := moduleRoot(t)
	key := tags + "|" + strings.Join(pkgs, " ")
	builds.Lock()
	defer builds.Unlock()
	if b, ok := builds.done[key]; ok {
		return b
	}
	if builds.dir == "" {
		if builds.dir, err = os.MkdirTemp("", "kahuna-e2e-bin-"); err != nil {
			t.Fatal(err)
		}
		builds.done = map[string]binaries{}
	}
	dir := filepath.Join(builds.dir, strconv.Itoa(len(builds.done)))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	if raceEnabled {
		args = append(args, "-race")
	}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	args = append(args, pkgs...)
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, args...)
	cmd.Dir = root
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("built %s (race=%v, tags %q) in %v", strings.Join(pkgs, " "), raceEnabled, tags, time.Since(start).Round(time.Millisecond))
	b := binaries{root: root, kahuna: filepath.Join(dir, "kahuna"), kahunactl: filepath.Join(dir, "kahunactl")}
	builds.done[key] = b
	return b
}

// procEnv is the environment of the processes the tests start. A binary
// built with -race sleeps a second at exit by default (so other threads can
// report); that would slow every kahunactl run, so it is turned off. A
// race found still makes the process exit 66.
func procEnv() []string {
	env := os.Environ()
	if raceEnabled {
		env = append(env, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	}
	return env
}

// syncBuffer is a bytes.Buffer safe for the process's copying goroutine
// and the test; it signals once a line equal to (or starting with) marker
// has been written.
type syncBuffer struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	marker string
	seen   chan struct{}
	once   sync.Once
}

func newSyncBuffer(marker string) *syncBuffer {
	return &syncBuffer{marker: marker, seen: make(chan struct{})}
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if b.marker != "" {
		for _, l := range strings.Split(b.buf.String(), "\n") {
			if strings.HasPrefix(l, b.marker) {
				b.once.Do(func() { close(b.seen) })
				break
			}
		}
	}
	return len(p), nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// proc is one running kahuna node process.
type proc struct {
	t        *testing.T
	name     string
	cmd      *exec.Cmd
	stdout   *syncBuffer
	stderr   *syncBuffer
	httpBase string // http://127.0.0.1:PORT (REST + gRPC)
	done     chan struct{}
	code     int // valid once done is closed
	waitErr  error
}

// startNode starts the kahuna binary with args. httpPort is the port of
// --http-ports, polled for readiness.
func startNode(t *testing.T, bin binaries, name string, httpPort int, args ...string) *proc {
	t.Helper()
	p := &proc{
		t:        t,
		name:     name,
		cmd:      exec.Command(bin.kahuna, args...),
		stdout:   newSyncBuffer("kahuna node ready"),
		stderr:   newSyncBuffer(""),
		httpBase: "http://127.0.0.1:" + strconv.Itoa(httpPort),
		done:     make(chan struct{}),
	}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	p.cmd.Env = append(procEnv(), bin.env...)
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("%s: start: %v", name, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		p.code = exitCode(p.waitErr)
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s stdout:\n%s\n%s stderr (tail):\n%s", name, p.stdout, name, tail(p.stderr.String(), 40))
		}
	})
	return p
}

// exitCode is a finished command's exit code: -1 if a signal ended it.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitReady waits for the "kahuna node ready" line on stdout, then for
// GET /healthz to answer 200, failing the test if the process exits or the
// deadline passes first.
func (p *proc) waitReady() {
	p.t.Helper()
	if err := p.ready(); err != nil {
		p.t.Fatal(err)
	}
}

// ready is waitReady returning the failure, for use off the test's
// goroutine.
func (p *proc) ready() error {
	deadline := time.Now().Add(readyTimeout)
	select {
	case <-p.stdout.seen:
	case <-p.done:
		return fmt.Errorf("%s exited with %d before it was ready:\n%s", p.name, p.code, tail(p.stderr.String(), 20))
	case <-time.After(time.Until(deadline)):
		return fmt.Errorf("%s: no ready line after %v", p.name, readyTimeout)
	}
	c := &http.Client{Timeout: time.Second}
	for {
		resp, err := c.Get(p.httpBase + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("HTTP %s", resp.Status)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: /healthz not answering 200 after %v: %v", p.name, readyTimeout, err)
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited with %d", p.name, p.code)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// signal sends sig and waits for the process to exit, returning its code.
func (p *proc) signal(sig syscall.Signal) int {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("%s: %v: %v", p.name, sig, err)
	}
	return p.wait()
}

// wait waits for the process to exit and returns its code.
func (p *proc) wait() int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(exitTimeout):
		p.t.Fatalf("%s still running %v after being told to stop", p.name, exitTimeout)
		return 0
	}
}

// ctlResult is one kahunactl run.
type ctlResult struct {
	args           []string
	code           int
	stdout, stderr string
}

func (r ctlResult) String() string {
	return fmt.Sprintf("kahunactl %s: exit %d, stdout %q, stderr %q", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// ctl runs the kahunactl binary.
func ctl(t *testing.T, bin binaries, args ...string) ctlResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ctlTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin.kahunactl, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = procEnv()
	err := cmd.Run()
	r := ctlResult{args: args, code: exitCode(err), stdout: stdout.String(), stderr: stderr.String()}
	if err != nil && r.code == -1 {
		t.Fatalf("%s: %v", r, err)
	}
	return r
}

// want fails the test unless the run exited with code.
func (r ctlResult) want(t *testing.T, code int) ctlResult {
	t.Helper()
	if r.code != code {
		t.Fatalf("want exit %d: %s", code, r)
	}
	return r
}
