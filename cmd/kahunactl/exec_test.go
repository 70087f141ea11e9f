package main

import (
	"bytes"
	"context"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/internal/testport"
)

// output is a writer safe for a child process and the test at once, which
// tells when a line has been written.
type output struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	waits map[string]chan struct{}
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n, err := o.buf.Write(p)
	for s, c := range o.waits {
		if strings.Contains(o.buf.String(), s) {
			close(c)
			delete(o.waits, s)
		}
	}
	return n, err
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// seen is closed once s has been written.
func (o *output) seen(s string) <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := make(chan struct{})
	if strings.Contains(o.buf.String(), s) {
		close(c)
		return c
	}
	if o.waits == nil {
		o.waits = map[string]chan struct{}{}
	}
	o.waits[s] = c
	return c
}

// started is a kahunactl run in the background.
type started struct {
	stdout, stderr *output
	done           chan result
}

func start(args ...string) *started {
	s := &started{stdout: &output{}, stderr: &output{}, done: make(chan result, 1)}
	go func() {
		code := run(context.Background(), args, s.stdout, s.stderr)
		s.done <- result{code, s.stdout.String(), s.stderr.String()}
	}()
	return s
}

// await waits for c, failing the test after d.
func await(t *testing.T, c <-chan struct{}, d time.Duration, what string, s *started) {
	t.Helper()
	select {
	case <-c:
	case r := <-s.done:
		t.Fatalf("kahunactl ended before %s: %s", what, r)
	case <-time.After(d):
		t.Fatalf("no %s after %v: stdout %q, stderr %q", what, d, s.stdout, s.stderr)
	}
}

func (s *started) result(t *testing.T, d time.Duration) result {
	t.Helper()
	select {
	case r := <-s.done:
		return r
	case <-time.After(d):
		t.Fatalf("kahunactl still running after %v: stdout %q, stderr %q", d, s.stdout, s.stderr)
		return result{}
	}
}

// subscribed makes kahunactl's signal subscription tell the test when it
// is in place, so a signal the test sends itself is kahunactl's to handle
// rather than the end of the test binary.
func subscribed(t *testing.T) <-chan struct{} {
	t.Helper()
	ready := make(chan struct{})
	var once sync.Once
	old := notifySignals
	notifySignals = func(c chan<- os.Signal) {
		signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
		once.Do(func() { close(ready) })
	}
	t.Cleanup(func() { notifySignals = old })
	return ready
}

// TestLockRunEnvironment: CMD runs with the lock's resource, owner and
// fencing token in its environment, next to the parent's variables, and
// while it runs the lock is held by that owner.
func TestLockRunEnvironment(t *testing.T) {
	_, ep := startNode(t)
	t.Setenv("KAHUNA_TEST_PARENT", "from the parent")
	script := `echo "$KAHUNA_LOCK_RESOURCE|$KAHUNA_LOCK_OWNER|$KAHUNA_FENCING_TOKEN|$KAHUNA_TEST_PARENT|$1"`
	r := ctl(t, "lock", "run/env", "--owner", "me", "--endpoints", ep, "--", "sh", "-c", script, "sh", "an argument").want(t, exitOK, "lock -- sh")
	if want := "run/env|me|0|from the parent|an argument\n"; r.stdout != want || r.stderr != "" {
		t.Fatalf("CMD saw %s, want stdout %q", r, want)
	}
	// A fresh random owner by default, and the next grant's token.
	r = ctl(t, "lock", "run/env", "--endpoints", ep, "--", "sh", "-c", `echo "$KAHUNA_LOCK_OWNER $KAHUNA_FENCING_TOKEN"`).want(t, exitOK, "second run")
	if f := strings.Fields(r.stdout); len(f) != 2 || len(f[0]) != 32 || f[1] != "1" {
		t.Fatalf("second run: %s, want a 32-hex owner and token 1", r)
	}
}

// TestLockRunHeldWhileRunning: while CMD runs, the lock is held by the
// owner CMD was given (another owner is busy); once CMD exits it is free.
func TestLockRunHeldWhileRunning(t *testing.T) {
	_, ep := startNode(t)
	dir := t.TempDir()
	gate := dir + "/go-on"
	s := start("lock", "run/held", "--owner", "runner", "--endpoints", ep, "--", "sh", "-c",
		`echo ready; while [ ! -e "$1" ]; do sleep 0.02; done; echo done`, "sh", gate)
	await(t, s.stdout.seen("ready\n"), 30*time.Second, "CMD's ready", s)
	r := ctl(t, "get", "run/held", "--endpoints", ep).want(t, exitOK, "get while CMD runs")
	if !strings.HasPrefix(r.stdout, "run/held owned by runner, fencing token 0, ") {
		t.Fatalf("get while CMD runs: %s", r)
	}
	ctl(t, "lock", "run/held", "--owner", "other", "--endpoints", ep).want(t, exitBusy, "another owner while CMD runs")
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r = s.result(t, 30*time.Second).want(t, exitOK, "lock -- sh")
	if r.stdout != "ready\ndone\n" {
		t.Fatalf("CMD output: %s", r)
	}
	ctl(t, "get", "run/held", "--endpoints", ep).want(t, exitLost, "get after CMD exited")
}

