#!/usr/bin/env bash
# Runs kahuna beside its floors and its peers, alternated in one sitting,
# for the table "Against the floors" of docs/benchmarks-log.md:
#
#   scripts/floor-bench.sh ephemeral     # kahuna (Go client: framing, gRPC), Redis, then map-floor over TCP and over gRPC
#   scripts/floor-bench.sh hot           # one hot lock, 64 contenders: kahuna (framing, gRPC), Redis polling, then fifo-floor over TCP and over gRPC
#   scripts/floor-bench.sh persistent    # kahuna (Go client, gRPC), Redis appendfsync always, etcd, then raft-floor on one node
#   scripts/floor-bench.sh cluster       # 3-process kahuna, 3-member etcd, raft-floor 3 x 8 and 3 x 1, kahuna with 1 partition
#   ROUNDS=3 scripts/floor-bench.sh cluster
#   GOMAXPROCS=1 scripts/floor-bench.sh ephemeral   # every Go process with one P (docs/benchmarks-log.md)
#
# Each run is 8 s after 2 s of warm-up (the cluster's 10 s after 1 s, as
# scripts/cluster-bench.sh), 64 callers. Needs redis-server and etcd
# (apt-get install redis-server etcd-server). Compare the ratios within a
# sitting: figures move by ±30% between sittings on a shared machine.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-}
case "$what" in
ephemeral | hot | persistent | cluster) ;;
*)
  echo "usage: scripts/floor-bench.sh ephemeral|hot|persistent|cluster   (ROUNDS=N, default 2)" >&2
  exit 2
  ;;
esac
bin="$(mktemp -d "${TMPDIR:-/tmp}/kahuna-floor-bench.XXXXXX")"
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/" ./cmd/kahuna
(cd bench/peers && go build -o "$bin/" ./cmd/kahuna-bench-peers ./cmd/map-floor ./cmd/fifo-floor ./cmd/raft-floor)

peers() {
  (cd bench/peers && "$bin/kahuna-bench-peers" --start-server --kahuna-server "$bin/kahuna" \
    --duration 8s --warmup 2s --progress=false "$@" 2>&1 | sed -n '/== comparison/,$p')
}
floor() { "$bin/$1" "${@:2}" 2>&1 | grep -v '^raft-floor member: dragonboat'; }
etcd3() {
  scripts/etcd-cluster.sh >/dev/null 2>&1 &
  local etcd=$!
  sleep 3
  "$bin/kahuna-bench-peers" --target etcd --durability persistent --duration 10s --warmup 1s --progress=false \
    --etcd-endpoints http://127.0.0.1:23791,http://127.0.0.1:23792,http://127.0.0.1:23793 2>&1 | grep -E '^ +lock'
  kill "$etcd"
  wait "$etcd" 2>/dev/null || true
}
kahuna3() {
  KAHUNA_BIN="$bin/kahuna" DURABILITIES=persistent scripts/cluster-bench.sh --duration 10s --warmup 1s 2>&1 | grep -E '^ +lock'
}

for round in $(seq "${ROUNDS:-2}"); do
  echo "### $what, round $round ($(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg), GOMAXPROCS ${GOMAXPROCS:-default})"
  case "$what" in
  ephemeral)
    peers --compare kahuna-native,kahuna-grpc,redis
    floor map-floor --duration 8s --warmup 2s
    floor map-floor --wire grpc --duration 8s --warmup 2s
    ;;
  hot)
    peers --workload hot-wait --compare kahuna-native,kahuna-grpc,redis
    floor fifo-floor --duration 8s --warmup 2s
    floor fifo-floor --wire grpc --duration 8s --warmup 2s
    ;;
  persistent)
    peers --compare kahuna-native:persistent,kahuna-grpc:persistent,redis,etcd --redis-appendfsync-always
    floor raft-floor --members 1 --shards 1 --duration 8s --warmup 2s
    ;;
  cluster)
    echo "kahuna, 3 processes, 8 partitions:"
    kahuna3
    echo "etcd, 3 members:"
    etcd3
    floor raft-floor --members 3 --shards 8 --duration 10s --warmup 1s
    floor raft-floor --members 3 --shards 1 --duration 10s --warmup 1s
    echo "kahuna, 3 processes, 1 partition:"
    CLUSTER_FLAGS="--initial-cluster-partitions 1" kahuna3
    ;;
  esac
done
