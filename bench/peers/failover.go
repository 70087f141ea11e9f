package peers

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kahunago/kahuna"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// The failover benchmark: how long an election has no leader after its
// leader's process is killed with SIGKILL, for kahuna and etcd, each with
// a server process of its own started for the run.
//
// Each round pauses for a random time (uniform in [0, startJitter)), then
// starts a leader candidate as a child process (this program re-executed
// in its candidate mode, FailoverCandidate), which campaigns and writes a
// line on its stdout the moment it is elected; the parent then campaigns
// on the same election (it waits behind the leader), lets a random time
// pass (uniform in [TTL/2, 3·TTL/2) from the election report), kills the
// child with SIGKILL and measures, on its monotonic clock, the time from
// just before the kill to the return of its own Campaign.
//
// The two random times make the rounds sample every phase of what
// bounds a failover. The kill window is TTL long: three of a kahuna
// leader's renewal periods (TTL/3), and, at a TTL of 2 s, two of an etcd
// session's (TTL/3, which its client's keep-alive loop, looking every
// 500 ms, rounds up to 1 s), so the kill falls at a uniformly random phase
// of either's renewals. The pause before each round breaks a phase lock:
// etcd looks for expired leases every 500 ms, a round starts right after
// the previous one's failover, that is right after one of those checks,
// and a candidate takes about the same time to start and be elected each
// round, so without the pause every round's lease would end at the same
// point of etcd's 500 ms cycle.
//
// A kahuna candidate also writes the deadline of its Leadership's Context
// when elected and after every renewal that moved it (polled every
// deadlinePoll). The deadline is a time.Time on the monotonic clock; what
// is written is its wall-clock reading in Unix nanoseconds, which Go
// derives from the same time.Now (wall reading at the renewal's send plus
// TTL minus the safety margin). The parent takes its election instant with
// time.Now().UnixNano() too: both are this machine's wall clock, which is
// what makes them comparable across the two processes. A round checks
// that the last deadline the killed leader wrote precedes the new leader's
// election: the old leader's own view of its leadership had ended before
// anyone else led.

// FailoverTTL is the election TTL the benchmark uses unless told
// otherwise: etcd's smallest lease with its default timing (1.5 s,
// rounded up to whole seconds).
const FailoverTTL = 2 * time.Second

// startJitter bounds the random pause before each round: etcd's lease
// expiry check period.
const startJitter = 500 * time.Millisecond

// deadlinePoll is how often a kahuna candidate looks for a moved deadline.
const deadlinePoll = 5 * time.Millisecond

// FailoverConfig configures RunFailover.
type FailoverConfig struct {
	// Systems: "kahuna:persistent", "kahuna:ephemeral", "etcd", run one
	// after another in this order.
	Systems []string
	Rounds  int
	TTL     time.Duration // whole seconds for etcd
	// Bound is how long after the kill the waiting candidate must be
	// elected (default 3×TTL); a round past it fails.
	Bound time.Duration
	// KahunaServer and EtcdServer are the server binaries started for the
	// run (looked up on PATH).
	KahunaServer, EtcdServer string
	// Candidate is the command that runs FailoverCandidate: the
	// candidate's flags are appended to it.
	Candidate []string
	Seed      uint64               // of the kill delays
	Progress  io.Writer            // one line per round (nil: none)
	Logf      func(string, ...any) // the servers' start and stop (nil: none)
}

// FailoverRound is one round's outcome.
type FailoverRound struct {
	// Failover is the time from just before the kill to the return of
	// the waiting candidate's Campaign (parent's monotonic clock).
	Failover time.Duration
	// KillDelay is the time from the leader's election report to the kill.
	KillDelay time.Duration
	// OldEpoch and NewEpoch are the killed leader's term and its
	// successor's (kahuna: the epoch; etcd: the leader key's create
	// revision).
	OldEpoch, NewEpoch int64
	// Elected is the successor's election instant (wall clock).
	Elected time.Time
	// Deadlines is how many deadlines the killed kahuna leader wrote
	// (election and renewals); LastDeadline is the last of them (wall
	// clock; zero for etcd, whose candidate has none to write).
	Deadlines    int
	LastDeadline time.Time
	// Err says why the round failed (nil: it did not).
	Err error
}

