#!/usr/bin/env bash
# Starts a 3-node kahuna cluster on 127.0.0.1, waits until all three are
# ready (prints "cluster ready"), then runs until Ctrl-C / SIGTERM, which
# stops all three cleanly. Data and logs go under
# ${KAHUNA_CLUSTER_DIR:-./.cluster} (relative to where you run it):
# nodeN/ (data), nodeN.out (startup lines), nodeN.log (logs).
#
#   node 1: API http://127.0.0.1:2070 (REST + gRPC), gRPC :2072, Raft :2073
#   node 2: API http://127.0.0.1:3070,               gRPC :3072, Raft :3073
#   node 3: API http://127.0.0.1:4070,               gRPC :4072, Raft :4073
#
#   scripts/cluster.sh [NODE FLAGS...]          # the cluster; extra flags go to every node
#   scripts/cluster.sh node N [NODE FLAGS...]   # (re)start node N alone, in the foreground,
#                                               # e.g. after kill -9 of it
#
# The first run (no nodeN/ dir yet) founds the cluster: every node gets
# --initial-cluster-state new. Later runs restart the nodes on their data
# (kahuna's default for a member, existing); a node whose dir is gone or
# empty is refused by kahuna, since it would come back having forgotten
# its Raft votes and log. To start over, remove the whole dir.
#
# With KAHUNA_BIN the nodes run that binary instead of a build of this
# checkout. With KAHUNA_READY_TIMEOUT (seconds, default 60) the wait for readiness is
# bounded; a node that exits or is not ready in time stops the cluster.
set -euo pipefail
base="${KAHUNA_CLUSTER_DIR:-./.cluster}"
only=""
if [[ "${1:-}" == node ]]; then
  only="${2:?usage: scripts/cluster.sh node N [flags]}"
  [[ "$only" =~ ^[123]$ ]] || { echo "cluster.sh: node must be 1, 2 or 3, not $only" >&2; exit 2; }
  shift 2
  # A node restarted on an empty dir would be a new replica under an old
  # ID, which the others' Raft logs contradict: kahuna refuses it, and this
  # says so before building anything.
  if [[ ! -d "$base/node$only" ]]; then
    echo "cluster.sh: no data for node $only in $base/node$only; set KAHUNA_CLUSTER_DIR to the running cluster's dir" >&2
    exit 2
  fi
fi
mkdir -p "$base"
base="$(cd "$base" && pwd)" # absolute, from the caller's directory
cd "$(dirname "$0")/.."
bin="$base/kahuna"
if [[ -n "${KAHUNA_BIN:-}" ]]; then
  cp "$KAHUNA_BIN" "$bin" # a build of another commit, for an A/B
else
  go build -o "$bin" ./cmd/kahuna
fi

cluster="1=127.0.0.1:2073,2=127.0.0.1:3073,3=127.0.0.1:4073"
endpoints="1=http://127.0.0.1:2070,2=http://127.0.0.1:3070,3=http://127.0.0.1:4070"

# found: the flags that found the cluster, on a first run only (no node
# has a dir yet); a partly present cluster is restarted, not founded.
found=(--initial-cluster-state new)
for id in 1 2 3; do
  if [[ -d "$base/node$id" ]]; then found=(); fi
done

# node_args N: sets args to the flags of node N.
node_args() {
  local id=$1 port=$(($1 + 1))000
  args=(--raft-nodeid "$id" --raft-port $((port + 73))
    --http-ports $((port + 70)) --grpc-cleartext-ports $((port + 72))
    --storage-path "$base/node$id"
    --initial-cluster "$cluster" --initial-cluster-endpoints "$endpoints"
    ${found[@]+"${found[@]}"})
}

if [[ -n "$only" ]]; then
  node_args "$only"
  exec "$bin" "${args[@]}" "$@"
fi

pids=()
stop() {
  trap - INT TERM EXIT
  if ((${#pids[@]})); then
    kill "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
  fi
}
trap 'stop; exit 130' INT
trap 'stop; exit 143' TERM
trap stop EXIT
for id in 1 2 3; do
  node_args "$id"
  "$bin" "${args[@]}" "$@" >"$base/node$id.out" 2>"$base/node$id.log" &
  pids+=($!)
done
echo "started nodes 1=${pids[0]} 2=${pids[1]} 3=${pids[2]}; logs in $base/node*.log; Ctrl-C to stop"

# Wait for every node's "kahuna node ready" line (printed once it serves
# all its partitions).
deadline=$((SECONDS + ${KAHUNA_READY_TIMEOUT:-60}))
for id in 1 2 3; do
  until grep -q '^kahuna node ready' "$base/node$id.out"; do
    if ! kill -0 "${pids[id - 1]}" 2>/dev/null; then
      echo "cluster.sh: node $id exited before it was ready; its log ends:" >&2
      tail -n 20 "$base/node$id.log" >&2
      exit 1
    fi
    if ((SECONDS >= deadline)); then
      echo "cluster.sh: node $id not ready after ${KAHUNA_READY_TIMEOUT:-60}s; its log ends:" >&2
      tail -n 20 "$base/node$id.log" >&2
      exit 1
    fi
    sleep 0.1
  done
done
echo "cluster ready: API http://127.0.0.1:2070,http://127.0.0.1:3070,http://127.0.0.1:4070 gRPC http://127.0.0.1:2072,http://127.0.0.1:3072,http://127.0.0.1:4072"
wait
