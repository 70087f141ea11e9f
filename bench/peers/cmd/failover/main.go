// Command failover measures how long an election has no leader after its
// leader's process is killed with SIGKILL, kahuna (persistent and
// ephemeral elections) and etcd (concurrency.Election on a session) side by
// side, each against a server process of its own started for the run:
//
//	go build -o /tmp/kahuna ./cmd/kahuna && cd bench/peers
//	go run ./cmd/failover --kahuna-server /tmp/kahuna --rounds 20
//
// Each round runs a leader candidate in a child process (this program,
// "failover candidate ..."), kills it once it leads, and times the
// parent's waiting Campaign from the kill to its election. It prints a
// line per round, then a Markdown table, and exits 1 if any round failed
// (no election within --bound of the kill, a second leader while the first
// lived, an epoch that did not rise, or a kahuna leader whose last
// deadline did not precede its successor's election).
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
	var code int
	if len(os.Args) > 1 && os.Args[1] == "candidate" {
		code = peers.FailoverCandidate(ctx, os.Args[2:], os.Stdin, os.Stdout, os.Stderr)
	} else {
		code = run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	}
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("failover", flag.ContinueOnError)
	fs.SetOutput(stderr)
	systems := fs.String("systems", "kahuna:persistent,kahuna:ephemeral,etcd", "comma-separated, run in this order: kahuna:persistent, kahuna:ephemeral, etcd")
	rounds := fs.Int("rounds", 20, "rounds per system")
	ttl := fs.Duration("ttl", peers.FailoverTTL, "election TTL (whole seconds for etcd)")
	bound := fs.Duration("bound", 0, "a round fails if nobody is elected this long after the kill (default 3×TTL)")
	kahunaServer := fs.String("kahuna-server", "kahuna", "the kahuna binary to start (go build -o /tmp/kahuna ./cmd/kahuna)")
	etcdServer := fs.String("etcd-server", "etcd", "the etcd binary to start (apt-get install etcd-server)")
	seed := fs.Uint64("seed", 0, "seed of the kill delays (0: from the clock)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if *rounds < 1 {
		fmt.Fprintln(stderr, "failover: --rounds must be at least 1")
		return 2
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "failover:", err)
		return 1
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())
	}
	if *bound <= 0 {
		*bound = 3 * *ttl
	}
	fmt.Fprintf(stdout, "failover: %d rounds per system, TTL %v, bound %v, seed %d; kill delays uniform in [TTL/2, 3·TTL/2) after the election\n",
		*rounds, *ttl, *bound, *seed)
	results := peers.RunFailover(ctx, peers.FailoverConfig{
		Systems: strings.Split(*systems, ","), Rounds: *rounds, TTL: *ttl, Bound: *bound,
		KahunaServer: *kahunaServer, EtcdServer: *etcdServer,
		Candidate: []string{self, "candidate"}, Seed: *seed, Progress: stdout,
		Logf: func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) },
	})
	fmt.Fprintln(stdout)
	peers.PrintFailover(stdout, *ttl, results)
	code := 0
	for _, r := range results {
		if r.Err != nil || r.Failed() > 0 || len(r.Rounds) < *rounds {
			code = 1
		}
	}
	if ctx.Err() != nil {
		code = 1
	}
	return code
}
