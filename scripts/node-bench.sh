#!/usr/bin/env bash
# Benchmarks one kahuna node process over gRPC with kahuna-bench-peers,
# side by side with Redis, and prints the node's CPU seconds for the run:
# the A/B of two server builds (the same client against each) used for
# the hot-wait figures of docs/benchmarks-log.md.
#
#   go build -o /tmp/kahuna ./cmd/kahuna
#   scripts/node-bench.sh /tmp/kahuna                      # hot-wait, 64 contenders, no hold
#   scripts/node-bench.sh /tmp/kahuna-old --duration 10s   # extra flags go to kahuna-bench-peers
#   COMPARE=kahuna-grpc:ephemeral scripts/node-bench.sh /tmp/kahuna
#
# Needs redis-server for the Redis row (apt-get install redis-server).
# Uses ports 2170 (HTTP), 2172 (gRPC) and 2173 (Raft).
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:?usage: scripts/node-bench.sh KAHUNA_BINARY [kahuna-bench-peers flags]}"
shift
compare="${COMPARE:-kahuna-native:ephemeral,kahuna-native:persistent,kahuna-grpc:ephemeral,redis}"
dir="$(mktemp -d "${TMPDIR:-/tmp}/kahuna-node-bench.XXXXXX")"
(cd bench/peers && go build -o "$dir/kahuna-bench-peers" ./cmd/kahuna-bench-peers)
"$bin" --host 127.0.0.1 --http-ports 2170 --grpc-cleartext-ports 2172 --raft-port 2173 \
	--storage-path "$dir/data" --log-level warn >"$dir/node.log" 2>&1 &
pid=$!
trap 'kill -INT $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do
	curl -sf http://127.0.0.1:2170/healthz >/dev/null && break
	sleep 0.1
done
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; } # user + system clock ticks
before=$(cpu)
"$dir/kahuna-bench-peers" --workload hot-wait --concurrency 64 --duration 6s --warmup 2s \
	--start-server --endpoints http://127.0.0.1:2172 --compare "$compare" "$@"
after=$(cpu)
echo "node CPU: $(( (after - before) * 1000 / $(getconf CLK_TCK) )) ms over the run (warm-ups and every target included)"
