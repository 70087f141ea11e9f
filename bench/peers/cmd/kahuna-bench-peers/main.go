// Command kahuna-bench-peers is kahuna-bench with Redis and etcd added, so
// kahuna and its peers run side by side in one invocation, with the same
// workload, and print one comparison table:
//
//	cd bench/peers
//	go run ./cmd/kahuna-bench-peers --compare kahuna-embedded,redis,etcd --start-server
//	go run ./cmd/kahuna-bench-peers --compare kahuna-grpc,redis,etcd --start-server --endpoints http://127.0.0.1:2070
//	go run ./cmd/kahuna-bench-peers --workload hot-wait --concurrency 64 --start-server --kahuna-server /tmp/kahuna \
//	    --compare kahuna-embedded:ephemeral,kahuna-embedded:persistent,kahuna-grpc:ephemeral,kahuna-grpc:persistent,redis,etcd
//
// Every kahuna-bench flag applies; -help lists them with the peers' own
// (--start-server, --redis-addr, --redis-appendfsync-always, --etcd-endpoints, …).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/kahunago/kahuna/bench"
	"github.com/kahunago/kahuna/bench/peers"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	opts := &peers.Options{}
	code := bench.Main(ctx, os.Args[1:], os.Stdout, os.Stderr, bench.Program{
		Name:    "kahuna-bench-peers",
		Targets: peers.Targets(opts),
		Flags:   opts.Register,
	})
	stop()
	os.Exit(code)
}
