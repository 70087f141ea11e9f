#!/usr/bin/env bash
# Starts a 3-node kahuna cluster on 127.0.0.1 and waits; Ctrl-C stops all
# three. Data goes under ${KAHUNA_CLUSTER_DIR:-./.cluster}/nodeN.
#
#   node 1: API http://127.0.0.1:2070 (REST + gRPC), gRPC :2072, Raft :2073
#   node 2: API http://127.0.0.1:3070,               gRPC :3072, Raft :3073
#   node 3: API http://127.0.0.1:4070,               gRPC :4072, Raft :4073
set -euo pipefail
cd "$(dirname "$0")/.."
base="${KAHUNA_CLUSTER_DIR:-./.cluster}"
bin="$base/kahuna"
mkdir -p "$base"
go build -o "$bin" ./cmd/kahuna

cluster="1=127.0.0.1:2073,2=127.0.0.1:3073,3=127.0.0.1:4073"
endpoints="1=http://127.0.0.1:2070,2=http://127.0.0.1:3070,3=http://127.0.0.1:4070"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait' INT TERM EXIT
for id in 1 2 3; do
  port=$((id + 1))000
  "$bin" --raft-nodeid "$id" --raft-port $((port + 73)) \
    --http-ports $((port + 70)) --grpc-cleartext-ports $((port + 72)) \
    --storage-path "$base/node$id" \
    --initial-cluster "$cluster" --initial-cluster-endpoints "$endpoints" \
    >"$base/node$id.out" 2>"$base/node$id.log" &
  pids+=($!)
done
echo "started nodes ${pids[*]}; logs in $base/node*.log; Ctrl-C to stop"
wait
