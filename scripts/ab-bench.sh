#!/usr/bin/env bash
# Alternates builds of kahuna under kahuna-bench, a fresh node a run, and
# prints each run's ops/s and the CPU an op of the node and of the client
# (user + system time over the run, divided by the ops), then each build's
# medians and each round's ratio to the first build. This host's speed
# moves by ±30% within minutes, so only builds measured in turn, and CPU an
# op beside ops/s, tell a change from the noise (docs/benchmarks.md).
#
#   go build -o /tmp/kahuna-old ./cmd/kahuna    # at the commit before
#   go build -o /tmp/kahuna-new ./cmd/kahuna
#   scripts/ab-bench.sh /tmp/kahuna-old /tmp/kahuna-new -- --target native
#   ROUNDS=6 DURATION=6s scripts/ab-bench.sh /tmp/kahuna-old /tmp/kahuna-new -- --target grpc --durability persistent
#
# A build is NODE or NODE:CLIENT, CLIENT a kahuna-bench binary (built from
# this checkout when not given), so client changes compare too:
#
#   scripts/ab-bench.sh /tmp/kahuna:/tmp/kb-old /tmp/kahuna:/tmp/kb-new -- --target native
#
# Flags after -- go to kahuna-bench (it always gets --endpoints, --duration,
# --warmup 0s and --progress=false). Uses ports 2370 (HTTP), 2372 (gRPC)
# and 2373 (Raft). Each run's line also gives core-rtt, a cache line's
# round trip between two CPUs measured just before it: on a VM the host's
# placement of the vCPUs moves every wire row with it, so a round whose
# builds ran at different placements compares little.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${ROUNDS:-4}"
duration="${DURATION:-5s}"

