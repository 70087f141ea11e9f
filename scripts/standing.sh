#!/usr/bin/env bash
# Runs the sitting behind "Where kahuna stands" in docs/benchmarks.md: every
# workload side by side with Redis and etcd, in rounds (forward, backward,
# ...), first with every process at Go's default and then with the harness
# alone at one P; then the in-process node beside Redis and beside a
# mutex-guarded map; then each floor twice. It prints each comparison's
# rounds table (medians, and the median and range of each ratio) and each
# floor's line, and the cross-core round trip (core-rtt) at the start,
# between the sections and at the end: on a VM it says where the host put
# the vCPUs, which the wire rows follow. About 25 minutes with the defaults.
#
#   scripts/standing.sh
#   PLACEMENTS=default scripts/standing.sh          # Go's default only
#   ROUNDS=1 DURATION=2s WARMUP=1s HOT_DURATION=2s scripts/standing.sh   # a quick look
#
# Needs redis-server and etcd (apt-get install redis-server etcd-server).
# Run it on an otherwise idle machine: figures move by ±30% between
# sittings, so compare the ratios within one.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}
duration=${DURATION:-8s}
warmup=${WARMUP:-2s}
hot_duration=${HOT_DURATION:-5s} # one hot lock's rounds
hot_warmup=${HOT_WARMUP:-1s}
placements=${PLACEMENTS:-default,client-procs-1}
for tool in redis-server etcd; do
	command -v "$tool" >/dev/null || {
		echo "standing.sh: $tool is missing (apt-get install redis-server etcd-server)" >&2
		exit 2
	}
done

bin="$(mktemp -d "${TMPDIR:-/tmp}/kahuna-standing.XXXXXX")"
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/" ./cmd/kahuna ./cmd/kahuna-bench
(cd bench/peers && go build -o "$bin/" ./cmd/kahuna-bench-peers ./cmd/map-floor ./cmd/fifo-floor ./cmd/tcp-rtt ./cmd/core-rtt)

stamp() { echo "### $* ($(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg))"; }
# core prints the cross-core round trip (under a second, between sections
# only: it keeps both CPUs busy). Where it cannot run (one CPU, not Linux)
# it prints why, and the sitting goes on without it.
core() { "$bin/core-rtt" 2>&1 | tail -1 || true; }
# rounds prints one comparison from its rounds table on (with one round,
# its comparison table); the harness's exit
# status (1 when a target failed) ends the script.
rounds() {
	local out
	out=$("$bin/kahuna-bench-peers" --start-server --kahuna-server "$bin/kahuna" --progress=false \
		--rounds "$rounds" --duration "$duration" --warmup "$warmup" "$@" 2>&1) || {
		echo "$out" >&2
		exit 1
	}
	echo "$out" | sed -n '/^== \(rounds\|comparison\)/,$p'
}

echo "kahuna $(git describe --always --dirty), $rounds rounds of $duration after $warmup, 64 callers"
for placement in ${placements//,/ }; do
	case "$placement" in
	default) procs=0 ;;
	client-procs-1) procs=1 ;;
	*)
		echo "standing.sh: unknown placement $placement (default, client-procs-1)" >&2
		exit 2
		;;
	esac
	stamp "$placement: ephemeral"
	core
	rounds --client-procs "$procs" --compare kahuna-native,kahuna-grpc,kahuna-rest,redis,etcd
	stamp "$placement: persistent"
	core
	rounds --client-procs "$procs" --compare kahuna-native:persistent,kahuna-grpc:persistent,redis,etcd --redis-appendfsync-always
	stamp "$placement: one hot lock"
	core
	rounds --client-procs "$procs" --workload hot-wait --duration "$hot_duration" --warmup "$hot_warmup" \
		--compare kahuna-native,kahuna-grpc,redis
done
stamp "embedded beside Redis"
core
rounds --compare kahuna-embedded,redis
rounds --compare kahuna-embedded:persistent,redis --redis-appendfsync-always
stamp "embedded beside a mutex-guarded map"
"$bin/kahuna-bench" --compare embedded,mutex --rounds "$rounds" --duration "$duration" --warmup "$warmup" \
	--progress=false 2>&1 | sed -n '/^== \(rounds\|comparison\)/,$p'
stamp "floors, each twice"
for floor in "map-floor" "map-floor --wire grpc" "fifo-floor" "fifo-floor --wire grpc"; do
	for _ in 1 2; do
		# shellcheck disable=SC2086 # the floor's flags split on purpose
		"$bin"/$floor --duration "$duration" --warmup "$warmup" 2>&1 | tail -1
	done
done
"$bin/tcp-rtt" 2>&1 | tail -1
"$bin/tcp-rtt" 2>&1 | tail -1
core