// TestLockRunExitStatus: kahunactl exits with CMD's status, releases the
// lock whatever the status (another owner gets it at once, no wait), and
// reports a signal death as a shell does.
func TestLockRunExitStatus(t *testing.T) {
	_, ep := startNode(t)
	for _, c := range []struct {
		script string
		code   int
	}{
		{"exit 0", 0},
		{"exit 7", 7},
		{"exit 1", 1},
		{"kill -TERM $$", 128 + int(syscall.SIGTERM)},
	} {
		r := ctl(t, "lock", "run/status", "--endpoints", ep, "--", "sh", "-c", c.script).want(t, c.code, c.script)
		if r.stdout != "" || r.stderr != "" {
			t.Fatalf("%s: kahunactl printed something: %s", c.script, r)
		}
		ctl(t, "lock", "run/status", "--owner", "next", "--endpoints", ep).want(t, exitOK, "lock after CMD "+c.script)
		ctl(t, "unlock", "run/status", "--owner", "next", "--endpoints", ep).want(t, exitOK, "unlock")
	}
	// A CMD that is not there: 127, as a shell says, and the lock free.
	r := ctl(t, "lock", "run/status", "--endpoints", ep, "--", "/nonexistent/cmd").want(t, exitNotFound, "missing CMD")
	oneStderrLine(t, r, "/nonexistent/cmd")
	ctl(t, "lock", "run/status", "--owner", "next", "--endpoints", ep).want(t, exitOK, "lock after a CMD that did not start")
}

// TestLockRunBusy: with --wait, a lock busy for the whole wait exits 3
// without running CMD; without --wait it waits until the holder lets go.
func TestLockRunBusy(t *testing.T) {
	_, ep := startNode(t)
	ctl(t, "lock", "run/busy", "--owner", "holder", "--ttl", "1m", "--endpoints", ep).want(t, exitOK, "holder")
	r := ctl(t, "lock", "run/busy", "--wait", "200ms", "--endpoints", ep, "--", "sh", "-c", "echo ran").want(t, exitBusy, "busy with --wait")
	if r.stdout != "" || r.stderr != "lock run/busy: busy (held by another owner)\n" {
		t.Fatalf("busy: %s", r)
	}

	// No --wait: it waits until the lock is free, past --timeout (which
	// bounds the calls only): here until the holder's short lease runs out.
	ctl(t, "lock", "run/busy2", "--owner", "holder", "--ttl", "1500ms", "--endpoints", ep).want(t, exitOK, "short holder")
	held := time.Now()
	r = ctl(t, "lock", "run/busy2", "--timeout", "200ms", "--endpoints", ep, "--", "sh", "-c", "echo ran").want(t, exitOK, "waiter")
	if r.stdout != "ran\n" || r.stderr != "" {
		t.Fatalf("waiter: %s", r)
	}
	if took := time.Since(held); took < 1400*time.Millisecond {
		t.Fatalf("CMD ran %v after the holder's 1.5s lease began", took)
	}
}

// TestLockRunCommandNotFound: a CMD that is not there exits 127, as a
// shell does, and no lock is taken for it.
func TestLockRunCommandNotFound(t *testing.T) {
	_, ep := startNode(t)
	r := ctl(t, "lock", "run/missing", "--endpoints", ep, "--", "kahuna-no-such-command-here").want(t, exitNotFound, "missing CMD")
	oneStderrLine(t, r, "lock run/missing: exec: \"kahuna-no-such-command-here\": executable file not found in $PATH; nothing locked")
	ctl(t, "lock", "run/missing", "--endpoints", ep, "--", "/").want(t, exitCannotRun, "a directory as CMD")
	r = ctl(t, "get", "run/missing", "--endpoints", ep).want(t, exitLost, "get")
	if r.stdout != "get run/missing: no such lock (never locked, released or expired)\n" {
		t.Fatalf("the lock was taken for a CMD that could not run: %s", r)
	}
}