builds=()
while [[ $# -gt 0 && $1 != "--" ]]; do
	builds+=("$1")
	shift
done
[[ $# -gt 0 ]] && shift # the --
if [[ ${#builds[@]} -lt 2 ]]; then
	echo "usage: scripts/ab-bench.sh NODE[:CLIENT] NODE[:CLIENT]... [-- kahuna-bench flags]" >&2
	exit 2
fi

dir="$(mktemp -d "${TMPDIR:-/tmp}/kahuna-ab-bench.XXXXXX")"
pid=""
stop_node() {
	if [[ -n $pid ]]; then
		kill -INT "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
		pid=""
	fi
}
trap 'stop_node; rm -rf "$dir"' EXIT

default_client=""
for b in "${builds[@]}"; do
	node="${b%%:*}"
	[[ -x $node ]] || { echo "ab-bench: $node is not an executable node binary" >&2; exit 2; }
	if [[ $b == *:* ]]; then
		client="${b#*:}"
		[[ -x $client ]] || { echo "ab-bench: $client is not an executable kahuna-bench binary" >&2; exit 2; }
	elif [[ -z $default_client ]]; then
		default_client="$dir/kahuna-bench"
		go build -o "$default_client" ./cmd/kahuna-bench
	fi
done

core_rtt="$dir/core-rtt"
(cd bench/peers && go build -o "$core_rtt" ./cmd/core-rtt)
# core prints core-rtt's median, or - where it cannot run (one CPU, not Linux).
core() { "$core_rtt" 2>/dev/null | awk '{ for (i = 1; i < NF; i++) if ($i == "median") { print $(i + 1); exit } }' | grep . || echo -; }

hz="$(getconf CLK_TCK)"
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; } # user + system clock ticks

# run BUILD [flags]: one fresh node, one kahuna-bench run; writes
# "ops count node_us client_us" to $dir/line.
run() {
	local build=$1
	shift
	local node="${build%%:*}" client="$default_client"
	[[ $build == *:* ]] && client="${build#*:}"
	rm -rf "$dir/data"
	"$node" --host 127.0.0.1 --http-ports 2370 --grpc-cleartext-ports 2372 --raft-port 2373 \
		--storage-path "$dir/data" --log-level warn >"$dir/node.log" 2>&1 &
	pid=$!
	local up=""
	for _ in $(seq 150); do
		if curl -sf http://127.0.0.1:2370/healthz >/dev/null; then
			up=1
			break
		fi
		sleep 0.1
	done
	if [[ -z $up ]]; then
		echo "ab-bench: $node did not come up; its log:" >&2
		cat "$dir/node.log" >&2
		exit 1
	fi
	local before after
	before="$(cpu "$pid")"
	local TIMEFORMAT='%U %S'
	if ! { time "$client" --endpoints http://127.0.0.1:2372 --duration "$duration" --warmup 0s \
		--progress=false "$@" >"$dir/out" 2>"$dir/err"; } 2>"$dir/time"; then
		echo "ab-bench: kahuna-bench failed against $node:" >&2
		cat "$dir/out" "$dir/err" >&2
		exit 1
	fi
	after="$(cpu "$pid")"
	stop_node
	# The report's first row (the lock op, or a hot lock's grant): its
	# count and ops/s, the first two numbers after the row's name.
	local row
	row="$(awk 'head && NF > 2 {
		for (i = 1; i < NF; i++) if ($i ~ /^[0-9,]+$/) { c = $i; o = $(i + 1); gsub(",", "", c); gsub(",", "", o); print c, o; exit }
	} $1 == "operation" { head = 1 }' "$dir/out")"
	if [[ -z $row || ${row%% *} == 0 ]]; then
		echo "ab-bench: no ops in kahuna-bench's report:" >&2
		cat "$dir/out" >&2
		exit 1
	fi
	awk -v row="$row" -v ticks=$((after - before)) -v hz="$hz" -v t="$(cat "$dir/time")" 'BEGIN {
		split(row, r, " "); split(t, c, " ")
		printf "%d %d %.2f %.2f\n", r[2], r[1], ticks / hz * 1e6 / r[1], (c[1] + c[2]) * 1e6 / r[1]
	}' >"$dir/line"
}

results="$dir/results"
: >"$results"
printf "%-6s %-40s %10s %12s %14s %10s\n" round build ops/s "node µs/op" "client µs/op" core-rtt
for r in $(seq "$rounds"); do
	order=("${builds[@]}")
	if ((r % 2 == 0)); then # a, b, then b, a: neither always runs first
		order=()
		for ((i = ${#builds[@]} - 1; i >= 0; i--)); do order+=("${builds[$i]}"); done
	fi
	for b in "${order[@]}"; do
		placement="$(core)"
		run "$b" "$@"
		read -r ops _ node_us client_us <"$dir/line"
		printf "%-6s %-40s %10s %12s %14s %10s\n" "$r" "$b" "$ops" "$node_us" "$client_us" "$placement"
		echo "$r $b $ops $node_us $client_us" >>"$results"
	done
done

echo
awk -v first="${builds[0]}" '
	{ ops[$2, $1] = $3; node[$2, $1] = $4; client[$2, $1] = $5; if (!($2 in seen)) { seen[$2] = 1; order[++nb] = $2 } rounds[$1] = 1 }
	function median(a, n,   i, j, t) {
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	END {
		nr = 0; for (r in rounds) nr++
		printf "%-40s %10s %12s %14s   %s\n", "build (medians)", "ops/s", "node µs/op", "client µs/op", "ops ÷ first build, by round"
		for (k = 1; k <= nb; k++) {
			b = order[k]; line = ""
			for (r = 1; r <= nr; r++) { o[r] = ops[b, r]; nd[r] = node[b, r]; cl[r] = client[b, r]; line = line sprintf(" %.2f", ops[b, r] / ops[first, r]) }
			printf "%-40s %10d %12.2f %14.2f  %s\n", b, median(o, nr), median(nd, nr), median(cl, nr), line
		}
	}' "$results"
