#!/usr/bin/env bash
# Benchmarks a 3-process cluster: starts scripts/cluster.sh in a temp dir,
# waits for "cluster ready", runs kahuna-bench's lock workload with the Go
# client's default wire (kahuna's framing; TARGET=grpc for gRPC) against all
# three nodes' client URLs (the shared ports, which the nodes
# name in ServedFrom, so the client learns the leaders) for each
# durability, prints the leaders
# before and after each run (leader changes under load lose ephemeral
# locks), and stops the cluster.
#
#   scripts/cluster-bench.sh                       # ephemeral, then persistent, 10 s each
#   scripts/cluster-bench.sh --duration 30s        # extra flags go to kahuna-bench
#   DURABILITIES=persistent scripts/cluster-bench.sh
#   KAHUNA_BIN=/tmp/kahuna-old scripts/cluster-bench.sh    # another build (cluster.sh)
#   CLUSTER_FLAGS="--initial-cluster-partitions 3" scripts/cluster-bench.sh   # flags for every node
#
# Uses the fixed ports of cluster.sh (2070-2073, 3070-3073, 4070-4073).
set -euo pipefail
cd "$(dirname "$0")/.."
dir="$(mktemp -d "${TMPDIR:-/tmp}/kahuna-cluster-bench.XXXXXX")"
bindir="$dir/bin"
mkdir -p "$bindir"
go build -o "$bindir/" ./cmd/kahunactl ./cmd/kahuna-bench

KAHUNA_CLUSTER_DIR="$dir/cluster" scripts/cluster.sh --log-level warn ${CLUSTER_FLAGS:-} >"$dir/cluster.out" 2>&1 &
cluster=$!
cleanup() {
  kill -TERM "$cluster" 2>/dev/null || true
  wait "$cluster" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

until grep -q '^cluster ready' "$dir/cluster.out"; do
  if ! kill -0 "$cluster" 2>/dev/null; then
    echo "cluster-bench.sh: the cluster did not start:" >&2
    cat "$dir/cluster.out" >&2
    exit 1
  fi
  sleep 0.1
done

leaders() { "$bindir/kahunactl" partitions --endpoints http://127.0.0.1:2070 | tail -n +2 | awk '{printf "%s%s", sep, $4; sep=" "} END {print ""}'; }
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "leaders of partitions 0..7: $(leaders)"
for d in ${DURABILITIES:-ephemeral persistent}; do
  echo
  echo "== $d"
  "$bindir/kahuna-bench" --target "${TARGET:-native}" \
    --endpoints http://127.0.0.1:2070,http://127.0.0.1:3070,http://127.0.0.1:4070 \
    --durability "$d" --progress=false "$@"
  echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "leaders of partitions 0..7: $(leaders)"
done
