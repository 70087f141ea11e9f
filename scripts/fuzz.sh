#!/usr/bin/env bash
# Runs every fuzz target for a while, one after another, and prints a
# summary line per target. New crashers land in the package's
# testdata/fuzz/<Target>/ (commit them: the default test run replays them).
#
#   scripts/fuzz.sh            # 10 minutes per target
#   scripts/fuzz.sh 30s        # a quick pass
#   FUZZ_PARALLEL=1 scripts/fuzz.sh 10m   # leave a core free
set -uo pipefail
cd "$(dirname "$0")/.."

fuzztime=${1:-10m}
parallel=${FUZZ_PARALLEL:-$(nproc)}
targets=(
  "./transport FuzzUnaryRequest"
  "./transport FuzzBatchStream"
  "./transport FuzzLockStream"
  "./transport FuzzRESTBody"
  "./transport FuzzFastHead"
  "./transport FuzzFastJSON"
  "./transport FuzzFastResponse"
  "./transport FuzzWireDecode"
  "./durability FuzzDecodeBatch"
  "./cmd/kahuna FuzzParseFlags"
  "./internal/node FuzzConfig"
)
failed=0
for t in "${targets[@]}"; do
  read -r pkg name <<<"$t"
  log=$(mktemp)
  start=$(date +%s)
  if go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -parallel "$parallel" "$pkg" >"$log" 2>&1; then
    verdict=ok
  else
    verdict=FAILED
    failed=1
  fi
  # The last progress line says how many inputs ran.
  execs=$(grep -o 'execs: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*')
  echo "$verdict $pkg $name: ${execs:-?} execs in $(( $(date +%s) - start ))s"
  if [ "$verdict" = FAILED ]; then
    tail -30 "$log"
  fi
  rm -f "$log"
done
exit $failed