// DeadlineBefore reports whether the killed leader's last deadline
// preceded its successor's election (false when there is no deadline).
func (r FailoverRound) DeadlineBefore() bool {
	return !r.LastDeadline.IsZero() && r.LastDeadline.UnixNano() < r.Elected.UnixNano()
}

// FailoverResult is one system's rounds.
type FailoverResult struct {
	System string
	// Deadlines: the system's candidates write their leadership deadline
	// (kahuna), and each round checks it.
	Deadlines bool
	Rounds    []FailoverRound
	// Err: the system could not be set up (its server did not start).
	Err error
}

// Failed counts the rounds that failed.
func (r FailoverResult) Failed() int {
	n := 0
	for _, rd := range r.Rounds {
		if rd.Err != nil {
			n++
		}
	}
	return n
}

// electorate is one system under test, as the parent sees it.
type electorate interface {
	// args are the candidate child's flags.
	args() []string
	// candidate prepares the parent's waiting candidate.
	candidate(ctx context.Context) (waiter, error)
	close() error
}

// waiter is the parent's candidate of one round.
type waiter interface {
	campaign(ctx context.Context) (epoch int64, err error)
	resign(ctx context.Context) error
}

// RunFailover runs cfg.Rounds rounds for each system in turn. A system
// whose server cannot start has Err set; its rounds are not run.
func RunFailover(ctx context.Context, cfg FailoverConfig) []FailoverResult {
	if cfg.TTL <= 0 {
		cfg.TTL = FailoverTTL
	}
	if cfg.Bound <= 0 {
		cfg.Bound = 3 * cfg.TTL
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	var out []FailoverResult
	for _, name := range cfg.Systems {
		res := FailoverResult{System: name, Deadlines: strings.HasPrefix(name, "kahuna")}
		if len(cfg.Candidate) == 0 {
			res.Err = errors.New("no candidate command")
			out = append(out, res)
			continue
		}
		sys, err := openElectorate(ctx, name, cfg)
		if err != nil {
			res.Err = err
			out = append(out, res)
			continue
		}
		for i := range cfg.Rounds {
			if ctx.Err() != nil {
				break
			}
			pause := time.Duration(rng.Int64N(int64(startJitter)))
			delay := cfg.TTL/2 + time.Duration(rng.Int64N(int64(cfg.TTL)))
			select {
			case <-time.After(pause):
			case <-ctx.Done():
				continue
			}
			r := failoverRound(ctx, sys, cfg, delay, res.Deadlines)
			res.Rounds = append(res.Rounds, r)
			fmt.Fprintf(cfg.Progress, "%-18s round %*d/%d  %s\n", name, len(strconv.Itoa(cfg.Rounds)), i+1, cfg.Rounds, r.line())
		}
		if err := sys.close(); err != nil {
			cfg.Logf("%s: close: %v", name, err)
		}
		out = append(out, res)
	}
	return out
}

// line is a round's progress line.
func (r FailoverRound) line() string {
	if r.Err != nil {
		return "FAILED: " + r.Err.Error()
	}
	s := fmt.Sprintf("failover %s  term %d -> %d  killed %s after election", seconds(r.Failover), r.OldEpoch, r.NewEpoch, seconds(r.KillDelay))
	if !r.LastDeadline.IsZero() {
		s += fmt.Sprintf("  old leader's last deadline %s before the new election (%d written)",
			millis(time.Duration(r.Elected.UnixNano()-r.LastDeadline.UnixNano())), r.Deadlines)
	}
	return s
}

func openElectorate(ctx context.Context, name string, cfg FailoverConfig) (electorate, error) {
	switch name {
	case "kahuna:persistent", "kahuna:ephemeral":
		d := kahuna.Persistent
		if name == "kahuna:ephemeral" {
			d = kahuna.Ephemeral
		}
		srv, c, grpcEndpoint, err := startKahunaClient(ctx, cfg.KahunaServer)
		if err != nil {
			return nil, err
		}
		cfg.Logf("%s: kahuna started at %s (dir %s)", name, grpcEndpoint, srv.dir)
		return &kahunaElectorate{srv: srv, c: c, endpoint: grpcEndpoint, d: d, ttl: cfg.TTL,
			name: "failover-" + strings.ToLower(d.String())}, nil
	case "etcd":
		if cfg.TTL%time.Second != 0 {
			return nil, fmt.Errorf("etcd: TTL %v is not whole seconds", cfg.TTL)
		}
		srv, cli, endpoint, err := startEtcdClient(ctx, cfg.EtcdServer)
		if err != nil {
			return nil, err
		}
		cfg.Logf("%s: etcd started at %s (dir %s)", name, endpoint, srv.dir)
		return &etcdElectorate{srv: srv, cli: cli, endpoint: endpoint, ttl: int(cfg.TTL / time.Second),
			prefix: etcdPrefix + "election/failover"}, nil
	}
	return nil, fmt.Errorf("unknown system %q (kahuna:persistent, kahuna:ephemeral, etcd)", name)
}

// candidateLine is one line of a candidate child: elected (epoch, the
// election instant, and for kahuna the deadline), deadline (moved by a
// renewal), or lost (the child's leadership ended before the kill).
type candidateLine struct {
	kind     string
	epoch    int64
	at       time.Time // elected: wall clock
	deadline time.Time // wall clock; zero if none
	text     string
}

func parseCandidateLine(s string) (candidateLine, error) {
	f := strings.Fields(s)
	l := candidateLine{text: s}
	if len(f) == 0 {
		return l, errors.New("empty line")
	}
	l.kind = f[0]
	num := func(i int) (int64, error) {
		if i >= len(f) {
			return 0, fmt.Errorf("line %q: field %d missing", s, i)
		}
		return strconv.ParseInt(f[i], 10, 64)
	}
	var err error
	switch l.kind {
	case "elected": // elected EPOCH WALLNS [DEADLINENS]
		var at int64
		if l.epoch, err = num(1); err != nil {
			return l, err
		}
		if at, err = num(2); err != nil {
			return l, err
		}
		l.at = time.Unix(0, at)
		if len(f) > 3 {
			dl, err := num(3)
			if err != nil {
				return l, err
			}
			l.deadline = time.Unix(0, dl)
		}
	case "deadline": // deadline DEADLINENS
		dl, err := num(1)
		if err != nil {
			return l, err
		}
		l.deadline = time.Unix(0, dl)
	case "lost":
	default:
		return l, fmt.Errorf("unknown line %q", s)
	}
	return l, nil
}

// lockedBuffer collects a child's stderr.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.TrimSpace(b.b.String())
}