// TestLockRunInterruptedWhileWaiting: a signal while waiting for the lock
// ends the wait; CMD never runs; the exit code is 128+signal.
func TestLockRunInterruptedWhileWaiting(t *testing.T) {
	_, ep := startNode(t)
	ctl(t, "lock", "run/int", "--owner", "holder", "--ttl", "1m", "--endpoints", ep).want(t, exitOK, "holder")
	ready := subscribed(t)
	s := start("lock", "run/int", "--endpoints", ep, "--", "sh", "-c", "echo ran")
	await(t, ready, 30*time.Second, "the signal subscription", s)
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	r := s.result(t, 30*time.Second).want(t, 128+int(syscall.SIGINT), "interrupted waiter")
	if r.stdout != "" {
		t.Fatalf("CMD ran: %s", r)
	}
	oneStderrLine(t, r, "interrupted by SIGINT while waiting; sh not run")
	r = ctl(t, "get", "run/int", "--endpoints", ep).want(t, exitOK, "get")
	if !strings.HasPrefix(r.stdout, "run/int owned by holder,") {
		t.Fatalf("after the interrupted wait: %s", r)
	}
}

// TestLockRunForwardsSignals: SIGTERM sent to kahunactl reaches CMD;
// kahunactl exits with CMD's status and releases the lock.
func TestLockRunForwardsSignals(t *testing.T) {
	_, ep := startNode(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			subscribed(t)
			s := start("lock", "run/sig", "--endpoints", ep, "--", "sh", "-c",
				`trap 'echo "got $1"; exit 7' TERM INT; echo ready; while :; do sleep 0.02; done`, "sh", sig.String())
			// CMD starts after kahunactl subscribed: the signal is kahunactl's.
			await(t, s.stdout.seen("ready\n"), 30*time.Second, "CMD's ready", s)
			if err := syscall.Kill(os.Getpid(), sig); err != nil {
				t.Fatal(err)
			}
			r := s.result(t, 30*time.Second).want(t, 7, "CMD's status after the trap")
			if r.stdout != "ready\ngot "+sig.String()+"\n" || r.stderr != "" {
				t.Fatalf("output: %s", r)
			}
			ctl(t, "lock", "run/sig", "--owner", "next", "--endpoints", ep).want(t, exitOK, "lock after CMD exited")
			ctl(t, "unlock", "run/sig", "--owner", "next", "--endpoints", ep).want(t, exitOK, "unlock")
		})
	}
}

// TestLockRunKeepsAlive: a CMD that outlives the TTL keeps the lock: the
// lease is extended while it runs.
func TestLockRunKeepsAlive(t *testing.T) {
	_, ep := startNode(t)
	dir := t.TempDir()
	gate := dir + "/go-on"
	s := start("lock", "run/alive", "--owner", "runner", "--ttl", "600ms", "--endpoints", ep, "--", "sh", "-c",
		`echo ready; while [ ! -e "$1" ]; do sleep 0.02; done`, "sh", gate)
	await(t, s.stdout.seen("ready\n"), 30*time.Second, "CMD's ready", s)
	// Three TTLs later the lock is still the runner's, with the same token.
	deadline := time.Now().Add(1800 * time.Millisecond)
	for time.Now().Before(deadline) {
		r := ctl(t, "get", "run/alive", "--endpoints", ep).want(t, exitOK, "get while CMD runs")
		if !strings.HasPrefix(r.stdout, "run/alive owned by runner, fencing token 0, ") {
			t.Fatalf("while CMD runs: %s", r)
		}
		ctl(t, "lock", "run/alive", "--owner", "other", "--endpoints", ep).want(t, exitBusy, "another owner while CMD runs")
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s.result(t, 30*time.Second).want(t, exitOK, "lock -- sh")
}

// TestLockRunLost: the node goes away while CMD runs (as a crash or a
// network partition would do): keep-alive cannot extend, the lease runs
// out, and kahunactl sends CMD SIGTERM and exits 4. A CMD that ignores
// SIGTERM is killed after --grace.
func TestLockRunLost(t *testing.T) {
	for _, c := range []struct {
		name, trap, says string
	}{
		{"stops on SIGTERM", `trap 'echo term; exit 0' TERM`, "ready\nterm\n"},
		{"ignores SIGTERM", `trap '' TERM`, "ready\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			n, ep := startNode(t)
			s := start("lock", "run/lost", "--ttl", "1s", "--grace", "300ms", "--timeout", "2s", "--endpoints", ep, "--", "sh", "-c",
				c.trap+`; echo ready; while :; do sleep 0.02; done`)
			await(t, s.stdout.seen("ready\n"), 30*time.Second, "CMD's ready", s)
			closed := make(chan error, 1)
			go func() { closed <- n.Close() }()
			r := s.result(t, 30*time.Second).want(t, exitLost, "lock lost")
			if r.stdout != c.says {
				t.Fatalf("CMD output %q, want %q (%s)", r.stdout, c.says, r)
			}
			oneStderrLine(t, r, "lock run/lost lost (kahuna: lock lost")
			if !strings.Contains(r.stderr, "sent sh SIGTERM, SIGKILL in 300ms") {
				t.Fatalf("stderr: %s", r)
			}
			if err := <-closed; err != nil {
				t.Fatalf("close: %v", err)
			}
		})
	}
}

