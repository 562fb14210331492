#!/usr/bin/env bash
# CPU decode throughput of `kvgate serve` with the built-in model, per KV backend, at batch 1 and
# batch 8: a closed loop of C concurrent streaming requests (C = the batch the engine decodes)
# from `kvgate load`, each a ~1 KB synthetic prompt and exactly OUT generated tokens
# (ignore_eos). Prints output tokens/s over the measured requests and the TPOT median, per
# backend; the prompt's prefill is included in the run's duration (as a user would see it).
#
# Usage: readkv/server/bench/decode_throughput.sh [BUILD_DIR]   (default: build)
# Env: OUT (tokens per request, default 64), THREADS (torch threads of the server, default 0 =
# torch's default), BATCHES (default "1 8").
set -euo pipefail
BUILD=${1:-build}
KVGATE="$BUILD/apps/kvgate"
OUT=${OUT:-64}
THREADS=${THREADS:-0}
BATCHES=${BATCHES:-"1 8"}
[[ -x "$KVGATE" ]] || { echo "missing $KVGATE (build it first)" >&2; exit 3; }
WORK=$(mktemp -d)
PID=""
cleanup() {
  if [[ -n "$PID" ]]; then kill "$PID" 2> /dev/null || true; wait "$PID" 2> /dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "== machine: $(nproc) cores, $(uname -sr), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== date: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2> /dev/null || echo unknown)"
printf "%-70s %6s %10s %14s %12s\n" "backend" "batch" "requests" "output tok/s" "TPOT P50 ms"
while IFS= read -r backend; do
  [[ -z "$backend" ]] && continue
  # shellcheck disable=SC2086
  "$KVGATE" serve $backend --threads "$THREADS" --max-batch 8 --log-level warn \
    > "$WORK/serve.out" 2> "$WORK/serve.err" &
  PID=$!
  for _ in $(seq 300); do grep -q '^listening on ' "$WORK/serve.out" && break; sleep 0.1; done
  url="http://$(awk '/^listening on /{print $3}' "$WORK/serve.out")"
  for batch in $BATCHES; do
    requests=$((batch * 4 + batch))  # the first `batch` are warm-up
    "$KVGATE" load --url "$url" --concurrency "$batch" --requests "$requests" --warmup "$batch" \
      --input-len 160 --input-dist constant --output-len "$OUT" --output-dist constant \
      --seed 1 --quiet --json "$WORK/load.json" > /dev/null
    python3 - "$WORK/load.json" "$backend" "$batch" << 'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
s = doc["summary"] if "summary" in doc else doc
tpot = s.get("tpot", {}).get("p50_ms", float("nan"))
print("%-70s %6s %10d %14.1f %12.2f" % (sys.argv[2], sys.argv[3], s["completed"],
                                        s["output_token_throughput"], tpot))
PY
  done
  kill -TERM "$PID"; wait "$PID" || true; PID=""
done << 'LIST'
--kv dense
--kv fp8
--kv readkv --store-bits 8 --read-bits 4 --reader constrained
--kv readkv --store-bits 8 --read-bits 4 --reader flexible --kv-split 6:2
--kv readkv --store-bits 8 --read-bits 2 --reader constrained
LIST