// campaignResult is the parent candidate's Campaign outcome.
type campaignResult struct {
	epoch int64
	at    time.Time // just after Campaign returned (monotonic and wall)
	err   error
}

// startBound bounds a round's setup: the child's start and election.
const startBound = 20 * time.Second

// failoverRound runs one round: see RunFailover.
func failoverRound(ctx context.Context, sys electorate, cfg FailoverConfig, killDelay time.Duration, deadlines bool) (r FailoverRound) {
	r.KillDelay = killDelay
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()

	w, err := sys.candidate(rctx)
	if err != nil {
		r.Err = fmt.Errorf("parent candidate: %w", err)
		return r
	}
	// The parent's campaign runs in a goroutine (below); once it is over,
	// the parent resigns (etcd: ends its session), before the next round.
	var campaignDone chan struct{}
	defer func() {
		cancel()
		if campaignDone != nil {
			<-campaignDone
		}
		sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer scancel()
		if err := w.resign(sctx); err != nil && r.Err == nil {
			r.Err = fmt.Errorf("parent candidate: resign: %w", err)
		}
	}()

	args := append(slices.Clone(cfg.Candidate[1:]), sys.args()...)
	cmd := exec.Command(cfg.Candidate[0], args...)
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe() // the child leaves when it closes: the parent is gone
	if err != nil {
		r.Err = err
		return r
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		r.Err = err
		return r
	}
	if err := cmd.Start(); err != nil {
		r.Err = fmt.Errorf("start candidate: %w", err)
		return r
	}
	lines := make(chan candidateLine, 1024)
	readErr := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		var err error
		for sc.Scan() {
			l, perr := parseCandidateLine(sc.Text())
			if perr != nil {
				err = errors.Join(err, perr)
				continue
			}
			lines <- l
		}
		close(lines)
		readErr <- errors.Join(err, sc.Err())
	}()
	killed := false
	defer func() {
		if !killed {
			_ = cmd.Process.Kill()
		}
		for range lines { // drain to EOF before Wait closes the pipe
		}
		err := cmd.Wait()
		if rerr := <-readErr; rerr != nil && r.Err == nil {
			r.Err = fmt.Errorf("candidate output: %w", rerr)
		}
		_ = stdin.Close()
		if !killed && r.Err == nil {
			r.Err = fmt.Errorf("candidate exited (%v): %s", err, stderr.String())
		}
	}()
	childGone := func(what string) error {
		return fmt.Errorf("candidate %s before the kill: %s", what, stderr.String())
	}

	// The child is elected.
	var first candidateLine
	select {
	case l, ok := <-lines:
		if !ok {
			r.Err = childGone("exited")
			return r
		}
		if l.kind != "elected" {
			r.Err = fmt.Errorf("candidate's first line %q, want elected", l.text)
			return r
		}
		first = l
	case <-time.After(startBound):
		r.Err = fmt.Errorf("candidate not elected within %v: %s", startBound, stderr.String())
		return r
	case <-ctx.Done():
		r.Err = ctx.Err()
		return r
	}
	reported := time.Now()
	r.OldEpoch = first.epoch
	r.LastDeadline = first.deadline
	if !first.deadline.IsZero() {
		r.Deadlines = 1
	}
	if deadlines && first.deadline.IsZero() {
		r.Err = errors.New("the kahuna candidate wrote no deadline")
		return r
	}

	// The parent waits behind it.
	won := make(chan campaignResult, 1)
	campaignDone = make(chan struct{})
	go func() {
		defer close(campaignDone)
		epoch, err := w.campaign(rctx)
		won <- campaignResult{epoch: epoch, at: time.Now(), err: err}
	}()
	note := func(l candidateLine) error {
		switch l.kind {
		case "deadline":
			r.Deadlines++
			r.LastDeadline = l.deadline
		case "lost":
			return childGone("lost its leadership (" + l.text + ")")
		default:
			return fmt.Errorf("unexpected candidate line %q", l.text)
		}
		return nil
	}

	// Until the kill: the leader renews; nobody else may be elected.
	kill := time.NewTimer(time.Until(reported.Add(killDelay)))
	defer kill.Stop()
	for waiting := true; waiting; {
		select {
		case l, ok := <-lines:
			if !ok {
				r.Err = childGone("exited")
				return r
			}
			if err := note(l); err != nil {
				r.Err = err
				return r
			}
		case c := <-won:
			if c.err != nil {
				r.Err = fmt.Errorf("parent campaign before the kill: %w", c.err)
			} else {
				r.Err = fmt.Errorf("parent elected (epoch %d) while the leader (epoch %d) was alive", c.epoch, r.OldEpoch)
			}
			return r
		case <-kill.C:
			waiting = false
		case <-ctx.Done():
			r.Err = ctx.Err()
			return r
		}
	}
	killAt := time.Now()
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		r.Err = fmt.Errorf("kill: %w", err)
		return r
	}
	killed = true
	// Every line the child wrote before it died: its last deadline.
	for l := range lines {
		if err := note(l); err != nil {
			r.Err = err
			return r
		}
	}

	var c campaignResult
	select {
	case c = <-won:
	case <-time.After(time.Until(killAt.Add(cfg.Bound))):
		r.Err = fmt.Errorf("no election within %v of the kill", cfg.Bound)
		return r
	}
	if c.err != nil {
		r.Err = fmt.Errorf("parent campaign: %w", c.err)
		return r
	}
	r.Failover, r.NewEpoch, r.Elected = c.at.Sub(killAt), c.epoch, c.at
	switch {
	case r.NewEpoch <= r.OldEpoch:
		r.Err = fmt.Errorf("new epoch %d not above the killed leader's %d", r.NewEpoch, r.OldEpoch)
	case deadlines && !r.DeadlineBefore():
		r.Err = fmt.Errorf("the killed leader's last deadline %s is not before the new election %s",
			r.LastDeadline.Format(time.RFC3339Nano), r.Elected.Format(time.RFC3339Nano))
	}
	return r
}

