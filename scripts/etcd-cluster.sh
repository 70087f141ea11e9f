#!/usr/bin/env bash
# Runs a 3-member etcd cluster on loopback for the cluster benchmark's
# side-by-side row (clients on 127.0.0.1:23791..23793, peers on
# 23801..23803, data in a temp dir removed on exit). Ctrl-C stops it.
#
#   scripts/etcd-cluster.sh &
#   cd bench/peers && go run ./cmd/kahuna-bench-peers --target etcd \
#     --etcd-endpoints http://127.0.0.1:23791,http://127.0.0.1:23792,http://127.0.0.1:23793
set -euo pipefail
command -v etcd >/dev/null || { echo "etcd-cluster.sh: no etcd binary (apt-get install etcd-server)" >&2; exit 1; }
dir="$(mktemp -d "${TMPDIR:-/tmp}/kahuna-etcd.XXXXXX")"
members="e1=http://127.0.0.1:23801,e2=http://127.0.0.1:23802,e3=http://127.0.0.1:23803"
pids=()
cleanup() {
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
for i in 1 2 3; do
  etcd --name "e$i" --data-dir "$dir/e$i" \
    --listen-client-urls "http://127.0.0.1:2379$i" --advertise-client-urls "http://127.0.0.1:2379$i" \
    --listen-peer-urls "http://127.0.0.1:2380$i" --initial-advertise-peer-urls "http://127.0.0.1:2380$i" \
    --initial-cluster "$members" --initial-cluster-state new --initial-cluster-token kahuna-bench \
    >"$dir/e$i.log" 2>&1 &
  pids+=($!)
done
echo "etcd members on http://127.0.0.1:23791,http://127.0.0.1:23792,http://127.0.0.1:23793 (logs in $dir)"
wait
