// Command idle-sessions measures what idle sessions cost a server: kahuna
// (persistent and ephemeral sessions) and etcd (concurrency.Session, the
// locks concurrency.Mutex keys on its lease) side by side, each against a
// server process of its own started for the run. For each it measures the
// server's CPU idle, then opens N sessions of M locks from this one
// client, lets them renew for one TTL, and measures the server's CPU and
// this client's over a window. It prints a line per system, then a
// Markdown table, and exits 1 if a session was lost or a system failed.
//
//	go build -o /tmp/kahuna ./cmd/kahuna && cd bench/peers
//	go run ./cmd/idle-sessions --kahuna-server /tmp/kahuna --sessions 1000 --locks 10 --ttl 30s
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/kahunago/kahuna/bench/peers"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("idle-sessions", flag.ContinueOnError)
	fs.SetOutput(stderr)
	systems := fs.String("systems", "kahuna:persistent,kahuna:ephemeral,etcd", "comma-separated, run in this order: kahuna:persistent, kahuna:ephemeral, etcd")
	sessions := fs.Int("sessions", 1000, "sessions to open")
	locks := fs.Int("locks", 10, "locks per session")
	ttl := fs.Duration("ttl", 30*time.Second, "session TTL (whole seconds for etcd)")
	window := fs.Duration("window", 30*time.Second, "how long to measure each phase")
	kahunaServer := fs.String("kahuna-server", "kahuna", "the kahuna binary to start (go build -o /tmp/kahuna ./cmd/kahuna)")
	etcdServer := fs.String("etcd-server", "etcd", "the etcd binary to start (apt-get install etcd-server)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if *sessions < 1 || *locks < 0 || *ttl <= 0 || *window <= 0 {
		fmt.Fprintln(stderr, "idle-sessions: --sessions must be at least 1, --locks not negative, --ttl and --window positive")
		return 2
	}
	cfg := peers.IdleConfig{Systems: strings.Split(*systems, ","), Sessions: *sessions, Locks: *locks, TTL: *ttl, Window: *window,
		KahunaServer: *kahunaServer, Etcd: *etcdServer, Progress: stdout,
		Logf: func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }}
	results := peers.RunIdle(ctx, cfg)
	fmt.Fprintln(stdout)
	peers.PrintIdle(stdout, cfg, results)
	for _, r := range results {
		if r.Err != nil {
			return 1
		}
	}
	if ctx.Err() != nil || len(results) < len(cfg.Systems) {
		return 1
	}
	return 0
}
