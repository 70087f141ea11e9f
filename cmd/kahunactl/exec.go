package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/lease"
)

// notifySignals subscribes c to the signals lock -- CMD passes on to CMD
// (and that end a wait for the lock). Tests wrap it to learn when the
// subscription is in place.
var notifySignals = func(c chan<- os.Signal) { signal.Notify(c, syscall.SIGINT, syscall.SIGTERM) }

// waitRound is how long one Acquire waits when lock -- CMD has no --wait
// and waits until interrupted: Acquire is called again after each round.
// A day is well under the longest wait a node accepts (the TTL limit).
const waitRound = 24 * time.Hour

// lockAndRun is lock RESOURCE -- CMD: wait for the lock, run CMD under it
// with the lease kept alive, release it when CMD exits and exit with CMD's
// status; stop CMD if the lock is lost. See the package doc.
func lockAndRun(ctx context.Context, l kahuna.Locker, resource string, argv []string, o options, stdout, stderr io.Writer) int {
	// A CMD that cannot run is said before any lock is taken, with the
	// shell's codes: 127 not found, 126 found but not executable.
	if _, err := exec.LookPath(argv[0]); err != nil {
		fmt.Fprintf(stderr, "kahunactl: lock %s: %s; nothing locked\n", resource, oneLine(err))
		return cannotRun(err)
	}
	sigs := make(chan os.Signal, 8)
	notifySignals(sigs)
	defer signal.Stop(sigs)

	h, sig, err := acquireUntilSignal(ctx, l, resource, o, sigs, stderr)
	resource = lockedName(resource, o)
	if sig != nil {
		if h != nil {
			release(h, o.timeout, stderr)
		}
		fmt.Fprintf(stderr, "kahunactl: lock %s: interrupted by %s while waiting; %s not run\n", resource, signalName(sig), argv[0])
		return 128 + signalNumber(sig)
	}
	if err != nil {
		return acquireFailed(printer{w: stderr}, stderr, resource, o.owner, err)
	}

	alive, stopAlive := context.WithCancel(context.Background())
	defer stopAlive()
	h.KeepAlive(alive, 0) // every third of the TTL
	env := []string{
		"KAHUNA_LOCK_RESOURCE=" + resource,
		"KAHUNA_LOCK_OWNER=" + string(h.Owner()),
		"KAHUNA_FENCING_TOKEN=" + strconv.FormatInt(h.FencingToken(), 10)}
	if mode := lockMode(o); mode != "" {
		env = append(env, "KAHUNA_LOCK_MODE="+mode)
	}
	return runUnder(argv, env, h, "lock "+lease.Excerpt(resource), func() error {
		stopAlive()
		return release(h, o.timeout, stderr)
	}, o, sigs, stdout, stderr)
}

// lockAllAndRun is lock A B ... -- CMD: one session holds every name,
// taken in sorted order (so two commands that lock overlapping sets wait
// for each other instead of deadlocking), each waited for as lock --
// CMD waits for one; CMD runs with them all, the session renews them, and
// CMD is stopped if the session is lost. Closing the session releases
// them all when CMD exits, or when the wait is interrupted.
func lockAllAndRun(ctx context.Context, l kahuna.Locker, names []string, argv []string, o options, stdout, stderr io.Writer) int {
	what := "lock " + strings.Join(excerpts(names), " ")
	if _, err := exec.LookPath(argv[0]); err != nil {
		fmt.Fprintf(stderr, "kahunactl: %s: %s; nothing locked\n", what, oneLine(err))
		return cannotRun(err)
	}
	sigs := make(chan os.Signal, 8)
	notifySignals(sigs)
	defer signal.Stop(sigs)

	sorted := slices.Clone(names)
	slices.Sort(sorted)
	var (
		s      *kahuna.Session
		tokens = map[string]int64{}
		failed string // the name that could not be locked
		err    error
	)
	sig := untilSignal(ctx, sigs, func(ctx context.Context) {
		if s, err = kahuna.NewSession(ctx, l, kahuna.WithTTL(o.ttl), kahuna.WithDurability(o.durability)); err != nil {
			return
		}
		for _, name := range sorted {
			var h *kahuna.Lock
			if h, _, err = acquireUntilSignal(ctx, l, name, o, nil, stderr, kahuna.WithSession(s)); err != nil {
				failed = name
				return
			}
			tokens[name] = h.FencingToken()
		}
	})
	closeSession := func() error {
		if s == nil {
			return nil
		}
		cctx, cancel := context.WithTimeout(context.Background(), o.timeout)
		defer cancel()
		err := s.Close(cctx)
		if err != nil {
			fmt.Fprintf(stderr, "kahunactl: %s: release: %s (the leases end by themselves within --ttl)\n", what, oneLine(err))
		}
		return err
	}
	if sig != nil {
		closeSession()
		fmt.Fprintf(stderr, "kahunactl: %s: interrupted by %s while waiting; %s not run\n", what, signalName(sig), argv[0])
		return 128 + signalNumber(sig)
	}
	if err != nil {
		closeSession()
		if failed == "" {
			fmt.Fprintf(stderr, "kahunactl: %s: session: %s\n", what, printer{endpoints: o.endpoints, timeout: o.timeout, verbose: o.verbose}.errorLine(err))
			return exitError
		}
		return acquireFailed(printer{w: stderr}, stderr, failed, "", err)
	}
	tokenJSON, _ := json.Marshal(tokens)
	env := []string{
		"KAHUNA_LOCK_RESOURCES=" + strings.Join(names, "\n"),
		"KAHUNA_LOCK_OWNER=" + s.ID(),
		"KAHUNA_SESSION_ID=" + s.ID(),
		"KAHUNA_FENCING_TOKENS=" + string(tokenJSON)}
	return runUnder(argv, env, sessionGuard{s}, what, closeSession, o, sigs, stdout, stderr)
}

