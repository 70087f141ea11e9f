package peers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/kahunago/kahuna"
)

// What idle sessions cost a server: a server process started for the
// run, its CPU measured idle, then with N sessions of M locks each, opened
// by this one client and kept alive for a window; the client's own CPU is
// measured over the same window. kahuna's sessions renew their locks with
// them (one batch per renewal where the node takes it); etcd's are one
// lease each, the locks (concurrency.Mutex keys) attached to it, kept
// alive on the client's one keepalive stream.

// IdleConfig configures RunIdle.
type IdleConfig struct {
	Systems            []string // kahuna:persistent, kahuna:ephemeral, etcd: run in this order
	Sessions, Locks    int
	TTL, Window        time.Duration
	KahunaServer, Etcd string // the server binaries
	Progress           io.Writer
	Logf               func(format string, a ...any)
}

// IdleResult is one system's measurement, in % of one core.
type IdleResult struct {
	System             string
	Idle, Busy, Client float64
	Err                error
}

// RunIdle measures each system of cfg in turn.
func RunIdle(ctx context.Context, cfg IdleConfig) []IdleResult {
	var out []IdleResult
	for _, name := range cfg.Systems {
		r := IdleResult{System: name}
		r.Idle, r.Busy, r.Client, r.Err = idleRun(ctx, name, cfg)
		if r.Err != nil {
			fmt.Fprintf(cfg.Progress, "%s: %v\n", name, r.Err)
		} else {
			fmt.Fprintf(cfg.Progress, "%s: server idle %.2f%%, with the sessions %.2f%%; client %.2f%% (of one core)\n", name, r.Idle, r.Busy, r.Client)
		}
		out = append(out, r)
		if ctx.Err() != nil {
			break
		}
	}
	return out
}

// PrintIdle writes results as a Markdown table.
func PrintIdle(w io.Writer, cfg IdleConfig, results []IdleResult) {
	fmt.Fprintf(w, "%d sessions × %d locks, TTL %v, %v windows; %% of one core\n\n", cfg.Sessions, cfg.Locks, cfg.TTL, cfg.Window)
	fmt.Fprintln(w, "| system | server, idle | server, with the sessions | the client |")
	fmt.Fprintln(w, "|---|---:|---:|---:|")
	for _, r := range results {
		if r.Err != nil {
			fmt.Fprintf(w, "| %s | failed: %v | | |\n", r.System, r.Err)
			continue
		}
		fmt.Fprintf(w, "| %s | %.2f | %.2f | %.2f |\n", r.System, r.Idle, r.Busy, r.Client)
	}
}

// idleSystem is one system's sessions, as idleRun drives them.
type idleSystem interface {
	pid() int
	// open opens session i with its locks and returns a check that it
	// is still live.
	open(ctx context.Context, i int) (live func() bool, err error)
	close() error
}

func idleRun(ctx context.Context, name string, cfg IdleConfig) (idle, busy, client float64, err error) {
	sys, err := openIdle(ctx, name, cfg)
	if err != nil {
		return 0, 0, 0, err
	}
	defer func() { err = errors.Join(err, sys.close()) }()
	if idle, err = processCPU(ctx, sys.pid(), cfg.Window); err != nil {
		return 0, 0, 0, err
	}
	start := time.Now()
	live := make([]func() bool, cfg.Sessions)
	errs := make(chan error, cfg.Sessions)
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for i := range live {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f, err := sys.open(ctx, i)
			if err != nil {
				errs <- err
				return
			}
			live[i] = f
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, 0, 0, fmt.Errorf("opening the sessions: %w", err)
	}
	cfg.Logf("%s: %d sessions of %d locks open in %v; warming up one TTL", name, cfg.Sessions, cfg.Locks, time.Since(start).Round(time.Millisecond))
	select {
	case <-time.After(cfg.TTL):
	case <-ctx.Done():
		return 0, 0, 0, ctx.Err()
	}
	before := selfCPU()
	if busy, err = processCPU(ctx, sys.pid(), cfg.Window); err != nil {
		return 0, 0, 0, err
	}
	client = (selfCPU() - before).Seconds() / cfg.Window.Seconds() * 100
	lost := 0
	for _, f := range live {
		if !f() {
			lost++
		}
	}
	if lost > 0 {
		return idle, busy, client, fmt.Errorf("%d of %d sessions were lost during the run", lost, cfg.Sessions)
	}
	return idle, busy, client, nil
}