// kahunaElectorate is a kahuna server process and the parent's client.
type kahunaElectorate struct {
	srv      *server
	c        *kahuna.Client
	endpoint string
	d        kahuna.Durability
	ttl      time.Duration
	name     string
}

func (k *kahunaElectorate) args() []string {
	return []string{"--system", "kahuna", "--endpoint", k.endpoint, "--name", k.name,
		"--durability", strings.ToLower(k.d.String()), "--ttl", k.ttl.String()}
}

func (k *kahunaElectorate) candidate(context.Context) (waiter, error) {
	return &kahunaWaiter{k: k}, nil
}

func (k *kahunaElectorate) close() error { return errors.Join(k.c.Close(), k.srv.stop()) }

type kahunaWaiter struct {
	k  *kahunaElectorate
	mu sync.Mutex
	ld *kahuna.Leadership
}

func (w *kahunaWaiter) campaign(ctx context.Context) (int64, error) {
	ld, err := kahuna.Campaign(ctx, w.k.c, w.k.name, []byte("parent"), kahuna.WithTTL(w.k.ttl), kahuna.WithDurability(w.k.d))
	if err != nil {
		return 0, err
	}
	w.mu.Lock()
	w.ld = ld
	w.mu.Unlock()
	return ld.Epoch(), nil
}