// sessionGuard is a session as what CMD runs under: lost when its
// Context ends (it ends otherwise only when it is closed, after CMD).
type sessionGuard struct{ *kahuna.Session }

func (g sessionGuard) Lost() <-chan struct{} { return g.Context().Done() }

func excerpts(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = lease.Excerpt(n)
	}
	return out
}

// cannotRun is the shell's exit code for a CMD that exec.LookPath
// refused: 127 not found, 126 found but not executable.
func cannotRun(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return exitNotFound
	}
	return exitCannotRun
}

// guard is what CMD runs under: a Lock or a Leadership.
type guard interface {
	Lost() <-chan struct{}
	Context() context.Context
}

// runUnder runs argv, with env added to kahunactl's environment, while g
// holds: signals from sigs are passed on to CMD; once g is lost CMD gets
// SIGTERM, then SIGKILL after --grace, and the exit code is exitLost;
// else release runs after CMD exits, and the exit code is CMD's status
// (exitLost if release finds g lost). what names g in messages.
func runUnder(argv, env []string, g guard, what string, release func() error, o options, sigs <-chan os.Signal, stdout, stderr io.Writer) int {
	c := exec.Command(argv[0], argv[1:]...)
	c.Env = append(os.Environ(), env...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, stdout, stderr
	if err := c.Start(); err != nil {
		release()
		fmt.Fprintf(stderr, "kahunactl: %s: %s\n", what, oneLine(err))
		return exitError
	}
	exited := make(chan error, 1)
	go func() { exited <- c.Wait() }()
	lost := g.Lost()
	var (
		wasLost bool
		kill    <-chan time.Time
		killer  *time.Timer
	)
	defer func() {
		if killer != nil {
			killer.Stop()
		}
	}()
	for {
		select {
		case s := <-sigs:
			_ = c.Process.Signal(s)
		case <-lost:
			lost, wasLost = nil, true
			<-g.Context().Done() // ends just after Lost closes, with the cause
			fmt.Fprintf(stderr, "kahunactl: %s lost (%s): sent %s SIGTERM, SIGKILL in %v\n",
				what, oneLine(context.Cause(g.Context())), argv[0], o.grace)
			_ = c.Process.Signal(syscall.SIGTERM)
			killer = time.NewTimer(o.grace)
			kill = killer.C
		case <-kill:
			kill = nil
			_ = c.Process.Kill()
		case err := <-exited:
			if wasLost {
				return exitLost
			}
			status := exitStatus(err, stderr, what)
			if errors.Is(release(), kahuna.ErrLockLost) {
				return exitLost
			}
			return status
		}
	}
}

// acquireUntilSignal waits for the lock: for --wait (plus --timeout) if
// given, else until a signal. A signal ends the wait: sig is then the
// signal, and h the lock if it was granted all the same.
func acquireUntilSignal(ctx context.Context, l kahuna.Locker, resource string, o options, sigs <-chan os.Signal, stderr io.Writer, extra ...kahuna.AcquireOption) (h *kahuna.Lock, sig os.Signal, err error) {
	down := &outage{stderr: stderr, what: "lock " + lease.Excerpt(resource), out: printer{endpoints: o.endpoints, timeout: o.timeout, verbose: o.verbose}, after: 2}
	opts := append(acquireOptions(o), kahuna.WithRetryNotice(down.notice))
	opts = append(opts, extra...)
	sig = untilSignal(ctx, sigs, func(ctx context.Context) {
		if o.waitGiven {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, o.timeout+o.wait)
			defer cancel()
		}
		for {
			wait := o.wait
			if !o.waitGiven {
				wait = waitRound
			}
			h, err = take(o)(ctx, l, resource, append(opts, kahuna.WithWait(wait))...)
			if o.waitGiven || !errors.Is(err, kahuna.ErrBusy) || ctx.Err() != nil {
				return
			}
		}
	})
	return h, sig, err
}

// untilSignal runs fn under a context that the first signal from sigs
// ends, and returns that signal (nil if none came before fn returned).
func untilSignal(ctx context.Context, sigs <-chan os.Signal, fn func(context.Context)) os.Signal {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan os.Signal, 1)
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case s := <-sigs:
			got <- s
			cancel()
		case <-stop:
		}
	}()
	fn(ctx)
	close(stop)
	<-watched
	select {
	case s := <-got:
		return s
	default:
		return nil
	}
}

// release unlocks h after CMD, bounded by timeout, and says so if that
// failed: the lease then ends by itself at its deadline.
func release(h *kahuna.Lock, timeout time.Duration, stderr io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := h.Unlock(ctx)
	switch {
	case errors.Is(err, kahuna.ErrLockLost):
		fmt.Fprintf(stderr, "kahunactl: lock %s was lost before the release (%s)\n", h.Resource(), oneLine(err))
	case err != nil:
		fmt.Fprintf(stderr, "kahunactl: release %s: %s (the lease ends by itself by %s)\n",
			h.Resource(), oneLine(err), h.Expires().UTC().Format(time.RFC3339))
	}
	return err
}

// exitStatus is the status a shell would report for CMD.
func exitStatus(err error, stderr io.Writer, what string) int {
	if err == nil {
		return exitOK
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	fmt.Fprintf(stderr, "kahunactl: %s: %s\n", what, strings.TrimSpace(err.Error()))
	return exitError
}

func signalNumber(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return int(n)
	}
	return int(syscall.SIGTERM)
}
