// Command kahuna-bench benchmarks lock services: by default an in-process
// kahuna node (no server needed), lock workload (TryLock + Unlock), ephemeral
// locks, 64 callers over 10,000 keys, 10 s measured after 2 s of warmup.
//
//	go run ./cmd/kahuna-bench                                   # the default run
//	go run ./cmd/kahuna-bench --compare embedded,mutex          # side by side, with ratios
//	go run ./cmd/kahuna-bench --durability persistent           # Raft + badger on disk
//	go run ./cmd/kahuna-bench --target rest --endpoints http://127.0.0.1:2070
//	go run ./cmd/kahuna-bench --workload hot-wait --concurrency 8 --hold 10ms \
//	    --compare embedded:ephemeral,embedded:persistent,grpc:ephemeral,grpc:persistent
//	go run ./cmd/kahuna-bench -help
//
// Redis and etcd are in a module of their own: bench/peers/cmd/kahuna-bench-peers.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/kahunago/kahuna/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := bench.Main(ctx, os.Args[1:], os.Stdout, os.Stderr, bench.Program{Name: "kahuna-bench", Targets: bench.DefaultTargets()})
	stop()
	os.Exit(code)
}