func (w *kahunaWaiter) resign(ctx context.Context) error {
	w.mu.Lock()
	ld := w.ld
	w.mu.Unlock()
	if ld == nil {
		return nil
	}
	return ld.Resign(ctx)
}

// etcdElectorate is an etcd server process and the parent's client.
type etcdElectorate struct {
	srv      *server
	cli      *clientv3.Client
	endpoint string
	ttl      int // seconds
	prefix   string
}

func (e *etcdElectorate) args() []string {
	return []string{"--system", "etcd", "--endpoint", e.endpoint, "--name", e.prefix,
		"--ttl", (time.Duration(e.ttl) * time.Second).String()}
}

func (e *etcdElectorate) candidate(ctx context.Context) (waiter, error) {
	s, err := concurrency.NewSession(e.cli, concurrency.WithTTL(e.ttl), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, err
	}
	return &etcdWaiter{s: s, el: concurrency.NewElection(s, e.prefix)}, nil
}

func (e *etcdElectorate) close() error { return errors.Join(e.cli.Close(), e.srv.stop()) }

type etcdWaiter struct {
	s  *concurrency.Session
	el *concurrency.Election
}

func (w *etcdWaiter) campaign(ctx context.Context) (int64, error) {
	if err := w.el.Campaign(ctx, "parent"); err != nil {
		return 0, err
	}
	return w.el.Rev(), nil
}

// resign closes the session: it revokes the lease, and the key with it.
func (w *etcdWaiter) resign(context.Context) error { return w.s.Close() }

// FailoverCandidate is the candidate child's program: it campaigns on the
// election its flags name and writes to stdout, one line each:
//
//	elected EPOCH WALLNS [DEADLINENS]   when elected (kahuna: the Leadership's deadline)
//	deadline DEADLINENS                 kahuna: a renewal moved the deadline
//	lost CAUSE                          the leadership ended (it should not: it is killed)
//
// (instants in Unix nanoseconds of the wall clock), then renews until it
// is killed, or resigns and exits when stdin closes (the parent is gone).
// It returns the exit code.
func FailoverCandidate(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("candidate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	system := fs.String("system", "", "kahuna or etcd")
	endpoint := fs.String("endpoint", "", "the server's client URL")
	name := fs.String("name", "", "the election (etcd: its key prefix)")
	durability := fs.String("durability", "persistent", "kahuna: persistent or ephemeral")
	ttl := fs.Duration("ttl", FailoverTTL, "the leadership's TTL (etcd: whole seconds)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // stdin closes when the parent goes
		_, _ = io.Copy(io.Discard, stdin)
		cancel()
	}()
	out := bufio.NewWriter(stdout)
	emit := func(format string, a ...any) {
		fmt.Fprintf(out, format+"\n", a...)
		_ = out.Flush()
	}
	var err error
	switch *system {
	case "kahuna":
		err = kahunaCandidate(ctx, *endpoint, *name, *durability, *ttl, emit)
	case "etcd":
		err = etcdCandidate(ctx, *endpoint, *name, *ttl, emit)
	default:
		err = fmt.Errorf("--system %q: want kahuna or etcd", *system)
	}
	if err != nil {
		fmt.Fprintln(stderr, "candidate:", err)
		return 1
	}
	return 0
}

func kahunaCandidate(ctx context.Context, endpoint, name, durability string, ttl time.Duration, emit func(string, ...any)) error {
	var d kahuna.Durability
	switch durability {
	case "persistent":
		d = kahuna.Persistent
	case "ephemeral":
		d = kahuna.Ephemeral
	default:
		return fmt.Errorf("--durability %q", durability)
	}
	c, err := kahuna.Dial(ctx, []string{endpoint})
	if err != nil {
		return err
	}
	defer c.Close()
	ld, err := kahuna.Campaign(ctx, c, name, []byte(strconv.Itoa(os.Getpid())), kahuna.WithTTL(ttl), kahuna.WithDurability(d))
	if err != nil {
		return err
	}
	at := time.Now().UnixNano()
	dl, _ := ld.Context().Deadline()
	emit("elected %d %d %d", ld.Epoch(), at, dl.UnixNano())
	t := time.NewTicker(deadlinePoll)
	defer t.Stop()
	for {
		select {
		case <-ld.Context().Done():
			emit("lost %v", context.Cause(ld.Context()))
			return nil
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return ld.Resign(rctx)
		case <-t.C:
			if now, _ := ld.Context().Deadline(); !now.Equal(dl) {
				dl = now
				emit("deadline %d", dl.UnixNano())
			}
		}
	}
}

func etcdCandidate(ctx context.Context, endpoint, prefix string, ttl time.Duration, emit func(string, ...any)) error {
	if ttl%time.Second != 0 || ttl <= 0 {
		return fmt.Errorf("--ttl %v: etcd leases are whole seconds", ttl)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(ttl/time.Second)))
	if err != nil {
		return err
	}
	defer s.Close()
	el := concurrency.NewElection(s, prefix)
	if err := el.Campaign(ctx, strconv.Itoa(os.Getpid())); err != nil {
		return err
	}
	emit("elected %d %d", el.Rev(), time.Now().UnixNano())
	select {
	case <-s.Done():
		emit("lost session-done")
		return nil
	case <-ctx.Done():
		return nil // the deferred Close revokes the lease
	}
}

