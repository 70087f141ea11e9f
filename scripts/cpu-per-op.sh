#!/usr/bin/env bash
# CPU per lock op, server and client, side by side: Redis (go-redis), kahuna
# over REST, kahuna over gRPC and over its own framing (the Go client's
# default), one after another with the same workload
# (kahuna-bench's lock workload: 64 callers, TryLock + Unlock, 10,000 keys,
# ephemeral, no warm-up so that every op counted ran inside the CPU window).
# Both processes share the machine's cores, so on a small machine the ops/s
# ratio follows the ratio of (server + client) CPU per op.
#
#   go build -o /tmp/kahuna ./cmd/kahuna
#   scripts/cpu-per-op.sh /tmp/kahuna              # 6 s per target
#   DURATION=10s scripts/cpu-per-op.sh /tmp/kahuna
#
# Needs redis-server (apt-get install redis-server). Uses ports 2270 (HTTP),
# 2272 (gRPC), 2273 (Raft) and 6391 (Redis).
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:?usage: scripts/cpu-per-op.sh KAHUNA_BINARY}"
duration="${DURATION:-6s}"
dir="$(mktemp -d "${TMPDIR:-/tmp}/kahuna-cpu-per-op.XXXXXX")"
go build -o "$dir/kahuna-bench" ./cmd/kahuna-bench
(cd bench/peers && go build -o "$dir/kahuna-bench-peers" ./cmd/kahuna-bench-peers)
redis-server --port 6391 --save '' --appendonly no --dir "$dir" >"$dir/redis.log" 2>&1 &
redis=$!
"$bin" --host 127.0.0.1 --http-ports 2270 --grpc-cleartext-ports 2272 --raft-port 2273 \
	--storage-path "$dir/data" --log-level warn >"$dir/node.log" 2>&1 &
node=$!
trap 'kill $redis 2>/dev/null; kill -INT $node 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do
	curl -sf http://127.0.0.1:2270/healthz >/dev/null && redis-cli -p 6391 ping >/dev/null 2>&1 && break
	sleep 0.1
done
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; } # user + system clock ticks
hz=$(getconf CLK_TCK)

# run NAME SERVER_PID COMMAND...: one target, then its line of figures.
run() {
	local name=$1 pid=$2
	shift 2
	local before after ops client
	before=$(ticks "$pid")
	/usr/bin/time -f '%U %S' -o "$dir/time" "$@" --duration "$duration" --warmup 0s --progress=false >"$dir/out" 2>"$dir/err" ||
		{ cat "$dir/err" >&2; return 1; }
	after=$(ticks "$pid")
	ops=$(awk '$1 == "lock" {gsub(",", "", $2); print $2}' "$dir/out")
	client=$(awk '{print $1 + $2}' "$dir/time")
	awk -v n="$name" -v ops="$ops" -v d="${duration%s}" -v s="$((after - before))" -v hz="$hz" -v c="$client" 'BEGIN {
		sv = s / hz * 1e6 / ops; cl = c * 1e6 / ops
		printf "%-12s %9.0f ops/s   server %5.1f µs/op   client %5.1f µs/op   both %5.1f µs/op\n", n, ops / d, sv, cl, sv + cl }'
}

run redis "$redis" "$dir/kahuna-bench-peers" --target redis --redis-addr 127.0.0.1:6391
run kahuna-rest "$node" "$dir/kahuna-bench" --target rest --endpoints http://127.0.0.1:2270
run kahuna-grpc "$node" "$dir/kahuna-bench" --target grpc --endpoints http://127.0.0.1:2272
run kahuna-native "$node" "$dir/kahuna-bench" --target native --endpoints http://127.0.0.1:2272