func openIdle(ctx context.Context, name string, cfg IdleConfig) (idleSystem, error) {
	switch name {
	case "kahuna:persistent", "kahuna:ephemeral":
		d := kahuna.Persistent
		if name == "kahuna:ephemeral" {
			d = kahuna.Ephemeral
		}
		srv, c, _, err := startKahunaClient(ctx, cfg.KahunaServer)
		if err != nil {
			return nil, err
		}
		return &kahunaIdle{srv: srv, c: c, d: d, cfg: cfg}, nil
	case "etcd":
		if cfg.TTL%time.Second != 0 {
			return nil, fmt.Errorf("etcd: TTL %v is not whole seconds", cfg.TTL)
		}
		srv, cli, _, err := startEtcdClient(ctx, cfg.Etcd)
		if err != nil {
			return nil, err
		}
		return &etcdIdle{srv: srv, cli: cli, cfg: cfg}, nil
	}
	return nil, fmt.Errorf("unknown system %q (kahuna:persistent, kahuna:ephemeral, etcd)", name)
}

type kahunaIdle struct {
	srv *server
	c   *kahuna.Client
	d   kahuna.Durability
	cfg IdleConfig

	mu       sync.Mutex
	sessions []*kahuna.Session
}

func (k *kahunaIdle) pid() int { return k.srv.cmd.Process.Pid }

func (k *kahunaIdle) open(ctx context.Context, i int) (func() bool, error) {
	s, err := kahuna.NewSession(ctx, k.c, kahuna.WithTTL(k.cfg.TTL), kahuna.WithDurability(k.d))
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	k.sessions = append(k.sessions, s)
	k.mu.Unlock()
	for j := range k.cfg.Locks {
		if _, err := kahuna.Acquire(ctx, k.c, fmt.Sprintf("idle-%d/%d", i, j), kahuna.WithSession(s)); err != nil {
			return nil, err
		}
	}
	return func() bool { return s.Context().Err() == nil }, nil
}

func (k *kahunaIdle) close() error {
	for _, s := range k.sessions {
		s.Orphan() // the server goes: nothing to release
	}
	return errors.Join(k.c.Close(), k.srv.stop())
}

type etcdIdle struct {
	srv *server
	cli *clientv3.Client
	cfg IdleConfig
}

func (e *etcdIdle) pid() int { return e.srv.cmd.Process.Pid }

func (e *etcdIdle) open(ctx context.Context, i int) (func() bool, error) {
	s, err := concurrency.NewSession(e.cli, concurrency.WithTTL(int(e.cfg.TTL/time.Second)), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, err
	}
	for j := range e.cfg.Locks {
		if err := concurrency.NewMutex(s, fmt.Sprintf("%sidle-%d/%d", etcdPrefix, i, j)).Lock(ctx); err != nil {
			return nil, err
		}
	}
	return func() bool {
		select {
		case <-s.Done():
			return false
		default:
			return true
		}
	}, nil
}

func (e *etcdIdle) close() error { return errors.Join(e.cli.Close(), e.srv.stop()) }

// selfCPU is this process's CPU time so far (user + system).
func selfCPU() time.Duration {
	var u syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &u)
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// processCPU is pid's CPU (user + system) over window, in % of one core.
func processCPU(ctx context.Context, pid int, window time.Duration) (float64, error) {
	ticks := func() (int64, error) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, err
		}
		// The fields after the command name, which is in parentheses.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		return u + st, nil
	}
	t0, err := ticks()
	if err != nil {
		return 0, err
	}
	select {
	case <-time.After(window):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	t1, err := ticks()
	if err != nil {
		return 0, err
	}
	const hz = 100 // USER_HZ on Linux
	return float64(t1-t0) / hz / window.Seconds() * 100, nil
}
