// Command idle-sessions measures what idle sessions cost a node: it starts
// a kahuna node process, measures its CPU while idle, then opens N sessions
// with M locks each from this one client, lets them renew for a window,
// and measures the node's CPU again (and this client's). Every session must
// still be live at the end, or it exits 1.
//
//	go build -o /tmp/kahuna ./cmd/kahuna
//	go run ./scripts/idle-sessions -kahuna /tmp/kahuna -sessions 1000 -locks 10 -ttl 30s
//
// It uses ports 2270 (API) and 2273 (Raft) and a temporary data dir.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kahunago/kahuna"
)

func main() {
	bin := flag.String("kahuna", "", "the kahuna binary to start (required)")
	sessions := flag.Int("sessions", 1000, "sessions to open")
	locks := flag.Int("locks", 10, "locks per session")
	ttl := flag.Duration("ttl", 30*time.Second, "session TTL (renewed every third of it)")
	durability := flag.String("durability", "persistent", "persistent or ephemeral")
	window := flag.Duration("window", 30*time.Second, "how long to measure each phase")
	flag.Parse()
	if *bin == "" {
		fmt.Fprintln(os.Stderr, "idle-sessions: -kahuna BINARY is required (go build -o /tmp/kahuna ./cmd/kahuna)")
		os.Exit(2)
	}
	d := kahuna.Persistent
	if *durability == "ephemeral" {
		d = kahuna.Ephemeral
	}
	if err := run(*bin, *sessions, *locks, *ttl, d, *window); err != nil {
		fmt.Fprintln(os.Stderr, "idle-sessions:", err)
		os.Exit(1)
	}
}

func run(bin string, sessions, locks int, ttl time.Duration, d kahuna.Durability, window time.Duration) error {
	dir, err := os.MkdirTemp("", "idle-sessions")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	node := exec.Command(bin, "--host", "127.0.0.1", "--http-ports", "2270", "--raft-port", "2273",
		"--storage-path", dir, "--log-level", "warn")
	node.Stderr = os.Stderr
	if err := node.Start(); err != nil {
		return err
	}
	defer func() {
		_ = node.Process.Signal(syscall.SIGINT)
		_ = node.Wait()
	}()
	if err := healthy("http://127.0.0.1:2270/healthz"); err != nil {
		return err
	}
	ctx := context.Background()
	client, err := kahuna.Dial(ctx, []string{"http://127.0.0.1:2270"})
	if err != nil {
		return err
	}
	defer client.Close()

	idle, err := nodeCPU(node.Process.Pid, window)
	if err != nil {
		return err
	}
	fmt.Printf("node idle: %.2f%% of one core over %v\n", idle, window)

	start := time.Now()
	all := make([]*kahuna.Session, sessions)
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	sem := make(chan struct{}, 64)
	for i := range all {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s, err := kahuna.NewSession(ctx, client, kahuna.WithTTL(ttl), kahuna.WithDurability(d))
			if err != nil {
				errs <- err
				return
			}
			all[i] = s
			for j := range locks {
				if _, err := kahuna.Acquire(ctx, client, fmt.Sprintf("idle-%d/%d", i, j), kahuna.WithSession(s)); err != nil {
					errs <- err
					return
				}
			}
		}()
		if (i+1)%100 == 0 {
			fmt.Printf("  %d sessions open\n", i+1)
		}
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return fmt.Errorf("opening the sessions: %w", err)
	}
	fmt.Printf("%d sessions with %d %s locks each open in %v; warming up one TTL\n", sessions, locks, d, time.Since(start).Round(time.Millisecond))
	time.Sleep(ttl)

	var before, after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	busy, err := nodeCPU(node.Process.Pid, window)
	if err != nil {
		return err
	}
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	clientCPU := (tv(after.Utime) + tv(after.Stime) - tv(before.Utime) - tv(before.Stime)).Seconds() / window.Seconds() * 100
	renewals := float64(sessions*(locks+1)) / (ttl.Seconds() / 3)
	fmt.Printf("node with the sessions: %.2f%% of one core (idle %.2f%%); this client: %.2f%%; %.0f renewals/s expected\n",
		busy, idle, clientCPU, renewals)
	lost := 0
	for _, s := range all {
		if s.Context().Err() != nil {
			lost++
		}
	}
	if lost > 0 {
		return fmt.Errorf("%d of %d sessions were lost during the run", lost, sessions)
	}
	return nil
}

func tv(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }

// nodeCPU is pid's CPU (user + system) over window, in % of one core.
func nodeCPU(pid int, window time.Duration) (float64, error) {
	ticks := func() (int64, error) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, err
		}
		// Fields after the command name, which is in parentheses.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		return u + s, nil
	}
	t0, err := ticks()
	if err != nil {
		return 0, err
	}
	time.Sleep(window)
	t1, err := ticks()
	if err != nil {
		return 0, err
	}
	const hz = 100 // USER_HZ on Linux
	return float64(t1-t0) / hz / window.Seconds() * 100, nil
}

func healthy(url string) error {
	for range 200 {
		if r, err := http.Get(url); err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("the node did not become healthy at %s", url)
}