// TestWaitSaysWhenNodesDoNotAnswer: a lock --wait whose node goes down
// while it waits says so once (not at every retry), and once more when a
// node answers again; it then gets the lock.
func TestWaitSaysWhenNodesDoNotAnswer(t *testing.T) {
	addr := testport.Addr(t)
	first, err := kahuna.Open(kahuna.Config{ListenAddress: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	ctl(t, "lock", "outage/r", "--owner", "holder", "--ttl", "1m", "--endpoints", addr).want(t, exitOK, "holder")
	s := start("lock", "outage/r", "--wait", "1m", "--ttl", "10s", "--endpoints", addr)
	await(t, waiting(first), 30*time.Second, "the waiter queued on the node", s)
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	await(t, s.stderr.seen("no answer from the nodes"), 30*time.Second, "word of the outage", s)
	second, err := kahuna.Open(kahuna.Config{ListenAddress: addr}) // in memory: the lock is free there
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	r := s.result(t, 60*time.Second).want(t, exitOK, "lock once a node answers again")
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "kahunactl: lock outage/r: no answer from the nodes (") || !strings.HasSuffix(lines[0], "); retrying") ||
		lines[1] != "kahunactl: lock outage/r: the nodes answer again" {
		t.Fatalf("stderr: want the outage said once and the recovery once, got %q", r.stderr)
	}
	if !lockedText.MatchString(r.stdout) {
		t.Fatalf("stdout %q", r.stdout)
	}
}

// waiting is closed once n has a Lock call waiting in a queue.
func waiting(n *kahuna.Node) <-chan struct{} {
	c := make(chan struct{})
	go func() {
		defer close(c)
		for n.Stats().Waiters == 0 {
			time.Sleep(5 * time.Millisecond) // Stats is the only view of the queue
		}
	}()
	return c
}

// TestLockSeveralUnderOneSession: lock A B -- CMD holds both names in one
// session while CMD runs (CMD sees the names, the session and each
// token), waits for a busy one, and releases them all when CMD exits.
func TestLockSeveralUnderOneSession(t *testing.T) {
	_, ep := startNode(t)
	ctl(t, "lock", "multi/b", "--owner", "holder", "--ttl", "1s", "--endpoints", ep).want(t, exitOK, "b's holder")
	dir := t.TempDir()
	gate := dir + "/go-on"
	s := start("lock", "multi/b", "multi/a", "--endpoints", ep, "--", "sh", "-c",
		`printf '%s|%s|%s\n' "$KAHUNA_LOCK_RESOURCES" "$KAHUNA_FENCING_TOKENS" "$KAHUNA_SESSION_ID"; while [ ! -e "$1" ]; do sleep 0.02; done`, "sh", gate)
	await(t, s.stdout.seen("}|"), 30*time.Second, "CMD's line", s)
	line := strings.TrimSpace(s.stdout.String())
	parts := strings.Split(line, "|")
	if len(parts) != 3 || parts[0] != "multi/b\nmulti/a" || parts[1] != `{"multi/a":0,"multi/b":1}` || len(parts[2]) != 32 {
		t.Fatalf("CMD saw %q, want both names, a's token 0 and b's 1 (after the holder's), and a session ID", line)
	}
	for _, r := range []string{"multi/a", "multi/b", "session:" + parts[2]} {
		got := ctl(t, "get", r, "--endpoints", ep).want(t, exitOK, "get "+r+" while CMD runs")
		if !strings.Contains(got.stdout, "owned by "+parts[2]) {
			t.Fatalf("get %s while CMD runs: %s", r, got)
		}
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := s.result(t, 30*time.Second).want(t, exitOK, "lock a b -- sh"); r.stderr != "" {
		t.Fatalf("kahunactl said: %s", r)
	}
	for _, r := range []string{"multi/a", "multi/b", "session:" + parts[2]} {
		ctl(t, "get", r, "--endpoints", ep).want(t, exitLost, "get "+r+" after CMD exited")
	}
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"lock", "multi/a", "multi/b"}, `unexpected argument "multi/b"`},
		{[]string{"lock", "multi/a", "multi/a", "--", "true"}, "named twice"},
		{[]string{"lock", "multi/a", "multi/b", "--owner", "me", "--", "true"}, "--owner does not go with several RESOURCEs"},
	} {
		args := append([]string{c.args[0], "--endpoints", ep}, c.args[1:]...)
		oneStderrLine(t, ctl(t, args...).want(t, exitUsage, strings.Join(c.args, " ")), c.says)
	}
}