// PrintFailover writes the results as a Markdown table, one row per
// system: rounds, failover p50/p90/p99/max/min, whether the p99 is within
// TTL + 0.5 s, and, for kahuna, in how many rounds the killed leader's
// last deadline preceded its successor's election.
func PrintFailover(w io.Writer, ttl time.Duration, results []FailoverResult) {
	target := ttl + 500*time.Millisecond
	fmt.Fprintf(w, "| system | rounds | failed | failover p50 | p90 | p99 | max | min | p99 ≤ TTL + 0.5 s (%s) | killed leader's last deadline before the new election |\n", seconds(target))
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
	for _, res := range results {
		name := strings.Replace(res.System, ":", ", ", 1)
		if res.Err != nil {
			fmt.Fprintf(w, "| %s | | | FAILED: %s | | | | | | |\n", name, res.Err)
			continue
		}
		var ds []time.Duration
		before, slack := 0, time.Duration(math.MaxInt64)
		for _, r := range res.Rounds {
			if r.Err != nil {
				continue
			}
			ds = append(ds, r.Failover)
			if r.DeadlineBefore() {
				before++
				slack = min(slack, time.Duration(r.Elected.UnixNano()-r.LastDeadline.UnixNano()))
			}
		}
		if len(ds) == 0 {
			fmt.Fprintf(w, "| %s | %d | %d | | | | | | | |\n", name, len(res.Rounds), res.Failed())
			continue
		}
		slices.Sort(ds)
		p99 := Percentile(ds, 0.99)
		met := "met"
		if p99 > target || res.Failed() > 0 {
			met = "**not met**"
		}
		dl := "n/a (etcd's session exposes no deadline)"
		if res.Deadlines {
			dl = fmt.Sprintf("%d of %d", before, len(res.Rounds))
			if before > 0 {
				dl += fmt.Sprintf(" (closest %s before)", millis(slack))
			}
		}
		fmt.Fprintf(w, "| %s | %d | %d | %s | %s | %s | %s | %s | %s | %s |\n", name, len(res.Rounds), res.Failed(),
			seconds(Percentile(ds, 0.5)), seconds(Percentile(ds, 0.9)), seconds(p99), seconds(ds[len(ds)-1]), seconds(ds[0]), met, dl)
	}
}

// Percentile is the nearest-rank percentile p (0 < p <= 1) of sorted ds:
// of 20 values, p99 is the largest.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// millis formats d in milliseconds with a decimal.
func millis(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

// seconds formats d in seconds with millisecond precision.
func seconds(d time.Duration) string { return fmt.Sprintf("%.3f s", d.Seconds()) }
